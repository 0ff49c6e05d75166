//! A smaller model of the same vocabulary drafts autoregressively.

use std::time::Instant;

use model::Model;

use super::kept::KeptKv;
use super::pick::Picker;
use super::{Draft, DraftJob, DraftLog, Proposer};
use crate::backend::Threads;
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
    kv: KeptKv,
    picker: Picker,
}

impl DraftModel {
    /// `config.n_ctx` KV positions for all `n_slots` together; runs on `pool`.
    pub fn new(
        model: Model,
        config: ContextConfig,
        n_slots: usize,
        pool: Threads,
    ) -> crate::Result<Self> {
        let n_vocab = model.hparams.n_vocab;
        Ok(DraftModel {
            ctx: Executor::with_threads(model, config, pool)?,
            kv: KeptKv::new(n_slots),
            picker: Picker::new(n_slots, n_vocab),
        })
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
            let kept = self.kv.sync(&mut self.ctx, job.slot, job.tokens);
            let todo = &job.tokens[kept..];
            rows.extend(todo.iter().map(|&t| (job.slot, t)));
            self.kv.seen[job.slot].extend_from_slice(todo);
            last_row.push(rows.len() - 1);
        }
        self.kv.make_room(&mut self.ctx, jobs, rows.len());
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
                .append(&mut self.kv.seqs, chunk, &wanted, &mut |r, logits| {
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
                self.kv.seen[slot].push(t);
            }
            let wanted: Vec<usize> = (0..rows.len()).collect();
            let mut picked: Vec<Vec<f32>> = Vec::with_capacity(rows.len());
            let t0 = Instant::now();
            self.ctx
                .append(&mut self.kv.seqs, &rows, &wanted, &mut |_, logits| {
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
        tokens.len() - self.kv.kept(slot, tokens)
    }

    /// Keeps the slot's KV: the slot's next request catches up only past the prefix it
    /// shares with this one (a chat template's system part, a conversation's history).
    /// Freed when another slot needs the room ([`KeptKv::make_room`]).
    fn release(&mut self, slot: usize) {
        self.picker.release(slot);
        self.kv.end(slot);
    }
}
