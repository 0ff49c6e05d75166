//! Drafters that enter the target's hidden states: the target's own multi-token-prediction
//! blocks ([`model::Part::Nextn`]) and EAGLE-3 ([`model::Part::Drafter`]).

use std::time::Instant;

use device::Row;
use kv::SeqKv;
use model::Model;

use super::kept::KeptKv;
use super::pick::Picker;
use super::target_states::{feature_taps, TargetStates};
use super::{Draft, DraftJob, DraftLog, Features, Proposer};
use crate::backend::Threads;
use crate::executor::{Enter, Out, RowOut, Taps};
use crate::{ContextConfig, Executor};

/// Which drafter, and how its rows line up with the target's.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Kind {
    /// MTP: row `p` is the token at `p` with the target's final normed state of `p - 1`
    /// (zeros at position 0); a draft row enters with the stage's normed state of the row
    /// before. For a model of several residual streams (`streams`: the target's last block
    /// and the stage's), the states are instead the streams as those blocks leave them.
    Nextn { streams: Option<[usize; 2]> },
    /// EAGLE-3: row `P` is the token at `P + 1` with the target's features of `P`, fused
    /// ([`Enter::Fused`]); a draft row enters with the block's output of the row before
    /// (before the output norm: the tap of its last block).
    Eagle3 { taps: Vec<usize>, last_block: usize },
}

/// A drafter stage with a KV sequence per slot, planned like the target's, whose rows
/// enter with the target's states ([`Kind`]), which the engine hands over as the target
/// computes them ([`Proposer::observe_state`]; zeros where the target's state is not at
/// hand: a prefix the target took from its cache).
///
/// The drafter's token sequence is the target's (MTP) or the target's from its second
/// token (EAGLE-3); row `r` of it is at KV position `r`. Each call brings the slot's rows
/// up to the last token `t_L` (keeping the common prefix of what it computed and the
/// sequence; every row kept was computed from the target's states), then drafts: the row
/// of `t_L` gives `d1`; the row of `d_i` after it, entered with the stage's own state of
/// the row before, gives `d(i+1)`. The draft rows past `t_L` are dropped at the next call,
/// as they were not computed from the target's states.
pub struct HiddenDrafter {
    kind: Kind,
    ctx: Executor,
    /// Per slot: its KV, whose rows were all computed from the target's states.
    kv: KeptKv,
    states: TargetStates,
    /// Floats of the target's state a catching-up row enters with.
    width: usize,
    /// Per slot: the target's first token (EAGLE-3's sequence starts after it).
    first: Vec<Option<u32>>,
    picker: Picker,
}

/// What one forward of the stage gives for its rows that draft: logits and the states the
/// next draft row enters with, by the job they draft for.
struct Drafted {
    logits: Vec<Vec<f32>>,
    states: Vec<Vec<f32>>,
}

impl HiddenDrafter {
    /// MTP: `model` is a NextN stage. `config.n_ctx` KV positions for all `n_slots`
    /// together; runs on `pool`.
    pub fn nextn(
        model: Model,
        config: ContextConfig,
        n_slots: usize,
        pool: Threads,
    ) -> crate::Result<Self> {
        let (hp, stage) = (&model.hparams, &model.stage);
        if stage.embed || stage.layers.start < hp.n_layer {
            return Err(crate::Error::Config(
                "an MTP drafter runs a model's NextN stage".into(),
            ));
        }
        let streams = (hp.streams > 1).then(|| [hp.n_layer - 1, stage.layers.end - 1]);
        let width = hp.hidden_width();
        Self::new(Kind::Nextn { streams }, width, model, config, n_slots, pool)
    }

    /// EAGLE-3: `model` is an EAGLE-3 drafter's [`model::Part::Drafter`] stage; as
    /// [`HiddenDrafter::nextn`].
    pub fn eagle3(
        model: Model,
        config: ContextConfig,
        n_slots: usize,
        pool: Threads,
    ) -> crate::Result<Self> {
        let (Some(target), Some(width)) = (model.hparams.target.clone(), model.fuse_width()) else {
            return Err(crate::Error::Config(format!(
                "{} is not an EAGLE-3 drafter",
                model.arch.name()
            )));
        };
        let taps = feature_taps(&target)?;
        let last_block = model.stage.layers.end - 1;
        let kind = Kind::Eagle3 { taps, last_block };
        Self::new(kind, width, model, config, n_slots, pool)
    }

    fn new(
        kind: Kind,
        width: usize,
        model: Model,
        config: ContextConfig,
        n_slots: usize,
        pool: Threads,
    ) -> crate::Result<Self> {
        let n_vocab = model.hparams.n_vocab;
        Ok(HiddenDrafter {
            kind,
            ctx: Executor::with_threads(model, config, pool)?,
            kv: KeptKv::new(n_slots),
            states: TargetStates::new(n_slots),
            width,
            first: vec![None; n_slots],
            picker: Picker::new(n_slots, n_vocab),
        })
    }

    /// How far behind its row a row's target state is: row `p` of MTP enters with the
    /// state of `p - 1`, row `P` of EAGLE-3 with the features of `P`.
    fn lag(&self) -> usize {
        match self.kind {
            Kind::Nextn { .. } => 1,
            Kind::Eagle3 { .. } => 0,
        }
    }

