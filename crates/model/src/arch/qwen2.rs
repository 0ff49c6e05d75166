//! qwen2 (Qwen2, Qwen2.5): biases on Q, K and V; NeoX RoPE; output head often tied to the
//! embeddings.

use device::RopeMode;

use super::pre_norm::PreNormRecipe;
use crate::hparams::{Traits, PLAIN};
use crate::layers::attention::AttentionKind;
use crate::layers::ffn::GateUp;
use crate::layers::pre_norm::PreNormKind;

pub const RECIPE: PreNormRecipe = PreNormRecipe {
    name: "qwen2",
    traits: Traits {
        rope_mode: RopeMode::Neox,
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
