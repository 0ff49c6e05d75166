//! A block drafter: DFlash ([`model::Part::Drafter`] of a `dflash` file) drafts a whole
//! block in one forward; DSpark (a `dflash` file with a Markov head,
//! [`model::layers::markov::MarkovHead`]) then biases each position's logits by the token
//! drafted before it.

use std::time::Instant;

use device::Row;
use kv::SeqKv;
use model::layers::selector::Selector;
use model::layers::DraftHead;
use model::Model;

use super::kept::KeptKv;
use super::pick::Picker;
use super::target_states::{feature_taps, TargetStates};
use super::{Draft, DraftJob, DraftLog, Features, Proposer};
use crate::backend::Threads;
use crate::executor::{Enter, Out, RowOut};
use crate::{ContextConfig, Executor};

/// A DFlash stage with a KV sequence per slot, planned like the target's. Its context row
/// of position `p` is the target's features of `p` ([`Proposer::observe_state`]; zeros
/// where the target's are not at hand: a prefix the target took from its cache), which
/// the stage's blocks store as keys and values ([`Enter::Fused`]); every position the
/// target computed before the last token `t_L` has one, and rows are kept while the
/// sequence's tokens before them are unchanged.
///
/// A draft of `n` tokens is one forward of `n + 1` rows at positions `L..=L + n`: `t_L`,
/// then the mask token; every row sees the context and the whole block, and the logits of
/// the mask rows give `d1..dn`. The block's rows are dropped after the forward. An
/// anchor-first DSpark block is `n` rows, each giving the token after it (`t_L`'s gives
/// `d1`). With a Markov head, `d(i+1)`'s logits are biased by the argmax of `d(i)`'s
/// (biased; `t_L` before `d1`), position by position, and a confidence head's probability
/// stands for the token's own against `p_min`.
pub struct BlockDrafter {
    ctx: Executor,
    kv: KeptKv,
    states: TargetStates,
    /// Floats of a row's features.
    width: usize,
    /// The target blocks whose outputs are its features.
    taps: Vec<usize>,
    /// `block_size`: at most this less `lead` drafts a forward.
    block: usize,
    /// Rows of a block before the first that drafts: 1 (`t_L`), or 0 (anchor-first).
    lead: usize,
    mask: u32,
    picker: Picker,
}

/// One slot's block in a draft forward.
#[derive(Debug, Clone, Copy)]
struct Block {
    /// The job it drafts for.
    job: usize,
    slot: usize,
    /// The position of its first row, the last token `t_L`.
    at: usize,
    last: u32,
    /// The tokens it drafts.
    n: usize,
}

/// What a draft forward gives a block: per drafted position, its logits and (for a
/// confidence head) its normed state.
#[derive(Default)]
struct Drafted {
    logits: Vec<Vec<f32>>,
    states: Vec<Vec<f32>>,
}

impl BlockDrafter {
    /// `model`: a DFlash drafter's [`model::Part::Drafter`] stage. `config.n_ctx` KV
    /// positions for all `n_slots` together; runs on `pool`.
    pub fn dflash(
        model: Model,
        config: ContextConfig,
        n_slots: usize,
        pool: Threads,
    ) -> crate::Result<Self> {
        let bad = |why: String| crate::Error::Config(format!("{}: {why}", model.arch.name()));
        let (Some(target), Some(width)) = (model.hparams.target.clone(), model.fuse_width()) else {
            return Err(bad("not a block drafter of a target's features".into()));
        };
        if target.block < 2 || !model.injects_features() {
            return Err(bad("not a block drafter of a target's features".into()));
        }
        let md = &model.file.header.metadata;
        let mask = md
            .opt_u32("tokenizer.ggml.mask_token_id")
            .ok()
            .flatten()
            .filter(|&m| (m as usize) < model.hparams.n_vocab)
            .ok_or_else(|| {
                bad("its tokenizer names no mask token (tokenizer.ggml.mask_token_id)".into())
            })?;
        let taps = feature_taps(&target)?;
        let n_vocab = model.hparams.n_vocab;
        let lead = match model.markov() {
            Some(m) if m.from_anchor() => 0,
            _ => 1,
        };
        Ok(BlockDrafter {
            lead,
            ctx: Executor::with_threads(model, config, pool)?,
            kv: KeptKv::new(n_slots),
            states: TargetStates::new(n_slots),
            width,
            taps,
            block: target.block,
            mask,
            picker: Picker::new(n_slots, n_vocab),
        })
    }

    /// Stores the context rows `rows` (`(slot, pos, token)`, a slot's rows together and
    /// ascending) from their features `features` (`[rows, width]`).
    fn inject(&mut self, rows: &[(usize, usize, u32)], features: &[f32]) -> crate::Result<()> {
        let batch: Vec<Row> = rows
            .iter()
            .map(|&(s, pos, _)| Row { pos, seq: s })
            .collect();
        let tokens: Vec<u32> = rows.iter().map(|r| r.2).collect();
        let mut seqs: Vec<&mut SeqKv> = self.kv.seqs.iter_mut().collect();
        self.ctx
            .forward(
                &mut seqs,
                &batch,
                Enter::Fused {
                    tokens: &tokens,
                    features,
                },
                Out::Nothing,
            )
            .map(|_| ())
    }

