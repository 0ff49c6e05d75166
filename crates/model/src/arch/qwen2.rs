//! qwen2 (Qwen2, Qwen2.5): biases on Q, K and V; NeoX RoPE; output head often tied to the
//! embeddings.

use super::{ArchSpec, PLAIN};
use device::RopeMode;

pub const SPEC: ArchSpec = ArchSpec {
    rope_mode: RopeMode::Neox,
    qkv_bias: true,
    ..PLAIN
};
