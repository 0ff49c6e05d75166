//! Gated DeltaNet (Qwen3-Next, Qwen 3.5), the linear-attention block of the hybrids, as
//! llama.cpp computes it:
//!
//! ```text
//! qkv  = silu(conv(attn_qkv · x))          causal, ssm.conv_kernel taps, state: last k-1 rows
//! q, k = l2_norm per head of qkv's first two parts (n_k_heads each), v its third (n_v_heads)
//! g    = softplus(ssm_alpha · x + ssm_dt.bias)     β = sigmoid(ssm_beta · x)
//! o    = delta rule (q, k, v, g, β, ssm_a)        state: [n_v_heads, d, d]   (Device::delta_net)
//! out  = ssm_out · (rms_norm per head (o) · ssm_norm · silu(attn_gate · x))
//! ```
//!
//! A sequence's state is the convolution's `(k - 1) · conv_dim` floats, then the delta
//! rule's. The l2 norm divides by `max(‖x‖, eps)` where llama.cpp divides by
//! `√(‖x‖² + eps)`: equal for every row but those of norm near `√eps`.

use device::{Buf, ConvSpec, DeltaIo, DeltaSpec, Device, MatOut};

use super::{Cx, LayerMemory};
use crate::error::{Error, Result};
use crate::hparams::{required, HParams};
use crate::tensors::{MatId, TensorLoader, VecId};

/// The shape of a Gated DeltaNet block (the file's `ssm.*` keys).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeltaShape {
    /// `ssm.conv_kernel`: taps of the convolution.
    pub conv_kernel: usize,
    /// `ssm.state_size`: a head's width, for keys and values alike.
    pub head_dim: usize,
    /// `ssm.group_count`: query and key heads.
    pub n_k_heads: usize,
    /// `ssm.time_step_rank`: value heads (a multiple of the key heads).
    pub n_v_heads: usize,
}

impl DeltaShape {
    /// The shape `{arch}.ssm.*` gives, checked (`ssm.inner_size` must be the value heads'
    /// width).
    pub fn read(md: &gguf::Metadata, arch: &str) -> Result<DeltaShape> {
        let get = |k: &str| required(md, &format!("{arch}.ssm.{k}"));
        let shape = DeltaShape {
            conv_kernel: get("conv_kernel")?,
            head_dim: get("state_size")?,
            n_k_heads: get("group_count")?,
            n_v_heads: get("time_step_rank")?,
        };
        let inner = get("inner_size")?;
        if inner != shape.value_dim() || !shape.n_v_heads.is_multiple_of(shape.n_k_heads) {
            return Err(Error::BadHParam {
                key: format!("{arch}.ssm.inner_size"),
                problem: format!(
                    "{inner} must be time_step_rank {} × state_size {}, and group_count {} divide time_step_rank",
                    shape.n_v_heads, shape.head_dim, shape.n_k_heads
                ),
            });
        }
        Ok(shape)
    }

    fn key_dim(&self) -> usize {
        self.n_k_heads * self.head_dim
    }

    fn value_dim(&self) -> usize {
        self.n_v_heads * self.head_dim
    }

    /// Channels of the convolution: queries, keys, values.
    fn conv_dim(&self) -> usize {
        2 * self.key_dim() + self.value_dim()
    }

    fn delta(&self) -> DeltaSpec {
        DeltaSpec {
            n_k_heads: self.n_k_heads,
            n_v_heads: self.n_v_heads,
            head_dim: self.head_dim,
            at: (self.conv_kernel - 1) * self.conv_dim(),
        }
    }
}

/// See the module doc. `attn_qkv`: `[conv_dim, n_embd]`; `attn_gate`: `[value_dim,
/// n_embd]`; `ssm_alpha`, `ssm_beta`: `[n_v_heads, n_embd]`; `ssm_dt.bias`, `ssm_a`:
/// `[n_v_heads]`; `ssm_conv1d`: `[conv_dim, conv_kernel]`; `ssm_norm`: `[head_dim]`;
/// `ssm_out`: `[n_embd, value_dim]`.
pub struct GatedDeltaNet {
    qkv: MatId,
    gate: MatId,
    alpha: MatId,
    beta: MatId,
    dt_bias: VecId,
    a: VecId,
    conv: VecId,
    norm: VecId,
    out: MatId,
    shape: DeltaShape,
}

