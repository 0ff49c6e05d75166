//! Self-attention with the options the transformer family varies: biases on Q, K and V,
//! per-head Q/K norms, a fused `attn_qkv`, a sliding window on some blocks.

use device::{AttnSpec, Buf, Device, MatOut, RopeSpec};

use super::Cx;
use crate::error::Result;
use crate::hparams::HParams;
use crate::tensors::{MatId, TensorLoader, VecId};

/// How an architecture's attention stores its tensors.
#[derive(Debug, Clone, Copy)]
pub struct AttentionKind {
    /// `attn_q.bias`, `attn_k.bias`, `attn_v.bias` present.
    pub qkv_bias: bool,
    /// Per-head RMSNorm of queries and keys before RoPE (`attn_q_norm`, `attn_k_norm`).
    pub qk_norm: bool,
}

/// A block's attention. `q`: `[q_dim, n_embd]`; `k`, `v`: `[kv_dim, n_embd]`; `output`:
/// `[n_embd, q_dim]`; biases `[q_dim]`/`[kv_dim]`; Q/K norms `[head_dim]`.
pub struct Attention {
    q: MatId,
    k: MatId,
    v: MatId,
    q_bias: Option<VecId>,
    k_bias: Option<VecId>,
    v_bias: Option<VecId>,
    q_norm: Option<VecId>,
    k_norm: Option<VecId>,
    output: MatId,
}

impl Attention {
    /// Block `il`'s attention tensors: `attn_{q,k,v}`, or the rows of one `attn_qkv` where
    /// the file has it (as llama.cpp accepts for any architecture).
    pub fn load(
        t: &mut TensorLoader,
        hp: &HParams,
        il: usize,
        kind: AttentionKind,
    ) -> Result<Attention> {
        let (e, q, kv, hd) = (hp.n_embd, hp.q_dim(), hp.kv_dim(), hp.head_dim);
        let n = |s: &str| format!("blk.{il}.{s}");
        let [wq, wk, wv] = if t.has(&n("attn_qkv.weight")) {
            let parts = t.row_parts(&n("attn_qkv.weight"), &[q, kv, kv], e)?;
            parts.try_into().expect("three parts")
        } else {
            [
                t.matrix(&n("attn_q.weight"), q, e)?,
                t.matrix(&n("attn_k.weight"), kv, e)?,
                t.matrix(&n("attn_v.weight"), kv, e)?,
            ]
        };
        let output = t.matrix(&n("attn_output.weight"), e, q)?;
        let mut opt =
            |on: bool, name: &str, len: usize| on.then(|| t.vector(&n(name), len)).transpose();
        Ok(Attention {
            q: wq,
            k: wk,
            v: wv,
            q_bias: opt(kind.qkv_bias, "attn_q.bias", q)?,
            k_bias: opt(kind.qkv_bias, "attn_k.bias", kv)?,
            v_bias: opt(kind.qkv_bias, "attn_v.bias", kv)?,
            q_norm: opt(kind.qk_norm, "attn_q_norm.weight", hd)?,
            k_norm: opt(kind.qk_norm, "attn_k_norm.weight", hd)?,
            output,
        })
    }

    /// Self-attention over `n` rows, from the normalized input `s.x` to the heads' output
    /// `s.attn` (`[n, q_dim]`, before the output projection): Q, K and V (with their
    /// biases), then [`heads`] with the block's Q/K norms.
    pub fn attend(&self, cx: &Cx<'_>, dev: &mut dyn Device, n: usize) {
        self.qkv(cx, dev, n);
        heads(cx, dev, n, self.q_norm.zip(self.k_norm));
    }

    /// [`Attention::attend`] for the rows of a block drafter's block, which see one another
    /// (the step's later rows of their sequence too: [`device::Op::BlockAttention`]).
    pub fn attend_block(&self, cx: &Cx<'_>, dev: &mut dyn Device, n: usize) {
        self.qkv(cx, dev, n);
        heads_with(cx, dev, n, self.q_norm.zip(self.k_norm), false);
    }

