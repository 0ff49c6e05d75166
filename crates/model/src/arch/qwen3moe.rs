//! qwen3moe (Qwen3-30B-A3B, Qwen3-235B-A22B): qwen3's attention; every block a mixture
//! whose chosen experts' softmax weights are renormalized to sum to one; no shared expert.

use device::RopeMode;

use super::pre_norm::PreNormRecipe;
use crate::hparams::{ExpertWidth, Experts, RoutingDefaults, Traits, PLAIN};
use crate::layers::attention::AttentionKind;
use crate::layers::ffn::GateUp;
use crate::layers::pre_norm::PreNormKind;

pub const RECIPE: PreNormRecipe = PreNormRecipe {
    name: "qwen3moe",
    traits: Traits {
        rope_mode: RopeMode::Neox,
        experts: Experts::Always(RoutingDefaults {
            norm_weights: true,
            gated_shared_expert: false,
            expert_width: ExpertWidth::FeedForwardPerUsed,
        }),
        ..PLAIN
    },
    kind: PreNormKind {
        attention: AttentionKind {
            qkv_bias: false,
            qk_norm: true,
        },
        gate_up: GateUp::Apart,
    },
};
