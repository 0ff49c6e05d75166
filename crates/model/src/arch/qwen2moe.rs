//! qwen2moe (Qwen1.5-MoE, Qwen2-57B-A14B): qwen2's attention; every block a mixture whose
//! chosen experts keep their softmax weights as they are (no renormalization), plus a
//! shared expert scaled by a sigmoid gate of its own (`ffn_gate_inp_shexp`).

use super::{ArchSpec, ExpertWidth, Experts, RoutingDefaults, PLAIN};
use device::RopeMode;

pub const SPEC: ArchSpec = ArchSpec {
    rope_mode: RopeMode::Neox,
    qkv_bias: true,
    experts: Experts::Always(RoutingDefaults {
        norm_weights: false,
        gated_shared_expert: true,
        expert_width: ExpertWidth::FeedForwardPerUsed,
    }),
    ..PLAIN
};
