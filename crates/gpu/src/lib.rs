//! The wgpu backend: a [`device::Device`] whose buffers, weights and KV pool live on a GPU
//! (Vulkan, Metal or DX12 through wgpu; Mesa's lavapipe, a Vulkan device on the CPU, in
//! tests), its ops WGSL kernels recorded into one command buffer per forward.
//!
//! Precision: weights are dequantized in the shader (every GGUF type the CPU backend
//! takes) and meet f32 activations; sums are f32. KV storage is f32, f16, bf16 or q8_0
//! (q8_0 rows of a multiple of 64 elements).
//!
//! Recurrent states (`recurrent.rs`): a store per state layer beside the KV pool; the
//! convolution and the delta rule walk each sequence's rows in order, one invocation (or
//! workgroup) per channel (or value head).
//!
//! Mixtures of experts: the router's logits are read back and rows routed on the host (see
//! `moe.rs`), the one wait inside a mixture model's forward.
//!
//! Batch invariance: every kernel computes an output element in one order fixed by the
//! element's own coordinates (a matmul column's partial sums are taken over the same
//! chunks by the same threads and summed by the same tree whatever the row count; each
//! attention row's parts of 128 positions, aligned from position 0, are combined in order), with no atomics
//! and no split of a reduction that depends on the batch. So a row's bits are the same
//! alone or in any batch on one adapter; they may differ from the CPU's within the
//! tolerances the tests state.

mod context;
mod device_impl;
mod encoder;
mod formats;
mod gpu;
mod moe;
mod pipelines;
mod profile;
mod recurrent;
mod sparse;

pub use context::{adapter, adapter_for_tests, quiet_device_select, real_gpu, Adapter, Choice};
pub use formats::{form_name, Shader, Table, SHADERS};
pub use gpu::{matrix_bytes, scratch_bytes, Gpu};
