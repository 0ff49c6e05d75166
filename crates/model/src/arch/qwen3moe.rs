//! qwen3moe (Qwen3-30B-A3B, Qwen3-235B-A22B): qwen3's attention; every block a mixture
//! whose chosen experts' softmax weights are renormalized to sum to one; no shared expert.

use super::{ArchSpec, ExpertWidth, Experts, RoutingDefaults, PLAIN};
use device::RopeMode;

pub const SPEC: ArchSpec = ArchSpec {
    rope_mode: RopeMode::Neox,
    qk_norm: true,
    experts: Experts::Always(RoutingDefaults {
        norm_weights: true,
        gated_shared_expert: false,
        expert_width: ExpertWidth::FeedForwardPerUsed,
    }),
    ..PLAIN
};
