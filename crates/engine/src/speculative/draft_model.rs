//! A smaller model of the same vocabulary drafts autoregressively.

use std::sync::Arc;
use std::time::Instant;

use kernels::ThreadPool;
use kv::SeqKv;
use model::Model;

use super::pick::Picker;
use super::{Draft, DraftJob, DraftLog, Proposer};
use crate::{ContextConfig, Executor};

/// A draft model with a KV sequence per slot, planned once like the target's. Its output
/// head may be restricted to part of the vocabulary ([`Model::restrict_head`]).
///
/// Each call first brings every slot's draft KV up to the sequence: it keeps the longest
/// common prefix of what it computed before and the sequence (so a rejected draft is
/// rolled back here), computes the rest (the prompt on the first call, then the corrected
/// or bonus token), and then drafts one token per forward for all slots still drafting,
/// in one batch. The last drafted token is never computed: the next call sees whether it
/// was accepted.
pub struct DraftModel {
    ctx: Executor,
    /// Per slot: the draft's KV and the tokens it holds.
    seqs: Vec<SeqKv>,
    seen: Vec<Vec<u32>>,
    picker: Picker,
    /// Per slot: whether its request ended (its KV is kept for the slot's next one).
    ended: Vec<bool>,
}

impl DraftModel {
    /// `config.n_ctx` KV positions for all `n_slots` together; runs on `pool`.
    pub fn new(
        model: Model,
        config: ContextConfig,
        n_slots: usize,
        pool: Arc<ThreadPool>,
    ) -> crate::Result<Self> {
        let n_vocab = model.hparams.n_vocab;
        Ok(DraftModel {
            ctx: Executor::with_pool(model, config, pool)?,
            seqs: (0..n_slots).map(|_| SeqKv::default()).collect(),
            seen: vec![Vec::new(); n_slots],
            picker: Picker::new(n_slots, n_vocab),
            ended: vec![false; n_slots],
        })
    }

    /// Tokens of `tokens` whose KV slot `slot` keeps: the common prefix with what it
    /// computed, short of the last token (whose logits drafting needs).
    fn kept(&self, slot: usize, tokens: &[u32]) -> usize {
        self.seen[slot]
            .iter()
            .zip(tokens)
            .take_while(|(a, b)| a == b)
            .count()
            .min(tokens.len().saturating_sub(1))
    }

    /// Rolls slot `slot` back to [`DraftModel::kept`] and returns the tokens still to
    /// compute (at least the last one).
    fn sync<'t>(&mut self, slot: usize, tokens: &'t [u32]) -> &'t [u32] {
        let common = self.kept(slot, tokens);
        let kept = self.ctx.truncate(&mut self.seqs[slot], common);
        self.seen[slot].truncate(kept);
        &tokens[kept..]
    }

    /// Frees the KV kept for ended requests when the pool may lack room for `jobs` (their
    /// `rows` to catch up, their drafts, a partly filled block each): a unified pool lets
    /// one slot's kept KV take what another slot needs.
    fn make_room(&mut self, jobs: &[DraftJob], rows: usize) {
        for job in jobs {
            self.ended[job.slot] = false;
        }
        let wanted = rows + jobs.iter().map(|j| j.n_max + kv::BLOCK_SIZE).sum::<usize>();
        if self.ctx.kv().free_blocks() * kv::BLOCK_SIZE >= wanted {
            return;
        }
        for slot in (0..self.seqs.len()).filter(|&s| self.ended[s]) {
            self.ctx.release(&mut self.seqs[slot]);
            self.seen[slot].clear();
        }
    }
}

impl Proposer for DraftModel {
    fn name(&self) -> &str {
        "draft-model"
    }

    fn propose(
        &mut self,
        jobs: &[DraftJob],
        out: &mut [Draft],
        log: &mut DraftLog,
    ) -> crate::Result<()> {
        let mut rows: Vec<(usize, u32)> = Vec::new();
        let mut last_row: Vec<usize> = Vec::with_capacity(jobs.len());
        for job in jobs {
            let todo = self.sync(job.slot, job.tokens);
            rows.extend(todo.iter().map(|&t| (job.slot, t)));
            self.seen[job.slot].extend_from_slice(todo);
            last_row.push(rows.len() - 1);
        }
        self.make_room(jobs, rows.len());
        let mut active: Vec<usize> = Vec::with_capacity(jobs.len());
        let n_ubatch = self.ctx.config.n_ubatch;
        let mut logits_of: Vec<Option<Vec<f32>>> = vec![None; jobs.len()];
        let t0 = Instant::now();
        for (c, chunk) in rows.chunks(n_ubatch).enumerate() {
            let base = c * n_ubatch;
            let wanted: Vec<usize> = last_row
                .iter()
                .filter(|&&r| r >= base && r < base + chunk.len())
                .map(|&r| r - base)
                .collect();
            self.ctx
                .append(&mut self.seqs, chunk, &wanted, &mut |r, logits| {
                    let j = last_row.iter().position(|&l| l == base + r);
                    if let Some(j) = j {
                        logits_of[j] = Some(logits.to_vec());
                    }
                })?;
        }
        if rows.len() == jobs.len() {
            log.steps.push((rows.len(), t0.elapsed()));
        } else {
            log.catch_up += t0.elapsed();
        }
        for (j, job) in jobs.iter().enumerate() {
            let logits = logits_of[j]
                .take()
                .expect("every job's last row has logits");
            if self
                .picker
                .pick(self.ctx.model(), job, &logits, &mut out[j])
            {
                active.push(j);
            }
        }
        while !active.is_empty() {
            let rows: Vec<(usize, u32)> = active
                .iter()
                .map(|&j| (jobs[j].slot, *out[j].tokens.last().expect("drafted")))
                .collect();
            for &(slot, t) in &rows {
                self.seen[slot].push(t);
            }
            let wanted: Vec<usize> = (0..rows.len()).collect();
            let mut picked: Vec<Vec<f32>> = Vec::with_capacity(rows.len());
            let t0 = Instant::now();
            self.ctx
                .append(&mut self.seqs, &rows, &wanted, &mut |_, logits| {
                    picked.push(logits.to_vec())
                })?;
            log.steps.push((rows.len(), t0.elapsed()));
            let mut still = Vec::with_capacity(active.len());
            for (&j, logits) in active.iter().zip(&picked) {
                if self
                    .picker
                    .pick(self.ctx.model(), &jobs[j], logits, &mut out[j])
                {
                    still.push(j);
                }
            }
            active = still;
        }
        Ok(())
    }

    fn behind(&self, slot: usize, tokens: &[u32]) -> usize {
        tokens.len() - self.kept(slot, tokens)
    }

    /// Keeps the slot's KV: the slot's next request catches up only past the prefix it
    /// shares with this one (a chat template's system part, a conversation's history).
    /// Freed when another slot needs the room ([`DraftModel::make_room`]).
    fn release(&mut self, slot: usize) {
        self.picker.release(slot);
        self.ended[slot] = true;
    }
}
