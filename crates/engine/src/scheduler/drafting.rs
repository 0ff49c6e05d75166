//! The engine's side of speculation: choosing depths, drafting for all slots at once,
//! measuring costs at start, and counting what was accepted.

use std::time::{Duration, Instant};

use super::Engine;
use crate::backend::Threads;
use crate::cost::{CostCurve, Shape, StepCost};
use crate::handle::{Counters, EngineConfig};
use crate::speculative::policy::Candidate;
use crate::speculative::{
    Draft, DraftJob, DraftLog, Features, Policy, Proposer, ProposerEnv, SpecConfig, SpecCosts,
    Speculation,
};
use crate::Result;

/// Tokens a drafter catches up on to measure what that costs per token.
const CATCH_UP_TOKENS: usize = 64;
/// Draft steps per calibration call (the fastest one counts).
const CALIBRATION_DEPTH: usize = 4;

/// A drafter, its settings and the policy's state.
pub(super) struct Spec {
    proposer: Box<dyn Proposer>,
    /// What the proposer reads of the target's rows, asked once.
    features: Features,
    cfg: SpecConfig,
    pub policy: Policy,
    /// Whether a drafting error was reported already.
    warned: bool,
}

impl Spec {
    /// A drafter for a target whose stage holds blocks `stage`: one that taps blocks outside
    /// it (a split's head, whose box holds them) is an error.
    pub fn new(
        s: Speculation,
        cfg: &EngineConfig,
        pool: Threads,
        stage: std::ops::Range<usize>,
    ) -> Result<Spec> {
        let env = ProposerEnv {
            pool,
            context: cfg.context_config(),
            n_slots: cfg.n_parallel,
        };
        let proposer = (s.make)(&env)?;
        let features = proposer.features();
        if !crate::executor::taps_within(&features.taps, &stage) {
            return Err(crate::Error::Config(format!(
                "the {} drafter reads the target's blocks {:?}, and this process holds blocks \
                 {stage:?}",
                proposer.name(),
                features.taps
            )));
        }
        let mut policy = Policy::new(
            s.config.policy,
            s.config.n_max,
            cfg.n_parallel,
            CostCurve::from_points(&[], cfg.n_parallel),
        );
        policy.block = proposer.drafts_blocks();
        Ok(Spec {
            proposer,
            features,
            cfg: s.config,
            policy,
            warned: false,
        })
    }

    /// What the policy predicts with; the target's forwards (every row wanting logits,
    /// near position 0) by `cost`, for as many rows as a step of every slot drafting
    /// `n_max` has.
    pub fn costs(&self, cost: &StepCost, n_slots: usize) -> SpecCosts {
        let p = &self.policy;
        let max_rows = n_slots * (self.cfg.n_max + 1);
        SpecCosts {
            drafter: self.proposer.name().to_string(),
            target_ms: (1..=max_rows)
                .map(|r| cost.predict(&Shape::run(0, r, r)) * 1e3)
                .collect(),
            draft_ms: (1..=p.draft.max_rows())
                .map(|r| p.draft.at(r) * 1e3)
                .collect(),
            catch_up_ms: p.catch_up * 1e3,
            acceptance: p.acceptance(),
        }
    }

    /// What the drafter reads of the target's rows ([`Proposer::features`]).
    pub fn features(&self) -> &Features {
        &self.features
    }

    pub fn observe_state(&mut self, slot: usize, pos: usize, state: &[f32]) {
        self.proposer.observe_state(slot, pos, state);
    }

    pub fn release(&mut self, slot: usize) {
        self.proposer.release(slot);
        self.policy.release(slot);
    }

    /// Folds a verified draft (`drafted` tokens reached by verification, the first
    /// `accepted` of them accepted) into the policy and the counters.
    pub fn observe(&mut self, slot: usize, drafted: usize, accepted: usize, c: &mut Counters) {
        if drafted == 0 {
            return;
        }
        self.policy.observe(slot, drafted, accepted);
        c.spec.spec_drafts_total += 1;
        c.spec.spec_draft_tokens_total += drafted as u64;
        c.spec.spec_accepted_tokens_total += accepted as u64;
        if c.spec.spec_accepted_per_pos.len() < drafted {
            c.spec.spec_accepted_per_pos.resize(drafted, 0);
        }
        for n in &mut c.spec.spec_accepted_per_pos[..accepted] {
            *n += 1;
        }
    }
}

