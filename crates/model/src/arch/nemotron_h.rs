//! nemotron_h (NVIDIA Nemotron-H): a hybrid whose every block is one of three kinds, each
//! `hidden += mixer(attn_norm(hidden))`: a Mamba-2 mixer ([`crate::layers::mamba2`]),
//! self-attention without RoPE, or a feed-forward network `ffn_down · relu(ffn_up · x)²`.
//! Which kind a block is comes from the per-block arrays `attention.head_count_kv` and
//! `feed_forward_length` (llama.cpp's rule): both 0, Mamba-2; a feed-forward length of 0,
//! attention; else the network. The attention blocks share one `head_count_kv`; the
//! networks may differ in width. A network block keeps nothing of earlier positions.

use device::{Buf, Device, MatOut, Op};
use gguf::{Metadata, Value};

use super::Recipe;
use crate::error::{Error, Result};
use crate::hparams::{HParams, Traits, PLAIN};
use crate::layers::attention::{Attention, AttentionKind};
use crate::layers::mamba2::{Mamba2, Mamba2Shape};
use crate::layers::{Cx, Layer, LayerMemory};
use crate::tensors::{MatId, TensorLoader, VecId};

pub struct NemotronH;

const NAME: &str = "nemotron_h";

impl Recipe for NemotronH {
    fn name(&self) -> &'static str {
        NAME
    }

    fn traits(&self) -> Traits {
        PLAIN
    }

    /// The shared reading with the per-block arrays resolved: `head_count_kv` the
    /// attention blocks' (one value), `feed_forward_length` the widest network's, the RMS
    /// norms' epsilon `layer_norm_epsilon` where the file gives no other, and no RoPE.
    fn hparams(&self, md: &Metadata) -> Result<HParams> {
        let kinds = Kinds::read(md)?;
        let kv_key = format!("{NAME}.attention.head_count_kv");
        let ff_key = format!("{NAME}.feed_forward_length");
        let n_kv = kinds.attention_heads(&kv_key)?;
        let n_ff = kinds.n_ff.iter().copied().max().unwrap_or(0).max(1);
        let mut md = md
            .with(&kv_key, Value::U32(n_kv as u32))
            .with(&ff_key, Value::U32(n_ff as u32));
        let rms_key = format!("{NAME}.attention.layer_norm_rms_epsilon");
        if md.get(&rms_key).is_none() {
            let eps = md.f32(&format!("{NAME}.attention.layer_norm_epsilon"))?;
            md = md.with(&rms_key, Value::F32(eps));
        }
        let hp = HParams::read(&md, NAME, &self.traits())?;
        Ok(HParams { n_rot: 0, ..hp })
    }

    fn layer(&self, t: &mut TensorLoader, hp: &HParams, il: usize) -> Result<Box<dyn Layer>> {
        let kinds = Kinds::read(t.metadata())?;
        let (kv, ff) = kinds.of(il)?;
        let n = |s: &str| format!("blk.{il}.{s}");
        let attn_norm = t.vector(&n("attn_norm.weight"), hp.n_embd)?;
        let mixer = match (kv, ff) {
            (0, 0) => {
                let shape = Mamba2Shape::read(t.metadata(), NAME)?;
                Mixer::Mamba(Mamba2::load(t, hp.n_embd, il, shape)?)
            }
            (_, 0) => {
                if t.has(&n("attn_output.bias")) {
                    return Err(Error::BadTensor {
                        tensor: n("attn_output.bias"),
                        problem: "an attention output bias is not supported".into(),
                    });
                }
                let kind = AttentionKind {
                    qkv_bias: t.has(&n("attn_q.bias")),
                    qk_norm: false,
                };
                Mixer::Attention(Attention::load(t, hp, il, kind)?)
            }
            (_, ff) => Mixer::Mlp(Mlp::load(t, hp.n_embd, il, ff)?),
        };
        Ok(Box::new(Block { attn_norm, mixer }))
    }

    fn extra_ops(&self) -> &'static [Op] {
        &[
            Op::Conv1d,
            Op::SsmScan,
            Op::CopyCols,
            Op::GatherRows,
            Op::Softplus,
            Op::Mul,
            Op::ReluSqr,
        ]
    }
}

/// The per-block arrays that say each block's kind.
struct Kinds {
    n_kv: Vec<usize>,
    n_ff: Vec<usize>,
}

