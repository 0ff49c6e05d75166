//! Random-weight EAGLE-3 drafters (`eagle3`), written with the metadata keys and tensors
//! llama.cpp's loader reads, for a target `target_n_embd` wide: with embeddings and an
//! output head of their own, or (as many published ones) using the target's.

use std::path::Path;

use gguf::{GgmlType, Value};

use super::{drafter_head, drafter_keys, scale, write_file, Rng, Tensors, Vocab};
use crate::{Error, Result};

const ARCH: &str = "eagle3";

/// The shape of a synthetic EAGLE-3 drafter.
#[derive(Debug, Clone, PartialEq)]
pub struct Eagle3Shape {
    pub n_embd: usize,
    pub n_head: usize,
    pub n_head_kv: usize,
    pub n_ff: usize,
    /// The three target blocks whose inputs it reads (`eagle3.target_layers`).
    pub target_layers: [usize; 3],
    pub target_n_embd: usize,
    /// `eagle3.norm_before_fc`: the features RMS-normed (`enc.output_norm`) before `fc`.
    pub norm_before_fc: bool,
    /// `eagle3.norm_before_residual`: the normed fused state is the block's residual.
    pub norm_before_residual: bool,
    /// Writes `token_embd` and `output` of its own; without, the target's are used.
    pub own_head: bool,
    /// Its own head over this many tokens (their ids in `d2t`), with `own_head`.
    pub draft_vocab: Option<usize>,
    /// Type of every matrix; its block size must divide `n_embd`, `n_ff` and the
    /// features' width.
    pub ty: GgmlType,
    pub seed: u64,
}

impl Eagle3Shape {
    fn check(&self) -> Result<()> {
        let bad = |problem: String| Err(Error::Synthetic(problem));
        let (e, h, kv) = (self.n_embd, self.n_head, self.n_head_kv);
        if h == 0 || kv == 0 || !e.is_multiple_of(h) || !h.is_multiple_of(kv) {
            return bad(format!(
                "{h} heads ({kv} for keys and values) do not divide n_embd {e}"
            ));
        }
        let block = self.ty.block_size() as usize;
        for w in [e, self.n_ff, 3 * self.target_n_embd] {
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
        let attn = 2 * e * (e + 2 * kv) + e * e;
        let head = if self.own_head { 2 * n_vocab * e } else { 0 };
        (head + 3 * self.target_n_embd * e + attn + 3 * e * self.n_ff) as u64
    }

    /// Writes the drafter to `path` with the tokenizer `vocab` (its target's).
    pub fn write(&self, vocab: &Vocab, path: &Path) -> Result<()> {
        self.check()?;
        let (e, nv) = (self.n_embd, vocab.n_vocab());
        let hd = e / self.n_head;
        let (q, kv, ff, f) = (e, self.n_head_kv * hd, self.n_ff, 3 * self.target_n_embd);
        let mut w = vocab.writer(ARCH);
        let keys = [
            ("embedding_length", e),
            ("block_count", 1),
            ("feed_forward_length", ff),
            ("attention.head_count", self.n_head),
            ("attention.head_count_kv", self.n_head_kv),
            ("context_length", 4096),
            ("target_hidden_size", self.target_n_embd),
        ];
        drafter_keys(&mut w, ARCH, &keys, &self.target_layers);
        w.metadata(
            &format!("{ARCH}.norm_before_fc"),
            Value::Bool(self.norm_before_fc),
        );
        w.metadata(
            &format!("{ARCH}.norm_before_residual"),
            Value::Bool(self.norm_before_residual),
        );
        let ty = self.ty;
        let mut t = Tensors {
            w: &mut w,
            rng: Rng::new(self.seed),
        };
        // With the target's head, an output norm of 4 sharpens the drafts' distributions as
        // its own head (4 times a unit-variance product) does: fewer near-ties.
        let norm = if self.own_head { 1.0 } else { 4.0 };
        drafter_head(&mut t, [e, nv], ty, (self.own_head, self.draft_vocab), norm)?;
        t.matrix("fc.weight", &[f, e], ty, scale(f))?;
        if self.norm_before_fc {
            t.ones("enc.output_norm.weight", f);
        }
        t.ones("blk.0.attn_norm.weight", e);
        t.ones("blk.0.attn_norm_2.weight", e);
        t.ones("blk.0.ffn_norm.weight", e);
        for (name, rows) in [("attn_q", q), ("attn_k", kv), ("attn_v", kv)] {
            t.matrix(
                &format!("blk.0.{name}.weight"),
                &[2 * e, rows],
                ty,
                scale(2 * e),
            )?;
        }
        t.matrix("blk.0.attn_output.weight", &[q, e], ty, scale(q))?;
        t.matrix("blk.0.ffn_gate.weight", &[e, ff], ty, scale(e))?;
        t.matrix("blk.0.ffn_up.weight", &[e, ff], ty, scale(e))?;
        t.matrix("blk.0.ffn_down.weight", &[ff, e], ty, scale(ff))?;
        write_file(&w, path)
    }
}
