//! qwen3moe (Qwen3-30B-A3B, Qwen3-235B-A22B): qwen3's attention; every block a mixture
//! whose chosen experts' softmax weights are renormalized to sum to one; no shared expert.

use device::RopeMode;

use super::Recipe;
use crate::error::Result;
use crate::hparams::{ExpertWidth, Experts, HParams, RoutingDefaults, Traits, PLAIN};
use crate::layers::attention::AttentionKind;
use crate::layers::ffn::GateUp;
use crate::layers::pre_norm::{PreNorm, PreNormKind};
use crate::layers::Layer;
use crate::tensors::TensorLoader;

pub struct Qwen3Moe;

impl Recipe for Qwen3Moe {
    fn name(&self) -> &'static str {
        "qwen3moe"
    }

    fn traits(&self) -> Traits {
        Traits {
            rope_mode: RopeMode::Neox,
            experts: Experts::Always(RoutingDefaults {
                norm_weights: true,
                gated_shared_expert: false,
                expert_width: ExpertWidth::FeedForwardPerUsed,
            }),
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
