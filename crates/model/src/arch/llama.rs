//! llama (SmolLM2 and the Llama family): no biases; GGUF conversion permutes the Q/K rows
//! so that RoPE rotates adjacent pairs. Mixtral is a llama with `llama.expert_count`
//! experts: softmax over the chosen experts' router logits (top-k, then renormalized).
//! Mistral is a llama whose every block attends through a sliding window, when the file
//! gives `llama.attention.sliding_window` (llama.cpp reads no window for llama files, and
//! its converter writes none for Mistral 7B: such files run as plain llamas, as there).

use super::pre_norm::PreNormRecipe;
use crate::hparams::{ExpertWidth, Experts, RoutingDefaults, SlidingPattern, Traits, PLAIN};
use crate::layers::attention::AttentionKind;
use crate::layers::ffn::GateUp;
use crate::layers::pre_norm::PreNormKind;

pub const RECIPE: PreNormRecipe = PreNormRecipe {
    name: "llama",
    traits: Traits {
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
    },
    kind: PreNormKind {
        attention: AttentionKind {
            qkv_bias: false,
            qk_norm: false,
        },
        gate_up: GateUp::Apart,
    },
};
