//! dflash: DFlash's block drafter (llama.cpp's `dflash` files, without DFlash 2's selector;
//! DSpark's Markov and confidence heads as [`MarkovHead`]; a reduced draft vocabulary,
//! `d2t`, as [`crate::Model::map_head`]), run as the drafter stage of its target
//! ([`crate::Part::Drafter`]).
//! Its context is the target's features at `dflash.target_layers` (the inputs of those
//! blocks, side by side), fused as `g = enc.output_norm(fc · f)` ([`Fuse`]): each block
//! stores `rope(k_norm(wk · g))` and `wv · g` at the row's position without computing it
//! through ([`Layer::inject`]). A draft is one forward of a block of rows: the last token
//! then mask tokens at the positions after it, through qwen3-like pre-norm blocks (per-head
//! Q/K norms, NeoX RoPE) whose attention lets the block's rows see one another
//! ([`device::Op::BlockAttention`]); the logits of the mask rows are the drafts.

use device::{Op, RopeMode};

use super::Recipe;
use crate::error::{Error, Result};
use crate::hparams::{HParams, TargetFeatures, Traits, PLAIN};
use crate::layers::attention::{Attention, AttentionKind};
use crate::layers::ffn::{Activation, Ffn, GateUp};
use crate::layers::fuse::Fuse;
use crate::layers::markov::MarkovHead;
use crate::layers::{Cx, Layer};
use crate::tensors::{TensorLoader, VecId};

pub struct Dflash;

/// Tensors of DFlash's variants this version does not run, and which variant has them.
const VARIANTS: [(&str, &str); 6] = [
    ("selector_hidden.weight", "DFlash 2 (its selector)"),
    ("blk.0.post_attention_norm.weight", "post-norm blocks"),
    ("blk.0.post_ffw_norm.weight", "post-norm blocks"),
    ("blk.0.layer_output_scale.weight", "scaled block outputs"),
    ("blk.0.attn_sinks.weight", "attention sinks"),
    ("rope_freqs.weight", "RoPE frequency factors"),
];

impl Recipe for Dflash {
    fn name(&self) -> &'static str {
        "dflash"
    }

    fn traits(&self) -> Traits {
        Traits {
            rope_mode: RopeMode::Neox,
            ..PLAIN
        }
    }

    fn hparams(&self, md: &gguf::Metadata) -> Result<HParams> {
        let mut hp = HParams::read(md, self.name(), &self.traits())?;
        let bad = |key: &str, problem: String| Error::BadHParam {
            key: format!("dflash.{key}"),
            problem,
        };
        let layers = md
            .i64_array("dflash.target_layers")?
            .iter()
            .map(|&l| usize::try_from(l).map_err(|_| bad("target_layers", format!("{l}"))))
            .collect::<Result<Vec<_>>>()?;
        if layers.is_empty() {
            return Err(bad("target_layers", "no target blocks".into()));
        }
        let block = md.opt_u32("dflash.block_size")?.unwrap_or(16) as usize;
        if block < 2 {
            return Err(bad(
                "block_size",
                format!("{block}: a block drafts its rows after the first"),
            ));
        }
        for key in [
            "hyper_connection.count",
            "attention.sliding_window",
            "attention.value_scale",
        ] {
            if md.get(&format!("dflash.{key}")).is_some() {
                return Err(bad(key, "not run by this version".into()));
            }
        }
        if md.opt_bool("dflash.attention.causal")? == Some(true) {
            return Err(bad(
                "attention.causal",
                "causal blocks are not run by this version".into(),
            ));
        }
        if let Some(scale) = md.opt_f32("dflash.attention.scale")?.filter(|&s| s != 0.0) {
            hp.attn_scale = scale;
        }
        if let Some(scale) = md.opt_f32("dflash.embedding_scale")?.filter(|&s| s != 0.0) {
            hp.embed_scale = Some(scale);
        }
        hp.target = Some(TargetFeatures {
            layers,
            n_embd: hp.n_embd,
            block,
        });
        Ok(hp)
    }

    fn layer(&self, t: &mut TensorLoader, hp: &HParams, il: usize) -> Result<Box<dyn Layer>> {
        if let Some((name, what)) = VARIANTS.iter().find(|(name, _)| t.has_own(name)) {
            return Err(Error::UnsupportedTensor {
                tensor: name.to_string(),
                what,
            });
        }
        let act = match t.metadata().opt_str("dflash.hidden_act")? {
            None | Some("silu") => Activation::Silu,
            Some("gelu" | "gelu_pytorch_tanh") => Activation::Gelu,
            Some(other) => {
                return Err(Error::BadHParam {
                    key: "dflash.hidden_act".into(),
                    problem: format!("{other}: DFlash runs silu or gelu"),
                })
            }
        };
        let n = |s: &str| format!("blk.{il}.{s}.weight");
        let kind = AttentionKind {
            qkv_bias: false,
            qk_norm: true,
        };
        Ok(Box::new(DflashBlock {
            attn_norm: t.vector(&n("attn_norm"), hp.n_embd)?,
            attn: Attention::load(t, hp, il, kind)?,
            ffn_norm: t.vector(&n("ffn_norm"), hp.n_embd)?,
            ffn: Ffn::load(t, hp, il, GateUp::Apart)?,
            act,
        }))
    }

    fn fuse(&self, t: &mut TensorLoader, hp: &HParams) -> Result<Fuse> {
        Fuse::load(t, hp, None, Some("enc.output_norm.weight"))
    }

    fn markov(
        &self,
        t: &mut TensorLoader,
        hp: &HParams,
        n_logits: usize,
    ) -> Result<Option<MarkovHead>> {
        MarkovHead::load(t, hp, n_logits)
    }

    fn drafter_embeds(&self) -> bool {
        true
    }

    fn injects_features(&self) -> bool {
        true
    }

    fn extra_ops(&self) -> &'static [Op] {
        &[Op::BlockAttention]
    }
}

/// A DFlash block: `hidden += attn(attn_norm(hidden))` over the block's rows and the
/// context, then `hidden += ffn(ffn_norm(hidden))`; a context row only stores its keys and
/// values.
struct DflashBlock {
    attn_norm: VecId,
    attn: Attention,
    ffn_norm: VecId,
    ffn: Ffn,
    act: Activation,
}

impl Layer for DflashBlock {
    fn forward(&self, cx: &Cx<'_>, dev: &mut dyn device::Device, hidden: device::Buf, n: usize) {
        let (hp, s) = (cx.hp, cx.s);
        dev.rms_norm(hidden, cx.t[self.attn_norm], n, hp.n_embd, hp.rms_eps, s.x);
        self.attn.attend_block(cx, dev, n);
        self.attn.project(cx, dev, n, Some(hidden));
        dev.rms_norm(hidden, cx.t[self.ffn_norm], n, hp.n_embd, hp.rms_eps, s.x);
        self.ffn.forward(cx, dev, hidden, n, self.act);
    }

    fn inject(&self, cx: &Cx<'_>, dev: &mut dyn device::Device, g: device::Buf, n: usize) {
        self.attn.store(cx, dev, g, n);
    }
}
