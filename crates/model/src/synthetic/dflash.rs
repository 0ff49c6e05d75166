//! Random-weight DFlash block drafters (`dflash`), written with the metadata keys and
//! tensors llama.cpp's loader reads, for a target as wide as the drafter: with embeddings
//! and an output head of their own, or using the target's. The tokenizer's last token is
//! the mask token (`tokenizer.ggml.mask_token_id`), which llama.cpp fills a block with.
//! With [`Dspark`], DSpark's Markov head (and optionally its confidence head) beside it;
//! with [`Dflash2`], DFlash 2's block convolutions and selector. With a DeepSeek-V4
//! backbone ([`DflashShape::backbone`]), its stages are deepseek4 blocks (DSpark's for a
//! DeepSeek-V4 target: llama.cpp's `graph_dsv4`).

use std::path::Path;

use gguf::{GgmlType, Value};

use super::deepseek4::Dsv4Shape;
use super::{drafter_head, drafter_keys, scale, write_file, Rng, Tensors, Vocab};
use crate::{Error, Result};

const ARCH: &str = "dflash";

/// The shape of a synthetic DFlash drafter.
#[derive(Debug, Clone, PartialEq)]
pub struct DflashShape {
    pub n_embd: usize,
    pub n_layer: usize,
    pub n_head: usize,
    pub n_head_kv: usize,
    pub n_ff: usize,
    /// The target blocks whose inputs it reads (`dflash.target_layers`).
    pub target_layers: Vec<usize>,
    /// `dflash.block_size`: at most this less one drafts a forward.
    pub block: usize,
    /// Writes `token_embd` and `output` of its own; without, the target's are used.
    pub own_head: bool,
    /// Its own head over this many tokens (their ids in `d2t`), with `own_head`.
    pub draft_vocab: Option<usize>,
    /// Type of every matrix; its block size must divide `n_embd` and `n_ff`.
    pub ty: GgmlType,
    pub seed: u64,
    /// DSpark's heads, for a DSpark drafter.
    pub dspark: Option<Dspark>,
    /// DFlash 2's convolutions and selector, for a DFlash 2 drafter.
    pub dflash2: Option<Dflash2>,
    /// Stages of this DeepSeek-V4 shape (its `n_embd`, `n_layer` and `n_head` the
    /// drafter's; uncompressed, routed by score, no NextN) instead of dense blocks:
    /// `n_head_kv` and `n_ff` are then unused.
    pub backbone: Option<Dsv4Shape>,
}

/// DFlash 2's parts of a synthetic drafter (f32).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dflash2 {
    /// Taps of the block convolutions.
    pub kernel: usize,
    /// Channels sharing a dynamic coefficient (divides `n_embd`).
    pub group: usize,
    /// Floats of a selector table's row.
    pub rank: usize,
    /// Candidates per position (`n_embd ≥ top_k · (top_k + 1)`).
    pub top_k: usize,
}

/// DSpark's heads of a synthetic drafter (f32; the bias projection with a scale of 0.75).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dspark {
    /// Floats of a `markov_w1` row.
    pub rank: usize,
    /// Writes the confidence head (`conf_proj`).
    pub confidence: bool,
    /// `dflash.sample_from_anchor`: a block's first row drafts too.
    pub from_anchor: bool,
}

impl DflashShape {
    fn check(&self) -> Result<()> {
        let bad = |problem: String| Err(Error::Synthetic(problem));
        let (e, h, kv) = (self.n_embd, self.n_head, self.n_head_kv);
        if h == 0 || kv == 0 || !e.is_multiple_of(h) || !h.is_multiple_of(kv) {
            return bad(format!(
                "{h} heads ({kv} for keys and values) do not divide n_embd {e}"
            ));
        }
        if let Some(c) = self.dflash2 {
            if c.group == 0 || !e.is_multiple_of(c.group) || e < c.top_k * (c.top_k + 1) {
                return bad(format!(
                    "DFlash 2's group {} or top-k {} do not fit n_embd {e}",
                    c.group, c.top_k
                ));
            }
            if self.dspark.is_some() {
                return bad("a drafter is DSpark or DFlash 2, not both".into());
            }
        }
        if let Some(b) = &self.backbone {
            if [b.n_embd, b.n_layer, b.n_head] != [e, self.n_layer, h] || self.dflash2.is_some() {
                return bad(format!(
                    "a DeepSeek-V4 backbone of {} × {} layers, {} heads for a drafter of {e} \
                     × {}, {h} (and no DFlash 2)",
                    b.n_embd, b.n_layer, b.n_head, self.n_layer
                ));
            }
        }
        if self.target_layers.is_empty() || self.block < 2 || self.n_layer == 0 {
            return bad("a DFlash drafter reads a target block, has a block and a layer".into());
        }
        let block = self.ty.block_size() as usize;
        let n_ff = if self.backbone.is_some() {
            e
        } else {
            self.n_ff
        };
        for w in [e, n_ff] {
            if w == 0 || !w.is_multiple_of(block) {
                return bad(format!("width {w} is not whole blocks of {}", self.ty));
            }
        }
        Ok(())
    }

