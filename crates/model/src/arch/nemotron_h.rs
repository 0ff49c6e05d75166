//! nemotron_h (NVIDIA Nemotron-H): a hybrid whose every block is one of three kinds, each
//! `hidden += mixer(attn_norm(hidden))`: a Mamba-2 mixer ([`crate::layers::mamba2`]),
//! self-attention without RoPE, or a feed-forward network `ffn_down · relu(ffn_up · x)²`.
//! Which kind a block is comes from the per-block arrays `attention.head_count_kv` and
//! `feed_forward_length` (llama.cpp's rule): both 0, Mamba-2; a feed-forward length of 0,
//! attention; else the network. The attention blocks share one `head_count_kv`; the
//! networks may differ in width. A network block keeps nothing of earlier positions.
//!
//! nemotron_h_moe (Nemotron 3) is the same with a mixture in place of every network:
//! experts `ffn_down_exps · relu(ffn_up_exps · x)²` chosen by sigmoid scores plus
//! `exp_probs_b` (weighted by the scores alone, renormalized where
//! `expert_weights_norm`, scaled by `expert_weights_scale`), and a shared expert of the
//! same kind (`ffn_*_shexp`, `expert_shared_feed_forward_length` wide). Latent mixtures
//! (`moe_latent_size`), grouped routing and per-block expert shapes (Puzzle) are refused;
//! its multi-token-prediction block (`nextn_predict_layers`, after the others) is not run.

use device::{Buf, Device, ExpertNet, Gating, MatOut, MoeSpec, Op, SharedIn};
use gguf::{Metadata, Value};

use super::Recipe;
use crate::error::{Error, Result};
use crate::hparams::{ExpertWidth, Experts, HParams, RoutingDefaults, SharedExpert, Traits, PLAIN};
use crate::layers::attention::{Attention, AttentionKind};
use crate::layers::mamba2::{Mamba2, Mamba2Shape};
use crate::layers::{Cx, Layer, LayerMemory};
use crate::tensors::{MatId, MatSpan, TensorLoader, VecId};

/// See the module doc.
pub struct NemotronH {
    name: &'static str,
    experts: Experts,
}

pub const NEMOTRON_H: NemotronH = NemotronH {
    name: "nemotron_h",
    experts: Experts::Never,
};

pub const NEMOTRON_H_MOE: NemotronH = NemotronH {
    name: "nemotron_h_moe",
    experts: Experts::Always(RoutingDefaults {
        norm_weights: false,
        gated_shared_expert: false,
        expert_width: ExpertWidth::FeedForward,
    }),
};

