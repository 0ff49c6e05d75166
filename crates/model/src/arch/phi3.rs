//! phi3 (Phi-3, Phi-3.5 and Phi-4 mini): a llama with NeoX RoPE whose query, key and value
//! matrices may be one `attn_qkv` (split by rows at load, as for any architecture) and
//! whose feed-forward gate and up are one `ffn_up` of `2 · n_ff` rows, the gate's first.
//! Like llama.cpp, it ignores `phi3.attention.sliding_window` (its converters write values
//! that are not the models' windows) and refuses LongRoPE's `rope_factors_*` tensors.

use device::RopeMode;

use super::pre_norm::PreNormRecipe;
use crate::hparams::{Traits, PLAIN};
use crate::layers::attention::AttentionKind;
use crate::layers::ffn::GateUp;
use crate::layers::pre_norm::PreNormKind;

pub const RECIPE: PreNormRecipe = PreNormRecipe {
    name: "phi3",
    traits: Traits {
        rope_mode: RopeMode::Neox,
        ..PLAIN
    },
    kind: PreNormKind {
        attention: AttentionKind {
            qkv_bias: false,
            qk_norm: false,
        },
        gate_up: GateUp::Fused,
    },
};