impl Engine {
    /// Chooses the depth of every decoding slot in turn and fills its draft, all of them
    /// in one proposer call.
    pub(super) fn draft_all(&mut self) {
        let cohorts = &self.cohorts;
        let in_turn = |slot: usize| cohorts.in_turn(slot);
        for (_, a) in self
            .slots
            .iter_mut()
            .enumerate()
            .filter(|(i, _)| in_turn(*i))
        {
            if let Some(a) = a {
                a.seq.draft.clear();
            }
        }
        let Some(spec) = self.spec.as_mut() else {
            return;
        };
        let mut cands = Vec::new();
        let (mut decoding, mut waiting) = (Shape::default(), Vec::new());
        for (slot, a) in self.slots.iter().enumerate() {
            let Some(a) = a.as_ref().filter(|_| in_turn(slot)) else {
                continue;
            };
            let seq = &a.seq;
            let n = seq.pending();
            if !seq.is_decoding() {
                waiting.push((a.order, seq.kv.len(), n));
                continue;
            }
            decoding = decoding.plus(Shape::run(seq.kv.len(), n, 1));
            let n_max = spec
                .cfg
                .n_max
                .min(seq.draft_limits.n_max.unwrap_or(usize::MAX))
                .min(seq.draft_room());
            let n_max = match n_max {
                0 => 0,
                n => spec.proposer.offers(slot, &seq.tokens, n),
            };
            if n_max > 0 {
                let n_min = seq.draft_limits.n_min.unwrap_or(spec.cfg.n_min);
                let behind = spec.proposer.behind(slot, &seq.tokens);
                cands.push(Candidate {
                    slot,
                    n_max,
                    n_min,
                    behind,
                    remaining: seq.remaining(),
                    position: seq.tokens.len() - 1,
                });
            }
        }
        if cands.is_empty() {
            self.counters.spec.spec_paused_slots = 0;
            return;
        }
        waiting.sort_unstable();
        let waiting: Vec<(usize, usize)> = waiting.into_iter().map(|w| (w.1, w.2)).collect();
        let base = self.base_step(decoding, &waiting);
        let spec = self.spec.as_mut().expect("checked above");
        let depths = spec.policy.choose(&self.cost, &base, &cands);
        let c = &mut self.counters.spec;
        c.spec_paused_slots = 0;
        for (cand, &d) in cands.iter().zip(&depths) {
            if c.spec_depth_chosen.len() <= d {
                c.spec_depth_chosen.resize(d + 1, 0);
            }
            c.spec_depth_chosen[d] += 1;
            match d {
                0 if cand.paused() => c.spec_paused_slots += 1,
                0 => {}
                _ => c.spec_catch_up_tokens_total += cand.behind.saturating_sub(1) as u64,
            }
        }
        c.spec_paused_slot_steps_total += c.spec_paused_slots;
        let chosen: Vec<(Candidate, usize)> = cands
            .into_iter()
            .zip(depths)
            .filter(|&(_, d)| d > 0)
            .collect();
        if chosen.is_empty() {
            return;
        }
        let jobs: Vec<DraftJob> = chosen
            .iter()
            .map(|&(c, d)| {
                let seq = &self.slots[c.slot].as_ref().expect("candidate").seq;
                DraftJob {
                    slot: c.slot,
                    tokens: &seq.tokens,
                    n_max: d,
                    sampling: seq.sampling(),
                    p_min: spec.cfg.p_min,
                }
            })
            .collect();
        let mut out = vec![Draft::default(); jobs.len()];
        let mut log = DraftLog::default();
        let result = spec.proposer.propose(&jobs, &mut out, &mut log);
        drop(jobs);
        self.counters.spec.spec_catch_up_seconds_total += log.catch_up.as_secs_f64();
        if let Err(e) = result {
            if !std::mem::replace(&mut spec.warned, true) {
                eprintln!(
                    "warning: the {} drafter failed ({e}); decoding without drafts where it fails",
                    spec.proposer.name()
                );
            }
            return;
        }
        for (rows, took) in log.steps {
            spec.policy.draft.observe(rows, took);
        }
        if spec.proposer.confident() {
            let cands: Vec<Candidate> = chosen.iter().map(|c| c.0).collect();
            let confidence: Vec<Vec<f32>> = out.iter().map(|d| d.confidence.clone()).collect();
            let lengths = spec.policy.trim(&self.cost, &base, &cands, &confidence);
            for (d, n) in out.iter_mut().zip(lengths) {
                d.truncate(n);
            }
        }
        for ((c, _), d) in chosen.into_iter().zip(out) {
            if d.len() >= c.n_min.max(1) {
                self.slots[c.slot].as_mut().expect("candidate").seq.draft = d;
            }
        }
    }