impl Kinds {
    fn read(md: &Metadata) -> Result<Kinds> {
        let n_layer = md.u32(&format!("{NAME}.block_count"))? as usize;
        let array = |k: &str| -> Result<Vec<usize>> {
            let key = format!("{NAME}.{k}");
            let v = md.i64_array(&key)?;
            if v.len() != n_layer || v.iter().any(|&x| x < 0) {
                return Err(Error::BadHParam {
                    key,
                    problem: format!("{v:?}: not {n_layer} counts, one per block"),
                });
            }
            Ok(v.into_iter().map(|x| x as usize).collect())
        };
        Ok(Kinds {
            n_kv: array("attention.head_count_kv")?,
            n_ff: array("feed_forward_length")?,
        })
    }

    /// Block `il`'s `(head_count_kv, feed_forward_length)`.
    fn of(&self, il: usize) -> Result<(usize, usize)> {
        match (self.n_kv.get(il), self.n_ff.get(il)) {
            (Some(&kv), Some(&ff)) => Ok((kv, ff)),
            _ => Err(Error::BadStage(format!("{NAME} has no block {il}"))),
        }
    }

    /// The one `head_count_kv` of the attention blocks (1 where there are none).
    fn attention_heads(&self, key: &str) -> Result<usize> {
        let attention = self
            .n_kv
            .iter()
            .zip(&self.n_ff)
            .filter(|&(&kv, &ff)| kv > 0 && ff == 0);
        let mut values: Vec<usize> = attention.map(|(&kv, _)| kv).collect();
        values.dedup();
        match values[..] {
            [] => Ok(1),
            [one] => Ok(one),
            _ => Err(Error::BadHParam {
                key: key.into(),
                problem: format!("attention blocks with different counts {values:?}"),
            }),
        }
    }
}

enum Mixer {
    Mamba(Mamba2),
    Attention(Attention),
    Mlp(Mlp),
}

/// See the module doc.
struct Block {
    attn_norm: VecId,
    mixer: Mixer,
}

impl Layer for Block {
    fn memory(&self, hp: &HParams, il: usize) -> LayerMemory {
        match &self.mixer {
            Mixer::Mamba(m) => m.memory(),
            Mixer::Attention(_) => LayerMemory::Paged {
                window: hp.window(il),
            },
            Mixer::Mlp(_) => LayerMemory::Nothing,
        }
    }

    fn scratch(&self) -> Vec<usize> {
        match &self.mixer {
            Mixer::Mamba(m) => m.scratch(),
            _ => Vec::new(),
        }
    }

    fn forward(&self, cx: &Cx<'_>, dev: &mut dyn Device, hidden: Buf, n: usize) {
        let (hp, s, t) = (cx.hp, cx.s, cx.t);
        dev.rms_norm(hidden, t[self.attn_norm], n, hp.n_embd, hp.rms_eps, s.x);
        match &self.mixer {
            Mixer::Mamba(m) => m.forward(cx, dev, n, hidden),
            Mixer::Attention(a) => {
                a.attend(cx, dev, n);
                a.project(cx, dev, n, Some(hidden));
            }
            Mixer::Mlp(m) => m.forward(cx, dev, n, hidden),
        }
    }
}

/// `ffn_up` `[n_ff, n_embd]`, `ffn_down` `[n_embd, n_ff]`, their optional biases.
struct Mlp {
    up: MatId,
    up_bias: Option<VecId>,
    down: MatId,
    down_bias: Option<VecId>,
    n_ff: usize,
}

impl Mlp {
    fn load(t: &mut TensorLoader, e: usize, il: usize, n_ff: usize) -> Result<Mlp> {
        let n = |s: &str| format!("blk.{il}.{s}");
        let mut bias = |name: &str, len: usize| match t.has(&n(name)) {
            true => t.vector(&n(name), len).map(Some),
            false => Ok(None),
        };
        Ok(Mlp {
            up_bias: bias("ffn_up.bias", n_ff)?,
            down_bias: bias("ffn_down.bias", e)?,
            up: t.matrix(&n("ffn_up.weight"), n_ff, e)?,
            down: t.matrix(&n("ffn_down.weight"), e, n_ff)?,
            n_ff,
        })
    }

    /// From `s.x`: `hidden += ffn_down · relu(ffn_up · s.x)²`.
    fn forward(&self, cx: &Cx<'_>, dev: &mut dyn Device, n: usize, hidden: Buf) {
        let (s, t) = (cx.s, cx.t);
        let up = MatOut {
            y: s.up,
            bias: t.opt(self.up_bias),
            residual: None,
        };
        dev.matmul(&[t[self.up]], s.x, n, &[up]);
        dev.relu_sqr(s.up, n * self.n_ff);
        let down = MatOut {
            y: s.proj,
            bias: t.opt(self.down_bias),
            residual: Some(hidden),
        };
        dev.matmul(&[t[self.down]], s.up, n, &[down]);
    }
}
