//! qwen2moe (Qwen1.5-MoE, Qwen2-57B-A14B): qwen2's attention; every block a mixture whose
//! chosen experts keep their softmax weights as they are (no renormalization), plus a
//! shared expert scaled by a sigmoid gate of its own (`ffn_gate_inp_shexp`).

use device::RopeMode;

use super::pre_norm::PreNormRecipe;
use crate::hparams::{ExpertWidth, Experts, RoutingDefaults, Traits, PLAIN};
use crate::layers::attention::AttentionKind;
use crate::layers::ffn::GateUp;
use crate::layers::pre_norm::PreNormKind;

pub const RECIPE: PreNormRecipe = PreNormRecipe {
    name: "qwen2moe",
    traits: Traits {
        rope_mode: RopeMode::Neox,
        experts: Experts::Always(RoutingDefaults {
            norm_weights: false,
            gated_shared_expert: true,
            expert_width: ExpertWidth::FeedForwardPerUsed,
        }),
        ..PLAIN
    },
    kind: PreNormKind {
        attention: AttentionKind {
            qkv_bias: true,
            qk_norm: false,
        },
        gate_up: GateUp::Apart,
    },
};
