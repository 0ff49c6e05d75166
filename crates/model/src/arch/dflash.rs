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
//!
//! A file with `dflash.hyper_connection.count` is DSpark over a DeepSeek-V4 backbone
//! (llama.cpp's `graph_dsv4`): its stages are deepseek4 blocks
//! ([`super::deepseek4::Role::Drafter`]: uncompressed attention over a uniform
//! `attention.sliding_window`, the block's rows seeing one another; mixtures routed by
//! score), its tokens' embeddings repeated into the streams, which merge (`output_hc_*`)
//! before the output norm; a context row stores `rope(kv_norm(attn_kv · g))` in each
//! stage. Its features are the target's streams averaged (see the engine's block drafter).

use device::{BlockConv, Buf, Device, MatOut, Op, RopeMode};

use super::deepseek4::{self, Keys, Role};
use super::Recipe;
use crate::error::{Error, Result};
use crate::hparams::{positive_key, HParams, TargetFeatures, Traits, PLAIN};
use crate::layers::attention::{Attention, AttentionKind};
use crate::layers::ffn::{Activation, GateUp, Mlp};
use crate::layers::fuse::Fuse;
use crate::layers::markov::MarkovHead;
use crate::layers::selector::Selector;
use crate::layers::{Cx, DraftHead, Layer};
use crate::tensors::{MatId, TensorLoader, VecId};

pub struct Dflash;

/// Tensors of DFlash's variants this version does not run, and which variant has them.
const VARIANTS: [(&str, &str); 5] = [
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
        let backbone = backbone(md, &hp)?;
        let unrun: &[&str] = match backbone {
            Some(_) => &["attention.value_scale"],
            None => &["attention.sliding_window", "attention.value_scale"],
        };
        for key in unrun {
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
        match backbone {
            Some(cfg) => Keys { md, arch: ARCH }.blocks_hparams(&cfg, hp),
            None => Ok(hp),
        }
    }

    fn layer(&self, t: &mut TensorLoader, hp: &HParams, il: usize) -> Result<Box<dyn Layer>> {
        if let Some(cfg) = backbone(t.metadata(), hp)? {
            return deepseek4::block(t, hp, il, &cfg);
        }
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
        let conv = match t.has_own(&n("attn_conv_proj")) || t.has_own("selector_hidden.weight") {
            true => Some(Conv::load(t, hp, il)?),
            false => None,
        };
        Ok(Box::new(DflashBlock {
            attn_norm: t.vector(&n("attn_norm"), hp.n_embd)?,
            attn: Attention::load(t, hp, il, kind)?,
            ffn_norm: t.vector(&n("ffn_norm"), hp.n_embd)?,
            ffn: Mlp::load(t, hp, il, "", hp.n_ff, GateUp::Apart)?,
            act,
            conv,
        }))
    }

    fn fuse(&self, t: &mut TensorLoader, hp: &HParams) -> Result<Fuse> {
        Fuse::load(t, hp, None, Some("enc.output_norm.weight"))
    }

    fn draft_head(
        &self,
        t: &mut TensorLoader,
        hp: &HParams,
        n_logits: usize,
    ) -> Result<Option<DraftHead>> {
        match (MarkovHead::load(t, hp, n_logits)?, Selector::load(t, hp)?) {
            (Some(_), Some(_)) => Err(Error::UnsupportedTensor {
                tensor: "selector_hidden.weight".into(),
                what: "DFlash 2's selector beside DSpark's Markov head",
            }),
            (Some(m), None) => Ok(Some(DraftHead::Markov(m))),
            (None, Some(s)) => Ok(Some(DraftHead::Selector(s))),
            (None, None) => Ok(None),
        }
    }

    fn drafter_embeds(&self) -> bool {
        true
    }

    fn injects_features(&self) -> bool {
        true
    }

    fn merge(&self, t: &mut TensorLoader, hp: &HParams) -> Result<Option<Box<dyn Layer>>> {
        match backbone(t.metadata(), hp)? {
            Some(cfg) => Ok(Some(deepseek4::merge(t, hp, &cfg)?)),
            None => Ok(None),
        }
    }

    fn extra_ops(&self) -> &'static [Op] {
        &[
            Op::BlockAttention,
            Op::BlockConv,
            Op::SparseAttention,
            Op::HyperConnections,
            Op::CopyCols,
            Op::SwigluLimit,
            Op::GatherRows,
        ]
    }
}

const ARCH: &str = "dflash";

/// The keys of a DeepSeek-V4 backbone's stages, for a file that has one
/// (`dflash.hyper_connection.count`).
fn backbone(md: &gguf::Metadata, hp: &HParams) -> Result<Option<deepseek4::Config>> {
    if md.get("dflash.hyper_connection.count").is_none() {
        return Ok(None);
    }
    let k = Keys { md, arch: ARCH };
    let rope = (hp.n_head, hp.n_rot, hp.rope_freq_base);
    deepseek4::Config::read(k, [hp.n_layer, 0], rope, Role::Drafter).map(Some)
}

