//! qwen2moe (Qwen1.5-MoE, Qwen2-57B-A14B): qwen2's attention; every block a mixture whose
//! chosen experts keep their softmax weights as they are (no renormalization), plus a
//! shared expert scaled by a sigmoid gate of its own (`ffn_gate_inp_shexp`).

use device::RopeMode;

use super::Recipe;
use crate::error::Result;
use crate::hparams::{ExpertWidth, Experts, HParams, RoutingDefaults, Traits, PLAIN};
use crate::layers::attention::AttentionKind;
use crate::layers::ffn::GateUp;
use crate::layers::pre_norm::{PreNorm, PreNormKind};
use crate::layers::Layer;
use crate::tensors::TensorLoader;

pub struct Qwen2Moe;

impl Recipe for Qwen2Moe {
    fn name(&self) -> &'static str {
        "qwen2moe"
    }

    fn traits(&self) -> Traits {
        Traits {
            rope_mode: RopeMode::Neox,
            experts: Experts::Always(RoutingDefaults {
                norm_weights: false,
                gated_shared_expert: true,
                expert_width: ExpertWidth::FeedForwardPerUsed,
            }),
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
