//! DSpark's heads over a block drafter's logits (llama.cpp's `dflash` files with
//! `markov_w1`): a Markov head that biases each block position's logits by the token
//! drafted before it, and an optional confidence head that predicts whether that position's
//! draft is accepted.
//!
//! ```text
//! bias(prev)  = s · w2 · w1[prev]                        [n_logits]
//! conf(i)     = sigmoid(proj · [state(i); w1[prev(i)]] + b)
//! ```
//!
//! `w1` is `[n_vocab, rank]` (a table looked up by token), `w2` `[n_logits, rank]` (rows in
//! the head's order: the drafter's own vocabulary where it has `d2t`), `s` the optional
//! `markov_w2.scale`, `state(i)` the row's hidden state after the output norm (before it,
//! its streams merged, on a backbone of several: llama.cpp's DeepSeek-V4 DSpark's). `prev` of the
//! first drafted position is the block's first token (the last one sampled); each later
//! position's is the argmax of the position before it, biased.
//!
//! A block's layout (`dflash.sample_from_anchor`, true when absent): anchor-first, every
//! row of `[t_L, mask, ..]` drafts the token after its position; or a bonus anchor, whose
//! first row drafts nothing (DFlash's layout, the chain starting at its second row).

use device::{Buf, Device, MatOut, Role};

use crate::error::{Error, Result};
use crate::hparams::HParams;
use crate::tensors::{DeviceTensors, MatId, TensorLoader};

/// See the module doc.
pub struct MarkovHead {
    w1: MatId,
    w2: MatId,
    scale: Option<f32>,
    confidence: Option<Confidence>,
    rank: usize,
    from_anchor: bool,
    before_norm: bool,
}

/// `conf_proj`: `[n_embd + rank]` and its bias, read for the host.
struct Confidence {
    proj: Vec<f32>,
    bias: f32,
}

impl MarkovHead {
    /// The heads of a file with `markov_w1.weight`, whose output head has `n_logits` rows;
    /// `None` for a file without.
    pub fn load(t: &mut TensorLoader, hp: &HParams, n_logits: usize) -> Result<Option<Self>> {
        let Some(dims) = t.dims("markov_w1.weight") else {
            return Ok(None);
        };
        let rank = dims[0] as usize;
        let md = t.metadata();
        let from_anchor = md.opt_bool("dflash.sample_from_anchor")?.unwrap_or(true);
        if md.opt_bool("dflash.has_confidence_head")? == Some(true)
            && !t.has_own("conf_proj.weight")
        {
            return Err(Error::MissingTensor("conf_proj.weight".into()));
        }
        if rank == 0 {
            return Err(Error::BadTensor {
                tensor: "markov_w1.weight".into(),
                problem: "a rank of 0".into(),
            });
        }
        let w1 = t.matrix_for("markov_w1.weight", hp.n_vocab, rank, Role::Rows)?;
        let w2 = t.matrix("markov_w2.weight", n_logits, rank)?;
        let scale = match t.has_own("markov_w2.scale") {
            true => Some(t.values("markov_w2.scale", &[1])?[0]),
            false => None,
        };
        let confidence = match t.has_own("conf_proj.weight") {
            true => Some(Confidence {
                proj: t.values("conf_proj.weight", &[hp.n_embd + rank])?,
                bias: match t.has_own("conf_proj.bias") {
                    true => t.values("conf_proj.bias", &[1])?[0],
                    false => 0.0,
                },
            }),
            false => None,
        };
        Ok(Some(MarkovHead {
            w1,
            w2,
            scale,
            confidence,
            rank,
            from_anchor,
            before_norm: hp.streams > 1,
        }))
    }

    /// Floats of a row of `w1`.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// Whether a block's first row drafts (anchor-first) rather than only giving the
    /// others their context (a bonus anchor).
    pub fn from_anchor(&self) -> bool {
        self.from_anchor
    }

    /// Whether the confidence head reads a row's state before the output norm.
    pub fn reads_before_norm(&self) -> bool {
        self.before_norm
    }

    /// Whether it has the confidence head.
    pub fn has_confidence(&self) -> bool {
        self.confidence.is_some()
    }

    /// `rows` (`[prev.len(), rank]`) = `w1[prev]`, `bias` (`[prev.len(), n_logits]`) = the
    /// Markov bias after each of `prev`.
    pub fn bias(
        &self,
        t: &DeviceTensors,
        dev: &mut dyn Device,
        prev: &[u32],
        rows: Buf,
        bias: Buf,
        n_logits: usize,
    ) {
        dev.embed(t[self.w1], prev, rows);
        dev.matmul(&[t[self.w2]], rows, prev.len(), &[MatOut::to(bias)]);
        if let Some(s) = self.scale {
            dev.scale(bias, prev.len() * n_logits, s);
        }
    }

    /// The confidence head's probability that a position is accepted, from its `state`
    /// (`[n_embd]`, [`MarkovHead::reads_before_norm`]) and the `w1` row of the token before it (`[rank]`); `None`
    /// without the head.
    pub fn confidence(&self, state: &[f32], w1_row: &[f32]) -> Option<f32> {
        let c = self.confidence.as_ref()?;
        let (a, b) = c.proj.split_at(state.len());
        let dot = |x: &[f32], y: &[f32]| x.iter().zip(y).map(|(p, q)| p * q).sum::<f32>();
        let z = dot(a, state) + dot(b, w1_row) + c.bias;
        Some(1.0 / (1.0 + (-z).exp()))
    }
}