/// A DFlash block: `hidden += attn(attn_norm(hidden))` over the block's rows and the
/// context, then `hidden += ffn(ffn_norm(hidden))`; a context row only stores its keys and
/// values. DFlash 2's blocks convolve along the block's rows ([`Conv`]) each network's
/// input (side 0) and output (side 1) with coefficients from its normed input.
struct DflashBlock {
    attn_norm: VecId,
    attn: Attention,
    ffn_norm: VecId,
    ffn: Mlp,
    act: Activation,
    conv: Option<Conv>,
}

/// DFlash 2's convolutions of a block: per network (attention, FFN) `proj` (`[2 · k ·
/// groups, n_embd]`, the dynamic coefficients) and `base` (`[2 · k · n_embd]`).
struct Conv {
    attn: (MatId, VecId),
    ffn: (MatId, VecId),
    k: usize,
    group: usize,
    /// `n_embd`.
    width: usize,
}

impl Conv {
    fn load(t: &mut TensorLoader, hp: &HParams, il: usize) -> Result<Conv> {
        let md = t.metadata();
        let k = positive_key(md, "dflash.conv_kernel_size", "DFlash 2")?;
        let group = positive_key(md, "dflash.conv_group_size", "DFlash 2")?;
        if !hp.n_embd.is_multiple_of(group) {
            return Err(Error::BadHParam {
                key: "dflash.conv_group_size".into(),
                problem: format!("{group} does not divide n_embd {}", hp.n_embd),
            });
        }
        let e = hp.n_embd;
        let coefs = 2 * k * (e / group);
        let mut side = |net: &str| -> Result<(MatId, VecId)> {
            let proj = t.matrix(&format!("blk.{il}.{net}_conv_proj.weight"), coefs, e)?;
            let base = t.vector_dims(&format!("blk.{il}.{net}_conv_base"), &[e, k, 2])?;
            Ok((proj, base))
        };
        Ok(Conv {
            attn: side("attn")?,
            ffn: side("ffn")?,
            k,
            group,
            width: e,
        })
    }

    fn spec(&self, side: usize) -> BlockConv {
        BlockConv {
            width: self.width,
            k: self.k,
            group: self.group,
            side,
        }
    }

    /// `s.x = conv(norm(hidden))` (side 0) for the network's input norm `norm`, its
    /// coefficients (from the normed input) left in `coef`.
    fn input(
        &self,
        cx: &Cx<'_>,
        dev: &mut dyn Device,
        (norm, net): (VecId, (MatId, VecId)),
        hidden: Buf,
        n: usize,
    ) {
        let (hp, s, t) = (cx.hp, cx.s, cx.t);
        let [coef, normed] = [s.extra[0], s.extra[1]];
        dev.rms_norm(hidden, t[norm], n, hp.n_embd, hp.rms_eps, normed);
        dev.matmul(&[t[net.0]], normed, n, &[MatOut::to(coef)]);
        dev.block_conv(normed, coef, t[net.1], n, &self.spec(0), s.x);
    }

    /// `hidden += conv(s.proj)` (side 1) with the coefficients [`Conv::input`] left.
    fn output(
        &self,
        cx: &Cx<'_>,
        dev: &mut dyn Device,
        net: (MatId, VecId),
        hidden: Buf,
        n: usize,
    ) {
        let (s, t, e) = (cx.s, cx.t, cx.hp.n_embd);
        let [coef, tmp] = [s.extra[0], s.extra[1]];
        dev.block_conv(s.proj, coef, t[net.1], n, &self.spec(1), tmp);
        dev.add(hidden, tmp, n * e);
    }
}

impl Layer for DflashBlock {
    fn forward(&self, cx: &Cx<'_>, dev: &mut dyn Device, hidden: Buf, n: usize) {
        let (hp, s) = (cx.hp, cx.s);
        let Some(conv) = &self.conv else {
            dev.rms_norm(hidden, cx.t[self.attn_norm], n, hp.n_embd, hp.rms_eps, s.x);
            self.attn.attend_block(cx, dev, n);
            self.attn.project(cx, dev, n, Some(hidden));
            dev.rms_norm(hidden, cx.t[self.ffn_norm], n, hp.n_embd, hp.rms_eps, s.x);
            self.ffn.forward(cx, dev, n, Some(hidden), self.act);
            return;
        };
        conv.input(cx, dev, (self.attn_norm, conv.attn), hidden, n);
        self.attn.attend_block(cx, dev, n);
        self.attn.project(cx, dev, n, None);
        conv.output(cx, dev, conv.attn, hidden, n);
        conv.input(cx, dev, (self.ffn_norm, conv.ffn), hidden, n);
        self.ffn.forward(cx, dev, n, None, self.act);
        conv.output(cx, dev, conv.ffn, hidden, n);
    }

    fn inject(&self, cx: &Cx<'_>, dev: &mut dyn Device, g: Buf, n: usize) {
        self.attn.store(cx, dev, g, n);
    }

    fn scratch(&self) -> Vec<usize> {
        match &self.conv {
            Some(c) => vec![2 * c.k * (c.width / c.group), c.width],
            None => Vec::new(),
        }
    }
}
