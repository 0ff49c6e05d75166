//! One file per architecture: what sets it apart, and its block as a recipe composed from the
//! shared pieces of [`crate::layers`].

mod gemma3;
mod llama;
mod phi3;
mod qwen2;
mod qwen2moe;
mod qwen3;
mod qwen3moe;

use device::{Buf, Device, Op, RopeMode};

use crate::forward::Scratch;
use crate::upload::LayerMats;
use crate::{Error, Model, Result};

/// One transformer block of an architecture: `hidden` (`[n, n_embd]`) through block `il`
/// (weights `lw`), in place, with `s` for its intermediate values.
pub type Block = fn(&Model, &mut dyn Device, usize, &LayerMats, Buf, usize, &Scratch);

/// The architectures tandem runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arch {
    /// Also Mixtral: a llama whose metadata gives `llama.expert_count`.
    Llama,
    Qwen2,
    Qwen2Moe,
    Qwen3,
    Qwen3Moe,
    Gemma3,
    Phi3,
}

/// The features of a transformer block that vary by architecture.
#[derive(Debug, Clone, Copy)]
pub struct ArchSpec {
    pub rope_mode: RopeMode,
    /// `attn_q.bias`, `attn_k.bias`, `attn_v.bias` present.
    pub qkv_bias: bool,
    /// Per-head RMSNorm of queries and keys before RoPE (`attn_q_norm`, `attn_k_norm`).
    pub qk_norm: bool,
    pub experts: Experts,
    /// The feed-forward's gate and up matrices are one `ffn_up` of `2 · n_ff` rows, the
    /// gate's first (Phi-3).
    pub fused_gate_up: bool,
    /// Norms of the attention and feed-forward outputs before their residual adds
    /// (`post_attention_norm`, `post_ffw_norm`).
    pub post_norms: bool,
    /// Embeddings are multiplied by `√n_embd`.
    pub scaled_embeddings: bool,
    /// Sliding-window attention when the file gives `attention.sliding_window`.
    pub sliding: Option<SlidingPattern>,
    pub block: Block,
    /// Device ops the block uses besides those every model needs ([`Model::ops`]).
    pub extra_ops: &'static [Op],
}

/// Which blocks attend through a sliding window, and their RoPE base.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SlidingPattern {
    /// `Some(p)`: of every `p` blocks, the last attends globally and the others through the
    /// window; `None`: every block attends through it.
    pub global_every: Option<usize>,
    /// RoPE base of the windowed blocks when not `rope.freq_base`.
    pub rope_freq_base: Option<f32>,
}

impl SlidingPattern {
    /// Whether block `il` attends through the window.
    pub fn windowed(&self, il: usize) -> bool {
        self.global_every.is_none_or(|p| il % p < p - 1)
    }
}

/// The spec most architectures share: no biases or Q/K norms, dense, pre-norm blocks.
pub(crate) const PLAIN: ArchSpec = ArchSpec {
    rope_mode: RopeMode::Normal,
    qkv_bias: false,
    qk_norm: false,
    experts: Experts::Never,
    fused_gate_up: false,
    post_norms: false,
    scaled_embeddings: false,
    sliding: None,
    block: crate::layers::pre_norm_block,
    extra_ops: &[],
};

/// Whether the feed-forward blocks are mixtures of experts, and the routing the
/// architecture implies where its metadata is silent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Experts {
    /// Dense feed-forward blocks only.
    Never,
    /// A mixture when the metadata gives `{arch}.expert_count`, dense otherwise.
    IfCounted(RoutingDefaults),
    /// Always a mixture.
    Always(RoutingDefaults),
}

/// What an architecture's mixture does unless `{arch}.expert_*` keys say otherwise.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RoutingDefaults {
    /// The chosen experts' weights are divided by their sum.
    pub norm_weights: bool,
    /// A shared expert (`ffn_*_shexp`) scaled by `sigmoid(ffn_gate_inp_shexp · x)` is added.
    pub gated_shared_expert: bool,
    /// An expert's width when `{arch}.expert_feed_forward_length` is absent.
    pub expert_width: ExpertWidth,
}

/// Where an expert's width comes from when the metadata does not give it (llama.cpp's
/// reading of each architecture).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExpertWidth {
    /// `feed_forward_length` (Mixtral).
    FeedForward,
    /// `feed_forward_length / expert_used_count` (qwen2moe, qwen3moe).
    FeedForwardPerUsed,
}

impl Arch {
    /// The architecture named by `general.architecture`.
    pub fn from_name(name: &str) -> Result<Arch> {
        match name {
            "llama" => Ok(Arch::Llama),
            "qwen2" => Ok(Arch::Qwen2),
            "qwen2moe" => Ok(Arch::Qwen2Moe),
            "qwen3" => Ok(Arch::Qwen3),
            "qwen3moe" => Ok(Arch::Qwen3Moe),
            "gemma3" => Ok(Arch::Gemma3),
            "phi3" => Ok(Arch::Phi3),
            other => Err(Error::UnknownArch(other.to_string())),
        }
    }

    /// The prefix of this architecture's metadata keys.
    pub fn name(self) -> &'static str {
        match self {
            Arch::Llama => "llama",
            Arch::Qwen2 => "qwen2",
            Arch::Qwen2Moe => "qwen2moe",
            Arch::Qwen3 => "qwen3",
            Arch::Qwen3Moe => "qwen3moe",
            Arch::Gemma3 => "gemma3",
            Arch::Phi3 => "phi3",
        }
    }

    pub fn spec(self) -> ArchSpec {
        match self {
            Arch::Llama => llama::SPEC,
            Arch::Qwen2 => qwen2::SPEC,
            Arch::Qwen2Moe => qwen2moe::SPEC,
            Arch::Qwen3 => qwen3::SPEC,
            Arch::Qwen3Moe => qwen3moe::SPEC,
            Arch::Gemma3 => gemma3::SPEC,
            Arch::Phi3 => phi3::SPEC,
        }
    }
}
