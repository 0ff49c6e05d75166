//! llama (SmolLM2 and the Llama family): no biases; GGUF conversion permutes the Q/K rows
//! so that RoPE rotates adjacent pairs.

use super::ArchSpec;
use kernels::ops::RopeMode;

pub const SPEC: ArchSpec = ArchSpec {
    rope_mode: RopeMode::Normal,
    qkv_bias: false,
    qk_norm: false,
};
