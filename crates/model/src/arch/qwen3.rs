//! qwen3: no biases; per-head RMSNorm of queries and keys before NeoX RoPE; head_dim given
//! by `attention.key_length`, not `n_embd / n_head`.

use device::RopeMode;

use super::Recipe;
use crate::error::Result;
use crate::hparams::{HParams, Traits, PLAIN};
use crate::layers::attention::AttentionKind;
use crate::layers::ffn::GateUp;
use crate::layers::pre_norm::{PreNorm, PreNormKind};
use crate::layers::Layer;
use crate::tensors::TensorLoader;

pub struct Qwen3;

impl Recipe for Qwen3 {
    fn name(&self) -> &'static str {
        "qwen3"
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
                qk_norm: true,
            },
            gate_up: GateUp::Apart,
        };
        Ok(Box::new(PreNorm::load(t, hp, il, kind)?))
    }
}