    /// One forward of `blocks`: what each drafts.
    fn blocks(&mut self, blocks: &[Block]) -> crate::Result<Vec<Drafted>> {
        let mut batch = Vec::new();
        let mut tokens = Vec::new();
        let mut wanted = Vec::new();
        let mut owner = Vec::new();
        for (k, b) in blocks.iter().enumerate() {
            for i in 0..self.lead + b.n {
                if i >= self.lead {
                    wanted.push(batch.len());
                    owner.push(k);
                }
                batch.push(Row {
                    pos: b.at + i,
                    seq: b.slot,
                });
                tokens.push(if i == 0 { b.last } else { self.mask });
            }
        }
        let mut drafted: Vec<Drafted> = blocks.iter().map(|_| Drafted::default()).collect();
        let with_states = self
            .ctx
            .model()
            .draft_head()
            .is_some_and(DraftHead::reads_states);
        let states: &[usize] = if with_states { &wanted } else { &[] };
        let mut on_row = |r: usize, o: RowOut<'_>| {
            let k = wanted.binary_search(&r).expect("a drafting row");
            match o {
                RowOut::Logits(l) => drafted[owner[k]].logits.push(l.to_vec()),
                RowOut::State(s) => drafted[owner[k]].states.push(s.to_vec()),
                RowOut::Tap { .. } => {}
            }
        };
        let mut seqs: Vec<&mut SeqKv> = self.kv.seqs.iter_mut().collect();
        let finite = self.ctx.forward(
            &mut seqs,
            &batch,
            Enter::Tokens(&tokens),
            Out::Rows {
                logits: &wanted,
                states,
                taps: Default::default(),
                on_row: &mut on_row,
            },
        )?;
        for b in blocks {
            self.ctx.truncate(&mut self.kv.seqs[b.slot], b.at);
        }
        if let Some(bad) = finite.iter().position(|&ok| !ok) {
            return Err(crate::Error::NonFinite {
                pos: batch[bad].pos,
            });
        }
        Ok(drafted)
    }

    /// Picks the drafts of `group` (drafted as `drafted`) for `jobs` into `out`, position
    /// by position through the Markov head where the drafter has one.
    fn pick(
        &mut self,
        group: &[Block],
        mut drafted: Vec<Drafted>,
        jobs: &[DraftJob],
        out: &mut [Draft],
    ) -> crate::Result<()> {
        let model = self.ctx.model_arc();
        let head = match model.draft_head() {
            Some(DraftHead::Markov(head)) => head,
            Some(DraftHead::Selector(sel)) => {
                for (b, d) in group.iter().zip(&drafted) {
                    walk(&model, sel, b.last, d, &jobs[b.job], &mut out[b.job]);
                }
                return Ok(());
            }
            None => {
                for (b, d) in group.iter().zip(&drafted) {
                    for row in &d.logits {
                        if !self.picker.pick(&model, &jobs[b.job], row, &mut out[b.job]) {
                            break;
                        }
                    }
                }
                return Ok(());
            }
        };
        // The token before each block's next position; `None` once it stopped drafting.
        let mut prev: Vec<Option<u32>> = group.iter().map(|b| Some(b.last)).collect();
        let mut conf: Vec<Option<f32>> = vec![None; group.len()];
        for i in 0.. {
            let live: Vec<usize> = (0..group.len())
                .filter(|&k| prev[k].is_some() && i < group[k].n)
                .collect();
            if live.is_empty() {
                break;
            }
            let before: Vec<u32> = live.iter().filter_map(|&k| prev[k]).collect();
            self.ctx.markov(&before, &mut |j, row| {
                let d = &mut drafted[live[j]];
                for (x, b) in d.logits[i].iter_mut().zip(row.bias) {
                    *x += b;
                }
                conf[live[j]] = d.states.get(i).and_then(|s| head.confidence(s, row.w1_row));
            })?;
            for k in live {
                let (b, row) = (group[k], &drafted[k].logits[i]);
                let go =
                    self.picker
                        .pick_given(&model, &jobs[b.job], row, conf[k], &mut out[b.job]);
                prev[k] = go.then(|| model.logit_token(crate::sampling::argmax(row)));
            }
        }
        Ok(())
    }
}

/// Per tap of `state` (`taps` of them, each `streams` streams side by side), the mean of
/// its streams: summed in order, then scaled by `1 / streams`.
fn stream_mean(state: &[f32], taps: usize, streams: usize) -> Vec<f32> {
    let e = state.len() / (taps * streams);
    let scale = 1.0 / streams as f32;
    let mut out = Vec::with_capacity(taps * e);
    for tap in state.chunks_exact(streams * e) {
        let mut sum = tap[..e].to_vec();
        for s in tap.chunks_exact(e).skip(1) {
            sum.iter_mut().zip(s).for_each(|(a, &b)| *a += b);
        }
        out.extend(sum.iter().map(|v| v * scale));
    }
    out
}

