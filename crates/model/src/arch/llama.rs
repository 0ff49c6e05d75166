//! llama (SmolLM2 and the Llama family): no biases; GGUF conversion permutes the Q/K rows
//! so that RoPE rotates adjacent pairs. Mixtral is a llama with `llama.expert_count`
//! experts: softmax over the chosen experts' router logits (top-k, then renormalized).
//! Mistral is a llama whose every block attends through a sliding window, when the file
//! gives `llama.attention.sliding_window` (llama.cpp reads no window for llama files, and
//! its converter writes none for Mistral 7B: such files run as plain llamas, as there).

use super::Recipe;
use crate::error::Result;
use crate::hparams::{
    ExpertWidth, Experts, HParams, RoutingDefaults, SlidingPattern, Traits, PLAIN,
};
use crate::layers::attention::AttentionKind;
use crate::layers::ffn::GateUp;
use crate::layers::pre_norm::{PreNorm, PreNormKind};
use crate::layers::Layer;
use crate::tensors::TensorLoader;

pub struct Llama;

impl Recipe for Llama {
    fn name(&self) -> &'static str {
        "llama"
    }

    fn traits(&self) -> Traits {
        Traits {
            experts: Experts::IfCounted(RoutingDefaults {
                norm_weights: true,
                gated_shared_expert: false,
                expert_width: ExpertWidth::FeedForward,
            }),
            sliding: Some(SlidingPattern {
                global_every: None,
                rope_freq_base: None,
            }),
            ..PLAIN
        }
    }

    fn layer(&self, t: &mut TensorLoader, hp: &HParams, il: usize) -> Result<Box<dyn Layer>> {
        let kind = PreNormKind {
            attention: AttentionKind {
                qkv_bias: false,
                qk_norm: false,
            },
            gate_up: GateUp::Apart,
        };
        Ok(Box::new(PreNorm::load(t, hp, il, kind)?))
    }
}