impl Recipe for NemotronH {
    fn name(&self) -> &'static str {
        self.name
    }

    fn traits(&self) -> Traits {
        Traits {
            experts: self.experts,
            ..PLAIN
        }
    }

    /// The shared reading with the per-block arrays resolved: `head_count_kv` the
    /// attention blocks' (one value), `feed_forward_length` the widest network's, the RMS
    /// norms' epsilon `layer_norm_epsilon` where the file gives no other, and no RoPE.
    fn hparams(&self, md: &Metadata) -> Result<HParams> {
        let name = self.name;
        let kinds = Kinds::read(md, name)?;
        let kv_key = format!("{name}.attention.head_count_kv");
        let ff_key = format!("{name}.feed_forward_length");
        let n_kv = kinds.attention_heads(&kv_key)?;
        let n_ff = kinds.n_ff.iter().copied().max().unwrap_or(0).max(1);
        let mut md = md
            .with(&kv_key, Value::U32(n_kv as u32))
            .with(&ff_key, Value::U32(n_ff as u32));
        let rms_key = format!("{name}.attention.layer_norm_rms_epsilon");
        if md.get(&rms_key).is_none() {
            let eps = md.f32(&format!("{name}.attention.layer_norm_epsilon"))?;
            md = md.with(&rms_key, Value::F32(eps));
        }
        let hp = HParams::read(&md, name, &self.traits())?;
        let moe = hp.moe.map(|m| mixture(&md, name, m)).transpose()?;
        let key = format!("{name}.nextn_predict_layers");
        let nextn = md.opt_u32(&key)?.unwrap_or(0) as usize;
        if nextn >= hp.n_layer {
            return Err(Error::BadHParam {
                key,
                problem: format!("{nextn} leaves no block of {}", hp.n_layer),
            });
        }
        Ok(HParams {
            n_rot: 0,
            moe,
            n_layer: hp.n_layer - nextn,
            n_nextn: nextn,
            ..hp
        })
    }

    fn layer(&self, t: &mut TensorLoader, hp: &HParams, il: usize) -> Result<Box<dyn Layer>> {
        let kinds = Kinds::read(t.metadata(), self.name)?;
        let (kv, ff) = kinds.of(il)?;
        let n = |s: &str| format!("blk.{il}.{s}");
        let attn_norm = t.vector(&n("attn_norm.weight"), hp.n_embd)?;
        let mixer = match (kv, ff) {
            (0, 0) => {
                let shape = Mamba2Shape::read(t.metadata(), self.name)?;
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
            (_, ff) => match &hp.moe {
                None => Mixer::Mlp(Mlp::load(t, hp.n_embd, il, "", ff)?),
                Some(_) => Mixer::Moe(Moe::load(t, hp, il)?),
            },
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
            Op::Moe,
        ]
    }
}

/// The mixture [`HParams::read`] gave, as Nemotron-H routes it: sigmoid scores, and the
/// shared expert `expert_shared_feed_forward_length` wide; what it does not run refused.
fn mixture(
    md: &Metadata,
    name: &str,
    m: crate::hparams::MoeParams,
) -> Result<crate::hparams::MoeParams> {
    let key = |k: &str| format!("{name}.{k}");
    let refuse = |k: &str, problem: &str| Error::BadHParam {
        key: key(k),
        problem: problem.into(),
    };
    if md.opt_u32(&key("moe_latent_size"))?.unwrap_or(0) > 0 {
        return Err(refuse(
            "moe_latent_size",
            "latent mixtures are not supported",
        ));
    }
    if md.opt_u32(&key("expert_group_count"))?.unwrap_or(1) > 1 {
        return Err(refuse(
            "expert_group_count",
            "grouped routing is not supported",
        ));
    }
    let shared = match md.opt_u32(&key("expert_shared_count"))?.unwrap_or(0) {
        0 => None,
        _ => Some(SharedExpert {
            n_ff: crate::hparams::positive_key(
                md,
                &key("expert_shared_feed_forward_length"),
                "a shared expert",
            )?,
            gated: false,
        }),
    };
    Ok(crate::hparams::MoeParams {
        gating: Gating::Sigmoid,
        shared,
        ..m
    })
}

/// The per-block arrays that say each block's kind.
struct Kinds {
    n_kv: Vec<usize>,
    n_ff: Vec<usize>,
}

impl Kinds {
    fn read(md: &Metadata, name: &str) -> Result<Kinds> {
        let n_layer = md.u32(&format!("{name}.block_count"))? as usize;
        let array = |k: &str| -> Result<Vec<usize>> {
            let key = format!("{name}.{k}");
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
            _ => Err(Error::BadStage(format!(
                "no block {il} among {}",
                self.n_kv.len()
            ))),
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
    Moe(Moe),
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
            Mixer::Mlp(_) | Mixer::Moe(_) => LayerMemory::Nothing,
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
            Mixer::Mlp(m) => m.forward(cx, dev, n, Some(hidden)),
            Mixer::Moe(m) => m.forward(cx, dev, n, hidden),
        }
    }
}

