//! qwen3: no biases; per-head RMSNorm of queries and keys before NeoX RoPE; head_dim given
//! by `attention.key_length`, not `n_embd / n_head`.

use super::{ArchSpec, PLAIN};
use device::RopeMode;

pub const SPEC: ArchSpec = ArchSpec {
    rope_mode: RopeMode::Neox,
    qk_norm: true,
    ..PLAIN
};
