//! qwen35 (Qwen 3.5): a hybrid of Gated DeltaNet blocks and gated attention blocks (every
//! `full_attention_interval`-th block attends; `attention.recurrent_layers` may list them
//! instead), each `hidden += mixer(attn_norm(hidden))`, then `hidden +=
//! ffn(post_attention_norm(hidden))` with a SwiGLU network. Attention turns RoPE by
//! Qwen's interleaved multi-axis sections; for text every axis has the token's position,
//! which is NeoX RoPE over `rope.dimension_count` dimensions as long as every rotated pair
//! falls in one of the first three sections (the fourth turns by position 0). Blocks past
//! `block_count - nextn_predict_layers` are the multi-token-prediction head: a gated
//! attention block behind the NextN entry ([`crate::layers::nextn`]), run as a drafter.
//! qwen35moe (Qwen 3.5 MoE) is the same with a mixture in every block: softmax routing,
//! the chosen experts' weights renormalized, and a shared expert scaled by a sigmoid gate
//! of its own (`ffn_gate_inp_shexp`).

use device::{Buf, Device, Op, RopeMode};
use gguf::{Metadata, Value};

use super::Recipe;
use crate::error::{Error, Result};
use crate::hparams::{ExpertWidth, Experts, HParams, RoutingDefaults, Traits, PLAIN};
use crate::layers::ffn::{Activation, Ffn, GateUp};
use crate::layers::gated_attention::GatedAttention;
use crate::layers::gated_delta_net::{DeltaShape, GatedDeltaNet};
use crate::layers::nextn::Nextn;
use crate::layers::{Cx, Layer, LayerMemory};
use crate::tensors::{TensorLoader, VecId};

/// See the module doc.
pub struct Qwen35 {
    name: &'static str,
    experts: Experts,
}

pub const QWEN35: Qwen35 = Qwen35 {
    name: "qwen35",
    experts: Experts::Never,
};

pub const QWEN35MOE: Qwen35 = Qwen35 {
    name: "qwen35moe",
    experts: Experts::Always(RoutingDefaults {
        norm_weights: true,
        gated_shared_expert: true,
        expert_width: ExpertWidth::FeedForwardPerUsed,
    }),
};

impl Recipe for Qwen35 {
    fn name(&self) -> &'static str {
        self.name
    }

    fn traits(&self) -> Traits {
        Traits {
            rope_mode: RopeMode::Neox,
            experts: self.experts,
            ..PLAIN
        }
    }

    fn hparams(&self, md: &Metadata) -> Result<HParams> {
        let hp = HParams::read(md, self.name(), &self.traits())?;
        check_sections(md, self.name(), hp.n_rot)?;
        let key = format!("{}.nextn_predict_layers", self.name());
        let nextn = md.opt_u32(&key)?.unwrap_or(0) as usize;
        if nextn >= hp.n_layer {
            return Err(Error::BadHParam {
                key,
                problem: format!("{nextn} leaves no block of {}", hp.n_layer),
            });
        }
        Ok(HParams {
            n_layer: hp.n_layer - nextn,
            n_nextn: nextn,
            ..hp
        })
    }

    fn layer(&self, t: &mut TensorLoader, hp: &HParams, il: usize) -> Result<Box<dyn Layer>> {
        let (mixer, scratch) = match recurrent(t.metadata(), self.name(), il)? {
            true => {
                let shape = DeltaShape::read(t.metadata(), self.name())?;
                let d = GatedDeltaNet::load(t, hp, il, shape)?;
                let scratch = d.scratch();
                (Mixer::Delta(d), scratch)
            }
            false => (
                Mixer::Attention(GatedAttention::load(t, hp, il)?),
                GatedAttention::scratch(hp),
            ),
        };
        Ok(Box::new(Block::load(t, hp, il, mixer, scratch)?))
    }

    /// A gated-attention block (the file's feed-forward kind) behind the NextN entry.
    fn nextn(&self, t: &mut TensorLoader, hp: &HParams, il: usize) -> Result<Box<dyn Layer>> {
        let mixer = Mixer::Attention(GatedAttention::load(t, hp, il)?);
        let block = Block::load(t, hp, il, mixer, GatedAttention::scratch(hp))?;
        Ok(Box::new(Nextn::load(t, hp, il, Box::new(block))?))
    }

    fn extra_ops(&self) -> &'static [Op] {
        &[
            Op::Conv1d,
            Op::DeltaNet,
            Op::GatherRows,
            Op::L2NormRows,
            Op::Sigmoid,
            Op::Softplus,
            Op::Mul,
        ]
    }
}

