//! Gated attention (Qwen3-Next, Qwen 3.5): one projection gives each head's query and an
//! output gate side by side; the heads' output is multiplied by `sigmoid(gate)` before the
//! output projection. Per-head Q/K norms, RoPE, grouped-query attention as
//! [`super::attention::heads`].

use device::{Buf, Device, MatOut};

use super::attention::heads;
use super::Cx;
use crate::error::Result;
use crate::hparams::HParams;
use crate::tensors::{MatId, TensorLoader, VecId};

/// `attn_q`: `[2 · q_dim, n_embd]`, per head `head_dim` rows of query then `head_dim` of
/// gate; `attn_k`, `attn_v`: `[kv_dim, n_embd]`; `attn_output`: `[n_embd, q_dim]`;
/// `attn_q_norm`, `attn_k_norm`: `[head_dim]`.
pub struct GatedAttention {
    q_gate: MatId,
    k: MatId,
    v: MatId,
    q_norm: VecId,
    k_norm: VecId,
    output: MatId,
}

impl GatedAttention {
    /// Buffers of [`crate::Scratch::extra`] it uses: the joint projection `[2 · q_dim]`,
    /// then the gate `[q_dim]`.
    pub fn scratch(hp: &HParams) -> Vec<usize> {
        vec![2 * hp.q_dim(), hp.q_dim()]
    }

    pub fn load(t: &mut TensorLoader, hp: &HParams, il: usize) -> Result<GatedAttention> {
        let (e, q, kv, hd) = (hp.n_embd, hp.q_dim(), hp.kv_dim(), hp.head_dim);
        let n = |s: &str| format!("blk.{il}.{s}.weight");
        Ok(GatedAttention {
            q_gate: t.matrix(&n("attn_q"), 2 * q, e)?,
            k: t.matrix(&n("attn_k"), kv, e)?,
            v: t.matrix(&n("attn_v"), kv, e)?,
            q_norm: t.vector(&n("attn_q_norm"), hd)?,
            k_norm: t.vector(&n("attn_k_norm"), hd)?,
            output: t.matrix(&n("attn_output"), e, q)?,
        })
    }

    /// From the normalized input `s.x` (`[n, n_embd]`): `residual += attn_output ·
    /// (attention · sigmoid(gate))`.
    pub fn forward(&self, cx: &Cx<'_>, dev: &mut dyn Device, n: usize, residual: Buf) {
        let (hp, s, t) = (cx.hp, cx.s, cx.t);
        let (joint, gate) = (s.extra[0], s.extra[1]);
        dev.matmul(
            &[t[self.q_gate], t[self.k], t[self.v]],
            s.x,
            n,
            &[MatOut::to(joint), MatOut::to(s.k), MatOut::to(s.v)],
        );
        // The joint rows as [n · n_head · 2, head_dim]: even rows queries, odd rows gates.
        let halves =
            |odd: usize| -> Vec<usize> { (0..n * hp.n_head).map(|i| 2 * i + odd).collect() };
        dev.gather_rows(joint, &halves(0), hp.head_dim, s.q);
        dev.gather_rows(joint, &halves(1), hp.head_dim, gate);
        heads(cx, dev, n, Some((self.q_norm, self.k_norm)));
        dev.sigmoid(gate, n * hp.q_dim());
        dev.mul(s.attn, gate, n * hp.q_dim());
        let out = MatOut {
            y: s.proj,
            bias: None,
            residual: Some(residual),
        };
        dev.matmul(&[t[self.output]], s.attn, n, &[out]);
    }
}
