//! The target's own multi-token-prediction blocks draft ([`model::Part::Nextn`]).

use std::sync::Arc;
use std::time::Instant;

use device::Row;
use kernels::ThreadPool;
use kv::SeqKv;
use model::Model;

use super::kept::KeptKv;
use super::pick::Picker;
use super::{Draft, DraftJob, DraftLog, Proposer};
use crate::executor::{Enter, Out, RowOut, Taps};
use crate::{ContextConfig, Executor};

/// A NextN stage with a KV sequence per slot, planned like the target's. Its row of
/// position `p` is computed from the token at `p` and the target's final normed state of
/// `p - 1` (zeros at position 0, and where the target's state is not at hand: a prefix the
/// target took from its cache), which the engine hands over as the target computes them
/// ([`Proposer::observe_state`]).
///
/// Each call brings the slot's rows up to the last token `t_L` (keeping the common prefix
/// of what it computed and the sequence; every row kept was computed from the target's
/// states), then drafts: the row of `t_L` gives `d1`; the row of `d_i` at `L + i`, entered
/// with the stage's own normed state of the row before, gives `d(i+1)`. The draft rows
/// past `t_L` are dropped at the next call, as they were not computed from the target's
/// states.
pub struct Mtp {
    ctx: Executor,
    /// Per slot: its KV, whose rows were all computed from the target's states.
    kv: KeptKv,
    /// Per slot: the target's states of positions `from..`, `[n, n_embd]`.
    states: Vec<States>,
    picker: Picker,
}

#[derive(Default)]
struct States {
    from: usize,
    rows: Vec<f32>,
}

/// What one forward of the stage gives for its rows that draft: logits and normed states,
/// by the job they draft for.
struct Drafted {
    logits: Vec<Vec<f32>>,
    states: Vec<Vec<f32>>,
}

impl Mtp {
    /// `model`: a NextN stage. `config.n_ctx` KV positions for all `n_slots` together; runs
    /// on `pool`.
    pub fn new(
        model: Model,
        config: ContextConfig,
        n_slots: usize,
        pool: Arc<ThreadPool>,
    ) -> crate::Result<Self> {
        if model.stage.embed || model.stage.layers.start < model.hparams.n_layer {
            return Err(crate::Error::Config(
                "an MTP drafter runs a model's NextN stage".into(),
            ));
        }
        let n_vocab = model.hparams.n_vocab;
        Ok(Mtp {
            ctx: Executor::with_pool(model, config, pool)?,
            kv: KeptKv::new(n_slots),
            states: (0..n_slots).map(|_| States::default()).collect(),
            picker: Picker::new(n_slots, n_vocab),
        })
    }

    fn n_embd(&self) -> usize {
        self.ctx.model().hparams.n_embd
    }

    /// The target's state of position `pos` of `slot`, zeros where it has none.
    fn state_into(&self, slot: usize, pos: Option<usize>, out: &mut Vec<f32>) {
        let e = self.n_embd();
        let s = &self.states[slot];
        match pos.filter(|&p| p >= s.from && (p - s.from + 1) * e <= s.rows.len()) {
            Some(p) => out.extend_from_slice(&s.rows[(p - s.from) * e..][..e]),
            None => out.resize(out.len() + e, 0.0),
        }
    }

    /// One forward of `rows` (`(slot, pos, token)`, a slot's rows together and ascending)
    /// entered with `states` (`[rows, n_embd]`); the logits and normed state of each row
    /// in `drafting` (row indices, by job).
    fn forward(
        &mut self,
        rows: &[(usize, usize, u32)],
        states: &[f32],
        drafting: &[usize],
    ) -> crate::Result<Drafted> {
        let batch: Vec<Row> = rows
            .iter()
            .map(|&(s, pos, _)| Row { pos, seq: s })
            .collect();
        let tokens: Vec<u32> = rows.iter().map(|r| r.2).collect();
        let n = drafting.len();
        let mut got = Drafted {
            logits: vec![Vec::new(); n],
            states: vec![Vec::new(); n],
        };
        let mut on_row = |r: usize, out: RowOut<'_>| {
            let j = drafting
                .iter()
                .position(|&d| d == r)
                .expect("a drafting row");
            match out {
                RowOut::Logits(l) => got.logits[j] = l.to_vec(),
                RowOut::State(s) => got.states[j] = s.to_vec(),
                RowOut::Tap { .. } => {}
            }
        };
        let mut seqs: Vec<&mut SeqKv> = self.kv.seqs.iter_mut().collect();
        let finite = self.ctx.forward(
            &mut seqs,
            &batch,
            Enter::Joined {
                tokens: &tokens,
                states,
            },
            Out::Rows {
                logits: drafting,
                states: drafting,
                taps: Taps::default(),
                on_row: &mut on_row,
            },
        )?;
        if let Some(bad) = finite.iter().position(|&ok| !ok) {
            return Err(crate::Error::NonFinite {
                pos: batch[bad].pos,
            });
        }
        Ok(got)
    }
}

