//! toyconv: a test architecture (feature `testing`) that proves the seam of layers keeping
//! a recurrent state. Even blocks are llama's pre-norm attention blocks; odd blocks replace
//! attention with a causal convolution over positions whose state is the sequence's last
//! `toyconv.conv_kernel - 1` inputs (the short convolution of Mamba and Gated DeltaNet,
//! alone): `hidden += ssm_out · conv(ssm_in · rms_norm(hidden))`, then the feed-forward
//! network. `ssm_in`, `ssm_out`: `[n_embd, n_embd]`; `ssm_conv1d`: `[n_embd, k]`, a
//! channel's taps oldest first. Needs `n_head · head_dim = n_embd`.

use device::{Buf, ConvSpec, Device, MatOut, Op};

use super::Recipe;
use crate::error::{Error, Result};
use crate::hparams::{HParams, Traits, PLAIN};
use crate::layers::attention::AttentionKind;
use crate::layers::ffn::{Activation, Ffn, GateUp};
use crate::layers::pre_norm::{PreNorm, PreNormKind};
use crate::layers::{Cx, Layer, LayerMemory};
use crate::tensors::{MatId, TensorLoader, VecId};

pub struct ToyConv;

impl Recipe for ToyConv {
    fn name(&self) -> &'static str {
        "toyconv"
    }

    fn traits(&self) -> Traits {
        PLAIN
    }

    fn layer(&self, t: &mut TensorLoader, hp: &HParams, il: usize) -> Result<Box<dyn Layer>> {
        if il.is_multiple_of(2) {
            let kind = PreNormKind {
                attention: AttentionKind {
                    qkv_bias: false,
                    qk_norm: false,
                },
                gate_up: GateUp::Apart,
            };
            return Ok(Box::new(PreNorm::load(t, hp, il, kind)?));
        }
        let key = "toyconv.conv_kernel";
        let k = t.metadata().u32(key)? as usize;
        let e = hp.n_embd;
        if k < 2 || hp.q_dim() != e {
            return Err(Error::BadHParam {
                key: key.into(),
                problem: format!("{k} taps over n_embd {e} (q_dim {})", hp.q_dim()),
            });
        }
        let n = |s: &str| format!("blk.{il}.{s}.weight");
        Ok(Box::new(ConvBlock {
            attn_norm: t.vector(&n("attn_norm"), e)?,
            ssm_in: t.matrix(&n("ssm_in"), e, e)?,
            ssm_conv1d: t.vector(&n("ssm_conv1d"), e * k)?,
            ssm_out: t.matrix(&n("ssm_out"), e, e)?,
            ffn_norm: t.vector(&n("ffn_norm"), e)?,
            ffn: Ffn::load(t, hp, il, GateUp::Apart)?,
            spec: ConvSpec {
                width: e,
                k,
                silu: false,
                bias: None,
            },
        }))
    }

    fn extra_ops(&self) -> &'static [Op] {
        &[Op::Conv1d]
    }
}

/// See the module doc.
struct ConvBlock {
    attn_norm: VecId,
    ssm_in: MatId,
    ssm_conv1d: VecId,
    ssm_out: MatId,
    ffn_norm: VecId,
    ffn: Ffn,
    spec: ConvSpec,
}

impl Layer for ConvBlock {
    fn memory(&self, _: &HParams, _: usize) -> LayerMemory {
        LayerMemory::State {
            floats: (self.spec.k - 1) * self.spec.width,
        }
    }

    fn forward(&self, cx: &Cx<'_>, dev: &mut dyn Device, hidden: Buf, n: usize) {
        let (hp, s, t) = (cx.hp, cx.s, cx.t);
        // s.x, s.q, s.attn: [n, n_embd]
        dev.rms_norm(hidden, t[self.attn_norm], n, hp.n_embd, hp.rms_eps, s.x);
        dev.matmul(&[t[self.ssm_in]], s.x, n, &[MatOut::to(s.q)]);
        dev.conv1d(cx.kv_layer, s.q, t[self.ssm_conv1d], s.attn, &self.spec);
        let out = MatOut {
            y: s.proj,
            bias: None,
            residual: Some(hidden),
        };
        dev.matmul(&[t[self.ssm_out]], s.attn, n, &[out]);
        dev.rms_norm(hidden, t[self.ffn_norm], n, hp.n_embd, hp.rms_eps, s.x);
        self.ffn.forward(cx, dev, hidden, n, Activation::Silu);
    }
}