    /// Parameters of the drafter with a vocabulary of `n_vocab`.
    pub fn n_params(&self, n_vocab: usize) -> u64 {
        let e = self.n_embd;
        let kv = self.n_head_kv * (e / self.n_head);
        let block = 2 * e * e + 2 * e * kv + 3 * e * self.n_ff;
        let head = if self.own_head { 2 * n_vocab * e } else { 0 };
        let markov = self.dspark.map_or(0, |d| {
            let conf = if d.confidence { e + d.rank } else { 0 };
            d.rank * (n_vocab + self.draft_vocab.unwrap_or(n_vocab)) + conf
        });
        let d2 = self.dflash2.map_or(0, |c| {
            let conv = 2 * (2 * c.kernel * e + 2 * c.kernel * (e / c.group) * e);
            self.n_layer * conv + 2 * c.rank * n_vocab + c.rank * e
        });
        let stages = match &self.backbone {
            Some(b) => b.stage_params(n_vocab),
            None => (self.n_layer * block) as u64,
        };
        (head + markov + d2 + self.target_layers.len() * e * e) as u64 + stages
    }

    /// Writes the drafter to `path` with the tokenizer `vocab` (its target's).
    pub fn write(&self, vocab: &Vocab, path: &Path) -> Result<()> {
        self.check()?;
        let (e, nv) = (self.n_embd, vocab.n_vocab());
        let hd = e / self.n_head;
        let (q, kv, ff) = (e, self.n_head_kv * hd, self.n_ff);
        let f = self.target_layers.len() * e;
        let mut w = vocab.writer(ARCH);
        let keys = [
            ("block_size", self.block),
            ("embedding_length", e),
            ("block_count", self.n_layer),
            ("feed_forward_length", ff),
            ("attention.head_count", self.n_head),
            ("attention.head_count_kv", self.n_head_kv),
            ("context_length", 4096),
        ];
        let keys = match self.backbone {
            Some(_) => &keys[..1],
            None => &keys[..],
        };
        drafter_keys(&mut w, ARCH, keys, &self.target_layers);
        w.metadata("tokenizer.ggml.mask_token_id", Value::U32(nv as u32 - 1));
        let ty = self.ty;
        let mut t = Tensors {
            w: &mut w,
            rng: Rng::new(self.seed),
        };
        // An output norm of 2 (8 with the target's head, which is 4 times weaker) sharpens
        // the drafts' distributions: a block's mask rows alike give near-ties otherwise.
        let norm = if self.own_head { 2.0 } else { 8.0 };
        drafter_head(&mut t, [e, nv], ty, (self.own_head, self.draft_vocab), norm)?;
        t.matrix("fc.weight", &[f, e], ty, scale(f))?;
        t.ones("enc.output_norm.weight", e);
        if let Some(b) = &self.backbone {
            let own = ["attention.layer_norm_rms_epsilon", "rope.freq_base"];
            b.write_stages(&mut t, ARCH, &own, nv)?;
        }
        for il in (0..self.n_layer).filter(|_| self.backbone.is_none()) {
            let n = |s: &str| format!("blk.{il}.{s}.weight");
            t.ones(&n("attn_norm"), e);
            t.ones(&n("ffn_norm"), e);
            for (name, rows) in [("attn_q", q), ("attn_k", kv), ("attn_v", kv)] {
                t.matrix(&n(name), &[e, rows], ty, scale(e))?;
            }
            t.ones(&n("attn_q_norm"), hd);
            t.ones(&n("attn_k_norm"), hd);
            t.matrix(&n("attn_output"), &[q, e], ty, scale(q))?;
            t.matrix(&n("ffn_gate"), &[e, ff], ty, scale(e))?;
            t.matrix(&n("ffn_up"), &[e, ff], ty, scale(e))?;
            t.matrix(&n("ffn_down"), &[ff, e], ty, scale(ff))?;
        }
        if let Some(c) = self.dflash2 {
            let coefs = 2 * c.kernel * (e / c.group);
            for il in 0..self.n_layer {
                for net in ["attn", "ffn"] {
                    let name = format!("blk.{il}.{net}_conv_base");
                    t.matrix(&name, &[e, c.kernel, 2], GgmlType::F32, 0.5)?;
                    let name = format!("blk.{il}.{net}_conv_proj.weight");
                    t.matrix(&name, &[e, coefs], GgmlType::F32, 0.5 * scale(e))?;
                }
            }
            t.matrix(
                "selector_predecessor.weight",
                &[c.rank, nv],
                GgmlType::F32,
                1.0,
            )?;
            t.matrix(
                "selector_successor.weight",
                &[c.rank, nv],
                GgmlType::F32,
                1.0,
            )?;
            t.matrix(
                "selector_hidden.weight",
                &[e, c.rank],
                GgmlType::F32,
                scale(e),
            )?;
            for (key, v) in [
                ("conv_kernel_size", c.kernel),
                ("conv_group_size", c.group),
                ("selector_rank", c.rank),
                ("selector_top_k", c.top_k),
            ] {
                t.w.metadata(&format!("{ARCH}.{key}"), Value::U32(v as u32));
            }
        }
        if let Some(d) = self.dspark {
            let rows = self.draft_vocab.unwrap_or(nv);
            t.matrix("markov_w1.weight", &[d.rank, nv], GgmlType::F32, 1.0)?;
            t.matrix(
                "markov_w2.weight",
                &[d.rank, rows],
                GgmlType::F32,
                4.0 * scale(d.rank),
            )?;
            t.vector("markov_w2.scale", vec![0.75]);
            if d.confidence {
                t.matrix(
                    "conf_proj.weight",
                    &[e + d.rank, 1],
                    GgmlType::F32,
                    scale(e + d.rank),
                )?;
                t.vector("conf_proj.bias", vec![0.25]);
            }
            t.w.metadata("dflash.sample_from_anchor", Value::Bool(d.from_anchor));
            t.w.metadata("dflash.has_confidence_head", Value::Bool(d.confidence));
        }
        write_file(&w, path)
    }
}
