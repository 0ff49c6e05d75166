//! The pre-norm block (llama, qwen2, qwen3, phi3 and their mixtures):
//! `hidden += attn(rms_norm(hidden))`, then `hidden += ffn(rms_norm(hidden))`, each
//! residual add fused into its projection.

use device::{Buf, Device};

use super::attention::{Attention, AttentionKind};
use super::ffn::{Activation, Ffn, GateUp};
use super::{Cx, Layer};
use crate::error::Result;
use crate::hparams::HParams;
use crate::tensors::{TensorLoader, VecId};

/// How an architecture's pre-norm blocks store their tensors.
#[derive(Debug, Clone, Copy)]
pub struct PreNormKind {
    pub attention: AttentionKind,
    pub gate_up: GateUp,
}

/// See the module doc. `attn_norm`, `ffn_norm`: `[n_embd]`.
pub struct PreNorm {
    attn_norm: VecId,
    attn: Attention,
    ffn_norm: VecId,
    ffn: Ffn,
}

impl PreNorm {
    /// Block `il`'s tensors.
    pub fn load(
        t: &mut TensorLoader,
        hp: &HParams,
        il: usize,
        kind: PreNormKind,
    ) -> Result<PreNorm> {
        let e = hp.n_embd;
        Ok(PreNorm {
            attn_norm: t.vector(&format!("blk.{il}.attn_norm.weight"), e)?,
            attn: Attention::load(t, hp, il, kind.attention)?,
            ffn_norm: t.vector(&format!("blk.{il}.ffn_norm.weight"), e)?,
            ffn: Ffn::load(t, hp, il, kind.gate_up)?,
        })
    }
}

impl Layer for PreNorm {
    fn forward(&self, cx: &Cx<'_>, dev: &mut dyn Device, hidden: Buf, n: usize) {
        let (hp, s) = (cx.hp, cx.s);
        dev.rms_norm(hidden, cx.t[self.attn_norm], n, hp.n_embd, hp.rms_eps, s.x);
        self.attn.attend(cx, dev, n);
        self.attn.project(cx, dev, n, Some(hidden));
        dev.rms_norm(hidden, cx.t[self.ffn_norm], n, hp.n_embd, hp.rms_eps, s.x);
        self.ffn.forward(cx, dev, hidden, n, Activation::Silu);
    }
}