impl Proposer for Mtp {
    fn name(&self) -> &str {
        "mtp"
    }

    fn propose(
        &mut self,
        jobs: &[DraftJob],
        out: &mut [Draft],
        log: &mut DraftLog,
    ) -> crate::Result<()> {
        let e = self.n_embd();
        let mut rows: Vec<(usize, usize, u32)> = Vec::new();
        let mut entered: Vec<f32> = Vec::new();
        let mut last_row: Vec<usize> = Vec::with_capacity(jobs.len());
        for job in jobs {
            let (slot, tokens) = (job.slot, job.tokens);
            let kept = self.kv.sync(&mut self.ctx, slot, tokens);
            for (pos, &t) in tokens.iter().enumerate().skip(kept) {
                rows.push((slot, pos, t));
                self.state_into(slot, pos.checked_sub(1), &mut entered);
            }
            self.kv.seen[slot].extend_from_slice(&tokens[kept..]);
            last_row.push(rows.len() - 1);
            let s = &mut self.states[slot];
            let from = tokens.len().saturating_sub(2).max(s.from);
            let drop = ((from - s.from) * e).min(s.rows.len());
            s.rows.drain(..drop);
            s.from = from;
        }
        self.kv.make_room(&mut self.ctx, jobs, rows.len());
        let ub = self.ctx.config.n_ubatch;
        let mut drafted = Drafted {
            logits: vec![Vec::new(); jobs.len()],
            states: vec![Vec::new(); jobs.len()],
        };
        let t0 = Instant::now();
        for (c, chunk) in rows.chunks(ub).enumerate() {
            let base = c * ub;
            let here: Vec<usize> = (0..jobs.len())
                .filter(|&j| (base..base + chunk.len()).contains(&last_row[j]))
                .collect();
            let wanted: Vec<usize> = here.iter().map(|&j| last_row[j] - base).collect();
            let states = &entered[base * e..(base + chunk.len()) * e];
            let got = self.forward(chunk, states, &wanted)?;
            for ((&j, l), s) in here.iter().zip(got.logits).zip(got.states) {
                drafted.logits[j] = l;
                drafted.states[j] = s;
            }
        }
        if rows.len() == jobs.len() {
            log.steps.push((rows.len(), t0.elapsed()));
        } else {
            log.catch_up += t0.elapsed();
        }
        let model = self.ctx.model_arc();
        let mut active: Vec<usize> = Vec::with_capacity(jobs.len());
        for (j, job) in jobs.iter().enumerate() {
            if self
                .picker
                .pick(&model, job, &drafted.logits[j], &mut out[j])
            {
                active.push(j);
            }
        }
        while !active.is_empty() {
            let rows: Vec<(usize, usize, u32)> = active
                .iter()
                .map(|&j| {
                    let (job, d) = (&jobs[j], &out[j]);
                    let pos = job.tokens.len() - 1 + d.len();
                    (job.slot, pos, *d.tokens.last().expect("drafted"))
                })
                .collect();
            let entered: Vec<f32> = active
                .iter()
                .flat_map(|&j| drafted.states[j].iter().copied())
                .collect();
            let wanted: Vec<usize> = (0..rows.len()).collect();
            let t0 = Instant::now();
            let got = self.forward(&rows, &entered, &wanted)?;
            log.steps.push((rows.len(), t0.elapsed()));
            let mut still = Vec::with_capacity(active.len());
            for ((&j, l), s) in active.iter().zip(got.logits).zip(got.states) {
                if self.picker.pick(&model, &jobs[j], &l, &mut out[j]) {
                    drafted.states[j] = s;
                    still.push(j);
                }
            }
            active = still;
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

    fn features(&self) -> super::Features {
        super::Features {
            taps: Vec::new(),
            last: true,
        }
    }

    fn observe_state(&mut self, slot: usize, pos: usize, state: &[f32]) {
        let s = &mut self.states[slot];
        let e = state.len();
        let held = s.rows.len() / e;
        if pos < s.from || pos > s.from + held {
            s.from = pos;
            s.rows.clear();
        } else {
            s.rows.truncate((pos - s.from) * e);
        }
        s.rows.extend_from_slice(state);
    }
}
