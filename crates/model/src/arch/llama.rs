//! llama (SmolLM2 and the Llama family): no biases; GGUF conversion permutes the Q/K rows
//! so that RoPE rotates adjacent pairs. Mixtral is a llama with `llama.expert_count`
//! experts: softmax over the chosen experts' router logits (top-k, then renormalized).

use super::{ArchSpec, ExpertWidth, Experts, RoutingDefaults, PLAIN};

pub const SPEC: ArchSpec = ArchSpec {
    experts: Experts::IfCounted(RoutingDefaults {
        norm_weights: true,
        gated_shared_expert: false,
        expert_width: ExpertWidth::FeedForward,
    }),
    ..PLAIN
};