impl GatedDeltaNet {
    pub fn load(
        t: &mut TensorLoader,
        hp: &HParams,
        il: usize,
        shape: DeltaShape,
    ) -> Result<GatedDeltaNet> {
        let (e, hv) = (hp.n_embd, shape.n_v_heads);
        let n = |s: &str| format!("blk.{il}.{s}");
        Ok(GatedDeltaNet {
            qkv: t.matrix(&n("attn_qkv.weight"), shape.conv_dim(), e)?,
            gate: t.matrix(&n("attn_gate.weight"), shape.value_dim(), e)?,
            alpha: t.matrix(&n("ssm_alpha.weight"), hv, e)?,
            beta: t.matrix(&n("ssm_beta.weight"), hv, e)?,
            dt_bias: t.vector(&n("ssm_dt.bias"), hv)?,
            a: t.vector(&n("ssm_a"), hv)?,
            conv: t.vector_dims(
                &n("ssm_conv1d.weight"),
                &[shape.conv_kernel, shape.conv_dim()],
            )?,
            norm: t.vector(&n("ssm_norm.weight"), shape.head_dim)?,
            out: t.matrix(&n("ssm_out.weight"), e, shape.value_dim())?,
            shape,
        })
    }

    /// The convolution's last inputs, then the delta rule's state.
    pub fn memory(&self) -> LayerMemory {
        let d = self.shape.delta();
        LayerMemory::State {
            floats: d.at + d.state_floats(),
        }
    }

    /// Buffers of [`crate::Scratch::extra`] it uses: the projected and the convolved
    /// channels, the output gate, α, β, then q, k, v and the rule's output.
    pub fn scratch(&self) -> Vec<usize> {
        let s = self.shape;
        let (c, hv) = (s.conv_dim(), s.n_v_heads);
        vec![
            c,
            c,
            s.value_dim(),
            hv,
            hv,
            s.key_dim(),
            s.key_dim(),
            s.value_dim(),
            s.value_dim(),
        ]
    }

    /// From the normalized input `s.x` (`[n, n_embd]`): `residual += ` the block's output.
    pub fn forward(&self, cx: &Cx<'_>, dev: &mut dyn Device, n: usize, residual: Buf) {
        let (hp, s, t, sh) = (cx.hp, cx.s, cx.t, self.shape);
        let [mixed, conv, z, alpha, beta, q, k, v, o] = s.extra[..9] else {
            unreachable!("nine buffers asked for by scratch()")
        };
        let alpha_out = MatOut {
            y: alpha,
            bias: Some(t[self.dt_bias]),
            residual: None,
        };
        dev.matmul(
            &[t[self.qkv], t[self.gate], t[self.alpha], t[self.beta]],
            s.x,
            n,
            &[
                MatOut::to(mixed),
                MatOut::to(z),
                alpha_out,
                MatOut::to(beta),
            ],
        );
        let spec = ConvSpec {
            width: sh.conv_dim(),
            k: sh.conv_kernel,
            silu: true,
            bias: None,
        };
        dev.conv1d(cx.kv_layer, mixed, t[self.conv], conv, &spec);
        // The convolved rows as [n · heads, head_dim]: per row q's heads, k's, then v's.
        let (hk, hv, d) = (sh.n_k_heads, sh.n_v_heads, sh.head_dim);
        let heads = 2 * hk + hv;
        let part = |first: usize, count: usize| -> Vec<usize> {
            (0..n)
                .flat_map(|r| (0..count).map(move |h| r * heads + first + h))
                .collect()
        };
        dev.gather_rows(conv, &part(0, hk), d, q);
        dev.gather_rows(conv, &part(hk, hk), d, k);
        dev.gather_rows(conv, &part(2 * hk, hv), d, v);
        dev.l2_norm_rows(q, n * hk, d, hp.rms_eps, q);
        dev.l2_norm_rows(k, n * hk, d, hp.rms_eps, k);
        dev.softplus(alpha, n * hv);
        dev.sigmoid(beta, n * hv);
        let io = DeltaIo {
            q,
            k,
            v,
            g: alpha,
            beta,
            a: t[self.a],
            out: o,
        };
        dev.delta_net(cx.kv_layer, &io, &sh.delta());
        dev.rms_norm(o, t[self.norm], n * hv, d, hp.rms_eps, o);
        dev.swiglu(z, o, n * sh.value_dim());
        let out = MatOut {
            y: s.proj,
            bias: None,
            residual: Some(residual),
        };
        dev.matmul(&[t[self.out]], z, n, &[out]);
    }
}