/// `ffn_up{suffix}` `[n_ff, n_embd]`, `ffn_down{suffix}` `[n_embd, n_ff]`, their
/// optional biases.
struct Mlp {
    up: MatId,
    up_bias: Option<VecId>,
    down: MatId,
    down_bias: Option<VecId>,
    n_ff: usize,
}

impl Mlp {
    fn load(t: &mut TensorLoader, e: usize, il: usize, suffix: &str, n_ff: usize) -> Result<Mlp> {
        let n = |kind: &str, what: &str| format!("blk.{il}.ffn_{kind}{suffix}.{what}");
        let mut bias = |kind: &str, len: usize| match t.has(&n(kind, "bias")) {
            true => t.vector(&n(kind, "bias"), len).map(Some),
            false => Ok(None),
        };
        Ok(Mlp {
            up_bias: bias("up", n_ff)?,
            down_bias: bias("down", e)?,
            up: t.matrix(&n("up", "weight"), n_ff, e)?,
            down: t.matrix(&n("down", "weight"), e, n_ff)?,
            n_ff,
        })
    }

    /// From `s.x`: `s.proj = ffn_down · relu(ffn_up · s.x)²`, added to `residual` where
    /// given.
    fn forward(&self, cx: &Cx<'_>, dev: &mut dyn Device, n: usize, residual: Option<Buf>) {
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
            residual,
        };
        dev.matmul(&[t[self.down]], s.up, n, &[down]);
    }
}

/// A Nemotron 3 mixture (see the module doc): `ffn_gate_inp` `[n_expert, n_embd]`,
/// `exp_probs_b.bias` `[n_expert]`, `n_expert` × `ffn_up_exps` `[n_ff_exp, n_embd]` and
/// `ffn_down_exps` `[n_embd, n_ff_exp]`, the shared expert.
struct Moe {
    router: MatId,
    choice_bias: VecId,
    up: MatSpan,
    down: MatSpan,
    shared: Option<Mlp>,
}

impl Moe {
    fn load(t: &mut TensorLoader, hp: &HParams, il: usize) -> Result<Moe> {
        let m = hp.moe.as_ref().expect("a mixture");
        let (e, ne, ff) = (hp.n_embd, m.n_expert, m.n_ff_exp);
        let n = |s: &str| format!("blk.{il}.{s}");
        let count = [ne, m.n_expert_used];
        Ok(Moe {
            router: t.matrix(&n("ffn_gate_inp.weight"), ne, e)?,
            choice_bias: t.vector(&n("exp_probs_b.bias"), ne)?,
            up: t.experts(&n("ffn_up_exps.weight"), il, count, ff, e)?,
            down: t.experts(&n("ffn_down_exps.weight"), il, count, e, ff)?,
            shared: m
                .shared
                .map(|sh| Mlp::load(t, e, il, "_shexp", sh.n_ff))
                .transpose()?,
        })
    }

    /// From `s.x`: the shared expert into `s.proj`, then `hidden +=` the chosen experts and
    /// it.
    fn forward(&self, cx: &Cx<'_>, dev: &mut dyn Device, n: usize, hidden: Buf) {
        let (hp, s, t) = (cx.hp, cx.s, cx.t);
        let p = hp.moe.as_ref().expect("a mixture");
        let shared = self.shared.as_ref().map(|mlp| {
            mlp.forward(cx, dev, n, None);
            SharedIn {
                out: s.proj,
                gate: None,
            }
        });
        let spec = MoeSpec {
            router: t[self.router],
            gate: &[],
            up: &t[&self.up],
            down: &t[&self.down],
            routing: p.routing(),
            n_embd: hp.n_embd,
            n_ff_exp: p.n_ff_exp,
            shared,
            choice_bias: Some(t[self.choice_bias]),
            given: None,
            limit: None,
            net: ExpertNet::ReluSqr,
            scratch: s.moe.expect("mixture scratch for a model with experts"),
        };
        dev.moe(&spec, s.x, n, hidden);
    }
}
