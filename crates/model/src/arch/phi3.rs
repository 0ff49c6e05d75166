//! phi3 (Phi-3, Phi-3.5 and Phi-4 mini): a llama with NeoX RoPE whose query, key and value
//! matrices may be one `attn_qkv` (split by rows at load, as for any architecture) and
//! whose feed-forward gate and up are one `ffn_up` of `2 · n_ff` rows, the gate's first.
//! Like llama.cpp, it ignores `phi3.attention.sliding_window` (its converters write values
//! that are not the models' windows) and refuses LongRoPE's `rope_factors_*` tensors.

use device::RopeMode;

use super::Recipe;
use crate::error::Result;
use crate::hparams::{HParams, Traits, PLAIN};
use crate::layers::attention::AttentionKind;
use crate::layers::ffn::GateUp;
use crate::layers::pre_norm::{PreNorm, PreNormKind};
use crate::layers::Layer;
use crate::tensors::TensorLoader;

pub struct Phi3;

impl Recipe for Phi3 {
    fn name(&self) -> &'static str {
        "phi3"
    }

    fn traits(&self) -> Traits {
        Traits {
            rope_mode: RopeMode::Neox,
            ..PLAIN
        }
    }

    fn layer(&self, t: &mut TensorLoader, hp: &HParams, il: usize) -> Result<Box<dyn Layer>> {
        let kind = PreNormKind {
            attention: AttentionKind {
                qkv_bias: false,
                qk_norm: false,
            },
            gate_up: GateUp::Fused,
        };
        Ok(Box::new(PreNorm::load(t, hp, il, kind)?))
    }
}