/// DFlash 2's drafts of a block (`drafted`, after the token `last`; one position per
/// token `job` asked for) for `job` into `d`: position by position the selector's best
/// candidate after the one chosen before it, until its probability among the candidates
/// falls below `p_min` (deterministic drafts).
fn walk(
    model: &Model,
    sel: &Selector,
    last: u32,
    drafted: &Drafted,
    job: &DraftJob,
    d: &mut Draft,
) {
    let file = model.file.bytes();
    let mut pred = last;
    let mut cands = Vec::with_capacity(sel.top_k());
    for (logits, state) in drafted.logits.iter().zip(&drafted.states) {
        cands.clear();
        device::top_k(logits, sel.top_k(), &mut cands);
        cands.iter_mut().for_each(|c| c.0 = model.logit_token(c.0));
        let scores = sel.scores(file, pred, &sel.gate(state), &cands);
        let best = crate::sampling::argmax(&scores) as usize;
        let sum: f32 = scores.iter().map(|s| (s - scores[best]).exp()).sum();
        let p = 1.0 / sum;
        if p < job.p_min {
            return;
        }
        pred = cands[best].0;
        d.tokens.push(pred);
        d.confidence.push(p);
    }
}

impl Proposer for BlockDrafter {
    fn name(&self) -> &str {
        match self.ctx.model().draft_head() {
            Some(DraftHead::Markov(_)) => "dspark",
            Some(DraftHead::Selector(_)) => "dflash2",
            None => "dflash",
        }
    }

    fn propose(
        &mut self,
        jobs: &[DraftJob],
        out: &mut [Draft],
        log: &mut DraftLog,
    ) -> crate::Result<()> {
        let (w, ub) = (self.width, self.ctx.config.n_ubatch);
        let mut rows: Vec<(usize, usize, u32)> = Vec::new();
        let mut features: Vec<f32> = Vec::new();
        for job in jobs {
            let (slot, tokens) = (job.slot, job.tokens);
            let context = tokens.len() - 1;
            let kept = self.kv.sync(&mut self.ctx, slot, tokens);
            for (pos, &t) in tokens.iter().enumerate().take(context).skip(kept) {
                rows.push((slot, pos, t));
                self.states.row_into(slot, Some(pos), w, &mut features);
            }
            self.kv.seen[slot].extend_from_slice(&tokens[kept..context]);
            self.states.forget_before(slot, context, w);
        }
        let blocks: Vec<Block> = jobs
            .iter()
            .enumerate()
            .map(|(job, j)| {
                let at = j.tokens.len() - 1;
                let n = j.n_max.min(self.block - self.lead).min(ub - self.lead);
                Block {
                    job,
                    slot: j.slot,
                    at,
                    last: j.tokens[at],
                    n,
                }
            })
            .filter(|b| b.n > 0)
            .collect();
        let room: usize = blocks.iter().map(|b| self.lead + b.n).sum();
        self.kv.make_room(&mut self.ctx, jobs, rows.len() + room);
        let t0 = Instant::now();
        for (c, chunk) in rows.chunks(ub).enumerate() {
            self.inject(chunk, &features[c * ub * w..(c * ub + chunk.len()) * w])?;
        }
        log.catch_up += t0.elapsed();
        // Forwards of as many blocks as a ubatch holds.
        let mut groups: Vec<Vec<Block>> = Vec::new();
        let mut rows_in = ub;
        for b in blocks {
            if rows_in + self.lead + b.n > ub {
                groups.push(Vec::new());
                rows_in = 0;
            }
            rows_in += self.lead + b.n;
            groups.last_mut().expect("a group").push(b);
        }
        for group in groups {
            let t0 = Instant::now();
            let drafted = self.blocks(&group)?;
            self.pick(&group, drafted, jobs, out)?;
            log.steps.push((group.len(), t0.elapsed()));
        }
        Ok(())
    }

    fn release(&mut self, slot: usize) {
        self.picker.release(slot);
        self.kv.end(slot);
    }

    fn behind(&self, slot: usize, tokens: &[u32]) -> usize {
        tokens.len() - self.kv.kept(slot, tokens)
    }

    fn drafts_blocks(&self) -> bool {
        true
    }

    fn confident(&self) -> bool {
        self.ctx
            .model()
            .markov()
            .is_some_and(|m| m.has_confidence())
    }

    fn features(&self) -> Features {
        Features {
            taps: self.taps.clone(),
            last: false,
        }
    }

    /// `state`: per tap, the target's hidden state, its streams averaged here where it
    /// has several (llama.cpp's layer inputs of a DeepSeek-V4 target: their mean).
    fn observe_state(&mut self, slot: usize, pos: usize, state: &[f32]) {
        match state.len() / self.width {
            0 | 1 => self.states.observe(slot, pos, state),
            streams => {
                let mean = stream_mean(state, self.taps.len(), streams);
                self.states.observe(slot, pos, &mean);
            }
        }
    }
}