    /// Q, K and V of `n` rows (with their biases) from `s.x` into `s.q`, `s.k`, `s.v`.
    fn qkv(&self, cx: &Cx<'_>, dev: &mut dyn Device, n: usize) {
        let (s, t) = (cx.s, cx.t);
        // q: [n, n_head * head_dim], k and v: [n, n_head_kv * head_dim]
        let out = |y, bias| MatOut {
            y,
            bias: t.opt(bias),
            residual: None,
        };
        dev.matmul(
            &[t[self.q], t[self.k], t[self.v]],
            s.x,
            n,
            &[
                out(s.q, self.q_bias),
                out(s.k, self.k_bias),
                out(s.v, self.v_bias),
            ],
        );
    }

    /// The keys and values of `n` rows whose input is `x` (`[n, n_embd]`), stored without
    /// attending (a block drafter's context, from the target's fused features): the keys
    /// normed per head where the block norms them, and turned by RoPE.
    pub fn store(&self, cx: &Cx<'_>, dev: &mut dyn Device, x: Buf, n: usize) {
        let (hp, s, t) = (cx.hp, cx.s, cx.t);
        let out = |y, bias| MatOut {
            y,
            bias: t.opt(bias),
            residual: None,
        };
        dev.matmul(
            &[t[self.k], t[self.v]],
            x,
            n,
            &[out(s.k, self.k_bias), out(s.v, self.v_bias)],
        );
        if let Some(kn) = self.k_norm {
            dev.rms_norm(s.k, t[kn], n * hp.n_head_kv, hp.head_dim, hp.rms_eps, s.k);
        }
        if hp.n_rot > 0 {
            dev.rope(s.k, hp.n_head_kv, &rope(hp, cx.il));
        }
        dev.kv_store(cx.kv_layer, s.k, s.v);
    }

    /// The output projection of [`Attention::attend`]'s heads:
    /// `s.proj = attn_output · s.attn`, and `residual += s.proj` when given.
    pub fn project(&self, cx: &Cx<'_>, dev: &mut dyn Device, n: usize, residual: Option<Buf>) {
        let proj = MatOut {
            y: cx.s.proj,
            bias: None,
            residual,
        };
        dev.matmul(&[cx.t[self.output]], cx.s.attn, n, &[proj]);
    }
}

/// Attention of `n` rows from their queries, keys and values in `s.q` (`[n, q_dim]`),
/// `s.k`, `s.v` (`[n, kv_dim]`) to the heads' output `s.attn`: the per-head Q/K norms
/// `norms` where given, RoPE with the block's base (none where `n_rot` is 0), then each
/// row's keys and values stored before any row attends; a row at `pos` attends positions
/// `0..=pos` of its own sequence, or the last window of them in a windowed block.
pub fn heads(cx: &Cx<'_>, dev: &mut dyn Device, n: usize, norms: Option<(VecId, VecId)>) {
    heads_with(cx, dev, n, norms, true);
}

/// [`heads`], causal or (a block drafter's block) not: [`AttnSpec::causal`].
fn heads_with(
    cx: &Cx<'_>,
    dev: &mut dyn Device,
    n: usize,
    norms: Option<(VecId, VecId)>,
    causal: bool,
) {
    let (hp, s, t, il) = (cx.hp, cx.s, cx.t, cx.il);
    if let Some((qn, kn)) = norms {
        dev.rms_norm(s.q, t[qn], n * hp.n_head, hp.head_dim, hp.rms_eps, s.q);
        dev.rms_norm(s.k, t[kn], n * hp.n_head_kv, hp.head_dim, hp.rms_eps, s.k);
    }
    if hp.n_rot > 0 {
        let rope = rope(hp, il);
        dev.rope(s.q, hp.n_head, &rope);
        dev.rope(s.k, hp.n_head_kv, &rope);
    }
    dev.kv_store(cx.kv_layer, s.k, s.v);
    let spec = AttnSpec {
        n_head: hp.n_head,
        n_head_kv: hp.n_head_kv,
        head_dim: hp.head_dim,
        scale: hp.attn_scale,
        window: hp.window(il),
        causal,
    };
    dev.attention(cx.kv_layer, s.q, s.attn, &spec);
}

/// Block `il`'s RoPE.
fn rope(hp: &HParams, il: usize) -> RopeSpec {
    RopeSpec {
        head_dim: hp.head_dim,
        n_rot: hp.n_rot,
        mode: hp.rope_mode,
        freq_base: hp.rope_base(il),
        scaling: hp.rope_scaling(il),
    }
}