    /// Measures what the drafter costs: draft steps over 1 to `n_parallel` slots, and
    /// catching up per token.
    pub(super) fn calibrate_drafter(&mut self) {
        let Some(name) = self.spec.as_ref().map(|s| s.proposer.name().to_string()) else {
            return;
        };
        let n_slots = self.cfg.n_parallel;
        let mut draft = Vec::new();
        for m in [1, 2, 4, 8, 16, 32, 64]
            .into_iter()
            .filter(|&m| m < n_slots)
            .chain([n_slots])
        {
            if let Some(t) = self.time_draft(m) {
                draft.push((m, t.as_secs_f64()));
            }
        }
        let catch_up = self.time_catch_up().unwrap_or(0.0);
        let spec = self.spec.as_mut().expect("checked above");
        spec.policy.draft = CostCurve::from_points(&draft, n_slots);
        spec.policy.catch_up = catch_up;
        eprintln!(
            "speculation ({name}, {:?} policy): draft step ms by slots {}; catching up {:.2} ms per token",
            spec.policy.kind,
            super::calibrate::in_ms(&draft),
            catch_up * 1e3
        );
    }

    /// Seconds per token of a drafter catching up on `CATCH_UP_TOKENS` tokens of one slot.
    fn time_catch_up(&mut self) -> Option<f64> {
        let spec = self.spec.as_mut()?;
        let n_vocab = self.exec.model().hparams.n_vocab;
        let tokens: Vec<u32> = (1..=CATCH_UP_TOKENS)
            .map(|i| (i * 7919 % n_vocab) as u32)
            .collect();
        let job = DraftJob {
            slot: 0,
            tokens: &tokens,
            n_max: 1,
            sampling: crate::SamplerConfig::greedy(),
            p_min: 0.0,
        };
        let mut out = vec![Draft::default()];
        let t0 = Instant::now();
        spec.proposer
            .propose(&[job], &mut out, &mut DraftLog::default())
            .ok()?;
        let took = t0.elapsed().as_secs_f64();
        spec.proposer.release(0);
        Some(took / CATCH_UP_TOKENS as f64)
    }

    /// One draft step over `m` slots: the fastest of `CALIBRATION_DEPTH` (`None` for a
    /// drafter that reports no steps, whose cost the policy then takes as nothing).
    fn time_draft(&mut self, m: usize) -> Option<Duration> {
        let spec = self.spec.as_mut()?;
        // Two tokens each: a drafter whose rows start at the second token (EAGLE-3) drafts.
        let tokens: Vec<Vec<u32>> = (0..m).map(|s| vec![(s % 3) as u32; 2]).collect();
        let jobs: Vec<DraftJob> = tokens
            .iter()
            .enumerate()
            .map(|(slot, t)| DraftJob {
                slot,
                tokens: t,
                n_max: CALIBRATION_DEPTH,
                sampling: crate::SamplerConfig::greedy(),
                p_min: 0.0,
            })
            .collect();
        let mut out = vec![Draft::default(); m];
        let mut log = DraftLog::default();
        spec.proposer.propose(&jobs, &mut out, &mut log).ok()?;
        for slot in 0..m {
            spec.proposer.release(slot);
        }
        log.steps.into_iter().map(|s| s.1).min()
    }
}
