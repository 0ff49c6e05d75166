//! One file per architecture: what sets it apart from the shared transformer block.

mod llama;
mod qwen2;
mod qwen2moe;
mod qwen3;
mod qwen3moe;

use device::RopeMode;

use crate::{Error, Result};

/// The architectures tandem runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arch {
    /// Also Mixtral: a llama whose metadata gives `llama.expert_count`.
    Llama,
    Qwen2,
    Qwen2Moe,
    Qwen3,
    Qwen3Moe,
}

/// The features of a transformer block that vary by architecture.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ArchSpec {
    pub rope_mode: RopeMode,
    /// `attn_q.bias`, `attn_k.bias`, `attn_v.bias` present.
    pub qkv_bias: bool,
    /// Per-head RMSNorm of queries and keys before RoPE (`attn_q_norm`, `attn_k_norm`).
    pub qk_norm: bool,
    pub experts: Experts,
}

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
        }
    }

    pub fn spec(self) -> ArchSpec {
        match self {
            Arch::Llama => llama::SPEC,
            Arch::Qwen2 => qwen2::SPEC,
            Arch::Qwen2Moe => qwen2moe::SPEC,
            Arch::Qwen3 => qwen3::SPEC,
            Arch::Qwen3Moe => qwen3moe::SPEC,
        }
    }
}