    /// The drafter's token sequence for the target's `tokens` (EAGLE-3's starts at the
    /// second), and whether the slot's kept rows still belong to it (EAGLE-3's rows
    /// depend on the first token, which its sequence leaves out).
    fn sequence<'t>(&self, slot: usize, tokens: &'t [u32]) -> (&'t [u32], bool) {
        match self.kind {
            Kind::Nextn { .. } => (tokens, true),
            Kind::Eagle3 { .. } => {
                let same = self.first[slot] == tokens.first().copied();
                (tokens.get(1..).unwrap_or(&[]), same)
            }
        }
    }

    /// One forward of `rows` (`(slot, pos, token)`, a slot's rows together and ascending)
    /// entered with `states`: the target's (`[rows, width]`) when `caught_up` is false,
    /// else the stage's own (`[rows, hidden_width]`); the logits and the state the next
    /// draft row enters with of each row in `drafting` (row indices, by job).
    fn forward(
        &mut self,
        rows: &[(usize, usize, u32)],
        states: &[f32],
        caught_up: bool,
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
                RowOut::State(s) | RowOut::Tap { state: s, .. } => got.states[j] = s.to_vec(),
            }
        };
        let enter = match (&self.kind, caught_up) {
            (Kind::Eagle3 { .. }, false) => Enter::Fused {
                tokens: &tokens,
                features: states,
            },
            _ => Enter::Joined {
                tokens: &tokens,
                states,
            },
        };
        let last_block = match &self.kind {
            Kind::Nextn { streams: None } => None,
            Kind::Nextn {
                streams: Some([_, own]),
            } => Some([*own]),
            Kind::Eagle3 { last_block, .. } => Some([*last_block]),
        };
        let (normed, taps): (&[usize], _) = match &last_block {
            None => (drafting, Taps::default()),
            Some(layers) => (
                &[],
                Taps {
                    layers,
                    rows: drafting,
                },
            ),
        };
        let mut seqs: Vec<&mut SeqKv> = self.kv.seqs.iter_mut().collect();
        let finite = self.ctx.forward(
            &mut seqs,
            &batch,
            enter,
            Out::Rows {
                logits: drafting,
                states: normed,
                taps,
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

impl Proposer for HiddenDrafter {
    fn name(&self) -> &str {
        match self.kind {
            Kind::Nextn { .. } => "mtp",
            Kind::Eagle3 { .. } => "eagle3",
        }
    }

    fn propose(
        &mut self,
        jobs: &[DraftJob],
        out: &mut [Draft],
        log: &mut DraftLog,
    ) -> crate::Result<()> {
        let (w, lag) = (self.width, self.lag());
        let mut rows: Vec<(usize, usize, u32)> = Vec::new();
        let mut entered: Vec<f32> = Vec::new();
        // Per job drafting: its sequence's length and its last row.
        let mut last_row: Vec<Option<(usize, usize)>> = Vec::with_capacity(jobs.len());
        for job in jobs {
            let slot = job.slot;
            let (seq, same) = self.sequence(slot, job.tokens);
            if !same {
                self.kv.sync(&mut self.ctx, slot, &[]);
                self.first[slot] = job.tokens.first().copied();
            }
            if seq.is_empty() {
                last_row.push(None);
                continue;
            }
            let kept = self.kv.sync(&mut self.ctx, slot, seq);
            for (pos, &t) in seq.iter().enumerate().skip(kept) {
                rows.push((slot, pos, t));
                let at = pos.checked_sub(lag);
                self.states.row_into(slot, at, w, &mut entered);
            }
            self.kv.seen[slot].extend_from_slice(&seq[kept..]);
            last_row.push(Some((seq.len(), rows.len() - 1)));
            let from = (seq.len() - 1).saturating_sub(lag);
            self.states.forget_before(slot, from, w);
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
            let here: Vec<(usize, usize)> = (0..jobs.len())
                .filter_map(|j| Some((j, last_row[j]?.1)))
                .filter(|&(_, r)| (base..base + chunk.len()).contains(&r))
                .collect();
            let wanted: Vec<usize> = here.iter().map(|&(_, r)| r - base).collect();
            let states = &entered[base * w..(base + chunk.len()) * w];
            let got = self.forward(chunk, states, false, &wanted)?;
            for ((&(j, _), l), s) in here.iter().zip(got.logits).zip(got.states) {
                drafted.logits[j] = l;
                drafted.states[j] = s;
            }
        }
        let drafting = last_row.iter().flatten().count();
        match rows.len() {
            0 => {}
            n if n == drafting => log.steps.push((n, t0.elapsed())),
            _ => log.catch_up += t0.elapsed(),
        }
        let model = self.ctx.model_arc();
        let mut active: Vec<usize> = Vec::with_capacity(jobs.len());
        for (j, job) in jobs.iter().enumerate() {
            if last_row[j].is_some()
                && self
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
                    let (len, _) = last_row[j].expect("drafting");
                    (
                        job.slot,
                        len - 1 + d.len(),
                        *d.tokens.last().expect("drafted"),
                    )
                })
                .collect();
            let entered: Vec<f32> = active
                .iter()
                .flat_map(|&j| drafted.states[j].iter().copied())
                .collect();
            let wanted: Vec<usize> = (0..rows.len()).collect();
            let t0 = Instant::now();
            let got = self.forward(&rows, &entered, true, &wanted)?;
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
        let (seq, same) = self.sequence(slot, tokens);
        match same {
            true => seq.len() - self.kv.kept(slot, seq),
            false => seq.len(),
        }
    }

    fn features(&self) -> Features {
        match &self.kind {
            Kind::Nextn { streams: None } => Features {
                taps: Vec::new(),
                last: true,
            },
            Kind::Nextn {
                streams: Some([target, _]),
            } => Features {
                taps: vec![*target],
                last: false,
            },
            Kind::Eagle3 { taps, .. } => Features {
                taps: taps.clone(),
                last: false,
            },
        }
    }

    fn observe_state(&mut self, slot: usize, pos: usize, state: &[f32]) {
        self.states.observe(slot, pos, state);
    }
}