/// Whether block `il` is a Gated DeltaNet block.
fn recurrent(md: &Metadata, arch: &str, il: usize) -> Result<bool> {
    let listed = format!("{arch}.attention.recurrent_layers");
    if md.get(&listed).is_some() {
        let flags = md.array(&listed)?;
        let flag = flags.get(il).and_then(|v| match v {
            Value::Bool(b) => Some(*b),
            v => v.as_integer().map(|i| i != 0),
        });
        return flag.ok_or_else(|| Error::BadHParam {
            key: listed,
            problem: format!("no flag of block {il} among {}", flags.len()),
        });
    }
    let key = format!("{arch}.full_attention_interval");
    match md.opt_u32(&key)?.unwrap_or(4) {
        0 => Err(Error::BadHParam {
            key,
            problem: "must be positive".into(),
        }),
        every => Ok(!(il + 1).is_multiple_of(every as usize)),
    }
}

/// Checks that `rope.dimension_sections` turns every rotated pair by the token's position
/// (see the module doc): pair `i` falls in sector `i % Σ sections`, which takes the
/// interleaved axes t, h, w in turn while each lasts.
fn check_sections(md: &Metadata, arch: &str, n_rot: usize) -> Result<()> {
    let key = format!("{arch}.rope.dimension_sections");
    let s = md.i64_array(&key)?;
    let bad = |problem: String| Error::BadHParam {
        key: key.clone(),
        problem,
    };
    let s: Vec<usize> = s.iter().map(|&v| v.max(0) as usize).collect();
    if s.len() < 3 || s.iter().sum::<usize>() == 0 {
        return Err(bad(format!("{s:?} are not four sections")));
    }
    let total: usize = s.iter().sum();
    for i in 0..n_rot / 2 {
        let sector = i % total;
        let axis = sector % 3;
        if sector >= 3 * s[axis] {
            return Err(bad(format!(
                "{s:?}: rotated pair {i} turns by the fourth axis, not supported"
            )));
        }
    }
    Ok(())
}

enum Mixer {
    Attention(GatedAttention),
    Delta(GatedDeltaNet),
}

/// See the module doc; the norms `[n_embd]`.
struct Block {
    attn_norm: VecId,
    mixer: Mixer,
    post_attention_norm: VecId,
    ffn: Ffn,
    scratch: Vec<usize>,
}

impl Block {
    fn load(
        t: &mut TensorLoader,
        hp: &HParams,
        il: usize,
        mixer: Mixer,
        scratch: Vec<usize>,
    ) -> Result<Block> {
        let n = |s: &str| format!("blk.{il}.{s}.weight");
        Ok(Block {
            attn_norm: t.vector(&n("attn_norm"), hp.n_embd)?,
            mixer,
            scratch,
            post_attention_norm: t.vector(&n("post_attention_norm"), hp.n_embd)?,
            ffn: Ffn::load(t, hp, il, GateUp::Apart)?,
        })
    }
}

impl Layer for Block {
    fn memory(&self, hp: &HParams, il: usize) -> LayerMemory {
        match &self.mixer {
            Mixer::Attention(_) => LayerMemory::Paged {
                window: hp.window(il),
            },
            Mixer::Delta(d) => d.memory(),
        }
    }

    fn scratch(&self) -> Vec<usize> {
        self.scratch.clone()
    }

    fn forward(&self, cx: &Cx<'_>, dev: &mut dyn Device, hidden: Buf, n: usize) {
        let (hp, s, t) = (cx.hp, cx.s, cx.t);
        dev.rms_norm(hidden, t[self.attn_norm], n, hp.n_embd, hp.rms_eps, s.x);
        match &self.mixer {
            Mixer::Attention(a) => a.forward(cx, dev, n, hidden),
            Mixer::Delta(d) => d.forward(cx, dev, n, hidden),
        }
        dev.rms_norm(
            hidden,
            t[self.post_attention_norm],
            n,
            hp.n_embd,
            hp.rms_eps,
            s.x,
        );
        self.ffn.forward(cx, dev, hidden, n, Activation::Silu);
    }
}
