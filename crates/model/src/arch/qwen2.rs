//! qwen2 (Qwen2, Qwen2.5): biases on Q, K and V; NeoX RoPE; output head often tied to the
//! embeddings.

use device::RopeMode;

use super::Recipe;
use crate::error::Result;
use crate::hparams::{HParams, Traits, PLAIN};
use crate::layers::attention::AttentionKind;
use crate::layers::ffn::GateUp;
use crate::layers::pre_norm::{PreNorm, PreNormKind};
use crate::layers::Layer;
use crate::tensors::TensorLoader;

pub struct Qwen2;

impl Recipe for Qwen2 {
    fn name(&self) -> &'static str {
        "qwen2"
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
                qkv_bias: true,
                qk_norm: false,
            },
            gate_up: GateUp::Apart,
        };
        Ok(Box::new(PreNorm::load(t, hp, il, kind)?))
    }
}
