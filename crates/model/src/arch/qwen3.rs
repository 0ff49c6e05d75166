//! qwen3: no biases; per-head RMSNorm of queries and keys before NeoX RoPE; head_dim given
//! by `attention.key_length`, not `n_embd / n_head`.

use device::RopeMode;

use super::pre_norm::PreNormRecipe;
use crate::hparams::{Traits, PLAIN};
use crate::layers::attention::AttentionKind;
use crate::layers::ffn::GateUp;
use crate::layers::pre_norm::PreNormKind;

pub const RECIPE: PreNormRecipe = PreNormRecipe {
    name: "qwen3",
    traits: Traits {
        rope_mode: RopeMode::Neox,
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
