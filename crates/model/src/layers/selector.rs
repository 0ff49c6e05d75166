//! DFlash 2's selector over a block drafter's logits (llama.cpp's `dflash` files with
//! `selector_hidden`): each drafted position's `top_k` candidates, scored against the
//! position before it,
//!
//! ```text
//! score(pred, c) = Σ_r next[c][r] · prev[pred][r] · gate[r] + logit(c),   gate = hidden · state
//! ```
//!
//! `state` being the position's row after the output norm, `prev` and `next` `[n_vocab,
//! rank]` tables by token, `hidden` `[rank, n_embd]`. A draft walks the block greedily:
//! the first position's predecessor is the block's first token, each later one's the
//! candidate chosen before it. `prev` and `next` are read a row at a time from the mapped
//! file; `hidden` is read for the host at load.

use crate::error::{Error, Result};
use crate::hparams::{positive_key, HParams};
use crate::tensors::{TensorLoader, Weight};

/// See the module doc.
pub struct Selector {
    /// `[rank, n_embd]`.
    hidden: Vec<f32>,
    prev: Weight,
    next: Weight,
    rank: usize,
    top_k: usize,
}

impl Selector {
    /// The selector of a file with `selector_hidden.weight`; `None` for a file without.
    pub fn load(t: &mut TensorLoader, hp: &HParams) -> Result<Option<Selector>> {
        if !t.has_own("selector_hidden.weight") {
            return Ok(None);
        }
        let md = t.metadata();
        let rank = positive_key(md, "dflash.selector_rank", "DFlash 2")?;
        let top_k = positive_key(md, "dflash.selector_top_k", "DFlash 2")?;
        if hp.n_embd < top_k * (top_k + 1) {
            return Err(Error::BadHParam {
                key: "dflash.selector_top_k".into(),
                problem: format!("{top_k}: too many candidates for n_embd {}", hp.n_embd),
            });
        }
        Ok(Some(Selector {
            hidden: t.values("selector_hidden.weight", &[hp.n_embd, rank])?,
            prev: t.host_rows("selector_predecessor.weight", hp.n_vocab, rank)?,
            next: t.host_rows("selector_successor.weight", hp.n_vocab, rank)?,
            rank,
            top_k,
        }))
    }

    /// Candidates per position.
    pub fn top_k(&self) -> usize {
        self.top_k
    }

    /// `gate = hidden · state` (`state` `[n_embd]`), each sum in order.
    pub fn gate(&self, state: &[f32]) -> Vec<f32> {
        self.hidden
            .chunks_exact(state.len())
            .map(|row| row.iter().zip(state).map(|(a, b)| a * b).sum())
            .collect()
    }

    /// The scores of `cands` (`(token, logit)`) after the token `pred` at a position of
    /// `gate`, read from `file` (the bytes the model's file is mapped from).
    pub fn scores(&self, file: &[u8], pred: u32, gate: &[f32], cands: &[(u32, f32)]) -> Vec<f32> {
        let mut cond = vec![0f32; self.rank];
        self.prev.host_row(file, pred as usize, &mut cond);
        cond.iter_mut().zip(gate).for_each(|(c, g)| *c *= g);
        let mut next = vec![0f32; self.rank];
        cands
            .iter()
            .map(|&(token, logit)| {
                self.next.host_row(file, token as usize, &mut next);
                next.iter().zip(&cond).map(|(a, b)| a * b).sum::<f32>() + logit
            })
            .collect()
    }
}
