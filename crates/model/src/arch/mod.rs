//! One file per architecture: what sets it apart from the shared transformer block.

mod llama;
mod qwen2;
mod qwen3;

use kernels::ops::RopeMode;

use crate::{Error, Result};

/// The architectures tandem runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arch {
    Llama,
    Qwen2,
    Qwen3,
}

/// The features of a dense transformer block that vary by architecture.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ArchSpec {
    pub rope_mode: RopeMode,
    /// `attn_q.bias`, `attn_k.bias`, `attn_v.bias` present.
    pub qkv_bias: bool,
    /// Per-head RMSNorm of queries and keys before RoPE (`attn_q_norm`, `attn_k_norm`).
    pub qk_norm: bool,
}

impl Arch {
    /// The architecture named by `general.architecture`.
    pub fn from_name(name: &str) -> Result<Arch> {
        match name {
            "llama" => Ok(Arch::Llama),
            "qwen2" => Ok(Arch::Qwen2),
            "qwen3" => Ok(Arch::Qwen3),
            other => Err(Error::UnknownArch(other.to_string())),
        }
    }

    /// The prefix of this architecture's metadata keys.
    pub fn name(self) -> &'static str {
        match self {
            Arch::Llama => "llama",
            Arch::Qwen2 => "qwen2",
            Arch::Qwen3 => "qwen3",
        }
    }

    pub fn spec(self) -> ArchSpec {
        match self {
            Arch::Llama => llama::SPEC,
            Arch::Qwen2 => qwen2::SPEC,
            Arch::Qwen3 => qwen3::SPEC,
        }
    }
}
