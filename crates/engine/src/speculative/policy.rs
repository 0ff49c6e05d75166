//! How deep each slot drafts: measured costs against expected accepted tokens.
//!
//! The adaptive policy maximizes, over the draft depths `d_s` of the decoding slots,
//!
//! ```text
//!            Σ_s E_s(d_s)
//! rate = ───────────────────────────────────────────   E_s(d) = 1 + Σ_{j=1..d} Π_{i≤j} a_s(i)
//!        T(base + drafts) + Σ_{j=1..max d} D(#{s: d_s ≥ j})
//! ```
//!
//! where `T` is the step's forward time as [`crate::cost::StepCost`] predicts it (the
//! budget of the planner predicts with the same model), `base` the rows the step has
//! anyway (one per decoding slot plus any prompt chunks), `drafts` slot `s`'s `d_s` draft
//! rows after its position, each wanting logits, `D(r)` the time of one draft step over
//! `r` slots, and `a_s(i)` the moving average of slot `s`'s acceptance at
//! draft position `i` given the positions before it were accepted. `d_s = 0` (plain
//! decoding) is always a candidate, so the chosen depths are never predicted to be slower
//! than not drafting. Depths change only for a predicted gain of [`HYSTERESIS`] (of
//! [`START_GAIN`] to start drafting); a slot
//! that has not drafted for [`PROBE_AFTER`] steps drafts once so that its estimate
//! recovers, as long as probes, with the catching up on every token the drafter missed,
//! take at most [`PROBE_SHARE`] of the time. A slot that starts drafting is charged its
//! catching up spread over the steps it may still draft (at most [`CATCH_UP_STEPS`]).
//! Measured step times are compared with the predicted ones, for steps without drafts and,
//! per number of decoding slots, with drafts; drafting is predicted slower by the ratio. The fixed policy always asks for `n_max`, as llama.cpp does.
//!
//! Worked example (1.5B target, 0.5B draft, one slot, short context): T(1 row) = 41 ms,
//! T(2) = 46 ms, T(5) = 62 ms, D(1) = 16 ms, a = 0.9 at every position. d = 0: 1 / 41 ms = 24 tok/s;
//! d = 1: 1.9 / 62 ms = 31 tok/s; d = 4: 4.1 / 126 ms = 32 tok/s, so the policy drafts 4.
//! With a = 0.5, d = 1 gives 1.5 / 62 ms = 24 tok/s, no gain: it decodes plainly.

use crate::cost::{CostCurve, Shape, StepCost, ALPHA};

/// Which depths are asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PolicyKind {
    /// Maximize expected accepted tokens per second for the whole batch.
    Adaptive,
    /// Always `n_max` (llama.cpp's behaviour), for comparison.
    Fixed,
}

/// Relative predicted gain below which a slot keeps its depth.
pub const HYSTERESIS: f64 = 0.02;
/// Relative predicted gain a slot needs to start drafting: measured costs move by several
/// percent between runs on a shared machine, and a wrong start costs catching up.
pub const START_GAIN: f64 = 0.10;
/// Steps at depth 0 after which a slot drafts once.
pub const PROBE_AFTER: usize = 16;
/// Share of the engine's time that probes may take, catching up included.
pub const PROBE_SHARE: f64 = 0.01;
/// Steps, at most, over which a slot that starts drafting is expected to keep drafting
/// (fewer when the request ends sooner): its catching up is charged to each of them in
/// equal parts.
const CATCH_UP_STEPS: f64 = 64.0;
/// Acceptance assumed before anything is observed.
const PRIOR: f64 = 0.7;

/// Moving averages of conditional acceptance per draft position.
#[derive(Debug, Clone)]
struct Acceptance {
    a: Vec<f64>,
}

impl Acceptance {
    fn new(n: usize, prior: f64) -> Self {
        Acceptance { a: vec![prior; n] }
    }

    /// Expected tokens a step yields with `d` drafts: the target's own token plus each
    /// draft accepted together with all before it.
    fn expected(&self, d: usize) -> f64 {
        let mut run = 1.0;
        let mut e = 1.0;
        for &a in &self.a[..d.min(self.a.len())] {
            run *= a;
            e += run;
        }
        e
    }

    fn observe(&mut self, drafted: usize, accepted: usize) {
        for i in 0..drafted.min(accepted + 1).min(self.a.len()) {
            let hit = if i < accepted { 1.0 } else { 0.0 };
            self.a[i] += ALPHA * (hit - self.a[i]);
        }
    }
}

/// One decoding slot the policy chooses a depth for.
#[derive(Debug, Clone, Copy)]
pub struct Candidate {
    pub slot: usize,
    /// The most this slot may draft now (request, flag and room left).
    pub n_max: usize,
    /// Drafts shorter than this are not worth verifying for this request (0 or more).
    pub n_min: usize,
    /// Tokens the drafter must catch up on before it can draft for this slot.
    pub behind: usize,
    /// Tokens the request may still generate.
    pub remaining: usize,
    /// The position of its pending token (its drafts come after it).
    pub position: usize,
}

#[derive(Debug, Clone)]
struct SlotState {
    acc: Acceptance,
    depth: usize,
    idle: usize,
}

/// The policy's state: the drafter's cost curve, acceptance per slot and over all slots.
#[derive(Debug, Clone)]
pub struct Policy {
    pub kind: PolicyKind,
    pub draft: CostCurve,
    /// Seconds per token a drafter spends catching up (computing tokens it missed).
    pub catch_up: f64,
    global: Acceptance,
    slots: Vec<Option<SlotState>>,
    /// Seconds of engine steps, and of drafting in steps that only probed.
    busy: f64,
    probing: f64,
    /// Whether the depths chosen last are probes only.
    probe_only: bool,
    /// Seconds predicted for the step chosen last, whether it drafts, and for how many
    /// decoding slots.
    predicted: f64,
    drafted: bool,
    n_decoding: usize,
    /// Moving averages of measured / predicted step time, for steps without drafts and,
    /// per number of decoding slots, with drafts: whatever the curves miss (catching up,
    /// copies, the mix of rows) counts against drafting in proportion.
    plain_scale: f64,
    spec_scale: Vec<f64>,
}

impl Policy {
    pub fn new(kind: PolicyKind, n_max: usize, n_slots: usize, draft: CostCurve) -> Self {
        Policy {
            kind,
            draft,
            catch_up: 0.0,
            global: Acceptance::new(n_max, PRIOR),
            slots: vec![None; n_slots],
            busy: 0.0,
            probing: 0.0,
            probe_only: false,
            predicted: 0.0,
            drafted: false,
            n_decoding: 0,
            plain_scale: 1.0,
            spec_scale: vec![1.0; n_slots + 1],
        }
    }

    fn slot(&mut self, s: usize) -> &mut SlotState {
        let global = &self.global;
        self.slots[s].get_or_insert_with(|| SlotState {
            acc: global.clone(),
            depth: 0,
            idle: 0,
        })
    }

    /// Predicted tokens per second of the step with `depths` (per candidate) on top of
    /// `base`.
    /// Drafting steps are predicted slower by the measured / predicted ratio of their own
    /// against that of plain steps.
    fn rate(&self, cost: &StepCost, base: Shape, cands: &[Candidate], depths: &[usize]) -> f64 {
        let (tokens, time) = self.predict(cost, base, cands, depths);
        if depths.iter().any(|&d| d > 0) {
            tokens / (time * self.spec_scale(cands.len()) / self.plain_scale)
        } else {
            tokens / time
        }
    }

    /// Expected tokens and seconds of the step with `depths`, from the cost model.
    fn predict(
        &self,
        cost: &StepCost,
        base: Shape,
        cands: &[Candidate],
        depths: &[usize],
    ) -> (f64, f64) {
        let expected = |c: &Candidate, d: usize| {
            self.slots[c.slot]
                .as_ref()
                .map_or(1.0, |s| s.acc.expected(d))
        };
        let tokens: f64 = cands.iter().zip(depths).map(|(c, &d)| expected(c, d)).sum();
        let forward = cands
            .iter()
            .zip(depths)
            .map(|(c, &d)| Shape::run(c.position + 1, d, d))
            .fold(base, Shape::plus);
        let deepest = depths.iter().copied().max().unwrap_or(0);
        let drafting: f64 = (1..=deepest)
            .map(|j| self.draft.at(depths.iter().filter(|&&d| d >= j).count()))
            .sum();
        let catch_up: f64 = cands
            .iter()
            .zip(depths)
            .filter(|(_, &d)| d > 0)
            .map(|(c, &d)| {
                let steps_left = (c.remaining as f64 / expected(c, d)).clamp(1.0, CATCH_UP_STEPS);
                c.behind.saturating_sub(2) as f64 * self.catch_up / steps_left
            })
            .sum();
        (tokens, cost.predict(&forward) + drafting + catch_up)
    }

    /// The depth each candidate drafts this step (0: decode plainly). `base` is the
    /// step's forward without drafts.
    pub fn choose(&mut self, cost: &StepCost, base: Shape, cands: &[Candidate]) -> Vec<usize> {
        if self.kind == PolicyKind::Fixed {
            return cands.iter().map(|c| c.n_max).collect();
        }
        let mut depths: Vec<usize> = cands
            .iter()
            .map(|c| {
                let d = self.slot(c.slot).depth.min(c.n_max);
                if d < c.n_min {
                    0
                } else {
                    d
                }
            })
            .collect();
        for _pass in 0..2 {
            for i in 0..cands.len() {
                let now = self.rate(cost, base, cands, &depths);
                let margin = if depths[i] == 0 {
                    START_GAIN
                } else {
                    HYSTERESIS
                };
                let mut best = (now * (1.0 + margin), depths[i]);
                let options = std::iter::once(0).chain(cands[i].n_min.max(1)..=cands[i].n_max);
                for d in options {
                    let mut trial = depths.clone();
                    trial[i] = d;
                    let r = self.rate(cost, base, cands, &trial);
                    if r > best.0 {
                        best = (r, d);
                    }
                }
                depths[i] = best.1;
            }
        }
        let chosen = depths.iter().any(|&d| d > 0);
        let mut budget = PROBE_SHARE * self.busy - self.probing;
        let mut probed = false;
        for (c, d) in cands.iter().zip(depths.iter_mut()) {
            let cost = self.draft.at(1) + c.behind as f64 * self.catch_up;
            let s = self.slot(c.slot);
            s.depth = *d;
            if *d == 0 && c.n_max > 0 {
                s.idle += 1;
                if s.idle >= PROBE_AFTER && cost <= budget {
                    budget -= cost;
                    s.idle = 0;
                    *d = c.n_min.max(1).min(c.n_max);
                    probed = true;
                }
            } else {
                s.idle = 0;
            }
        }
        self.probe_only = probed && !chosen;
        self.drafted = depths.iter().any(|&d| d > 0);
        self.n_decoding = cands.len();
        self.predicted = self.predict(cost, base, cands, &depths).1;
        depths
    }

    fn spec_scale(&self, n_decoding: usize) -> f64 {
        self.spec_scale[n_decoding.min(self.spec_scale.len() - 1)]
    }

    /// Accounts one engine step that took `step`, of which `drafting` was spent drafting.
    pub fn account(&mut self, step: std::time::Duration, drafting: std::time::Duration) {
        self.busy += step.as_secs_f64();
        if self.predicted > 0.0 {
            let ratio = (step.as_secs_f64() / self.predicted).clamp(0.25, 4.0);
            let last = self.spec_scale.len() - 1;
            let scale = if self.drafted {
                &mut self.spec_scale[self.n_decoding.min(last)]
            } else {
                &mut self.plain_scale
            };
            *scale += ALPHA * (ratio - *scale);
            self.predicted = 0.0;
        }
        if std::mem::take(&mut self.probe_only) {
            self.probing += drafting.as_secs_f64();
        }
    }

    /// Folds in a verified draft of `drafted` tokens of which the first `accepted` were
    /// accepted.
    pub fn observe(&mut self, slot: usize, drafted: usize, accepted: usize) {
        self.slot(slot).acc.observe(drafted, accepted);
        self.global.observe(drafted, accepted);
    }

    /// Slot `slot`'s sequence ended.
    pub fn release(&mut self, slot: usize) {
        self.slots[slot] = None;
    }

    /// The expected acceptance at each draft position, over all slots.
    pub fn acceptance(&self) -> &[f64] {
        &self.global.a
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The target's forwards as one curve (no separate head, no attention term), and the
    /// drafter's steps.
    fn costs() -> (StepCost, CostCurve) {
        let ms = |p: &[(usize, f64)]| p.iter().map(|&(r, t)| (r, t / 1e3)).collect::<Vec<_>>();
        let mut target = StepCost::unmeasured(64);
        target.rows = CostCurve::from_points(
            &ms(&[(1, 41.0), (2, 46.4), (4, 56.2), (8, 80.9), (16, 133.4)]),
            64,
        );
        (
            target,
            CostCurve::from_points(&ms(&[(1, 16.0), (8, 40.0)]), 8),
        )
    }

    fn one(n_max: usize) -> Vec<Candidate> {
        vec![Candidate {
            slot: 0,
            n_max,
            n_min: 0,
            behind: 1,
            remaining: 256,
            position: 100,
        }]
    }

    fn rows(n: usize) -> Shape {
        Shape {
            rows: n,
            logits: 1,
            attended: 0,
        }
    }

    #[test]
    fn drafts_deep_when_drafts_are_accepted_and_not_at_all_when_rejected() {
        let (t, d) = costs();
        let mut p = Policy::new(PolicyKind::Adaptive, 8, 1, d);
        for _ in 0..50 {
            p.observe(0, 8, 8);
        }
        let deep = p.choose(&t, rows(1), &one(8))[0];
        assert!(deep >= 4, "depth {deep} with everything accepted");
        for _ in 0..50 {
            p.observe(0, 4, 0);
        }
        assert_eq!(p.choose(&t, rows(1), &one(8))[0], 0);
    }

    #[test]
    fn probes_after_idle_steps_and_fixed_always_drafts_n_max() {
        let (t, d) = costs();
        let free = CostCurve::from_points(&[], 8);
        let mut p = Policy::new(PolicyKind::Adaptive, 8, 1, free);
        for _ in 0..50 {
            p.observe(0, 4, 0);
        }
        let step = |p: &mut Policy, drafting_ms: u64| {
            let d = p.choose(&t, rows(1), &one(8))[0];
            p.account(
                std::time::Duration::from_millis(41 + drafting_ms * d as u64),
                std::time::Duration::from_millis(drafting_ms * d as u64),
            );
            d
        };
        let depths: Vec<usize> = (0..PROBE_AFTER).map(|_| step(&mut p, 1)).collect();
        assert_eq!(depths.iter().filter(|&&d| d > 0).count(), 1);
        let costly: usize = (0..4 * PROBE_AFTER).map(|_| step(&mut p, 5000)).sum();
        assert_eq!(
            costly, 1,
            "one probe that took 5 s stops probing for a while"
        );
        let mut f = Policy::new(PolicyKind::Fixed, 8, 1, d);
        assert_eq!(f.choose(&t, rows(1), &one(5)), vec![5]);
    }

    #[test]
    fn a_large_batch_makes_drafts_cheap_and_a_long_context_dear() {
        let (mut t, d) = costs();
        let mut p = Policy::new(PolicyKind::Adaptive, 8, 1, d);
        for _ in 0..50 {
            p.observe(0, 2, 1);
        }
        let alone = p.choose(&t, rows(1), &one(8))[0];
        let with_prompt = p.choose(&t, rows(40), &one(8))[0];
        assert!(with_prompt >= alone, "{with_prompt} < {alone}");
        assert!(alone > 0, "the first draft position is always accepted");
        t.attend = 1e-3;
        let far = p.choose(&t, rows(1), &one(8))[0];
        assert_eq!(far, 0, "a draft row attending 100 positions costs 0.1 s");
    }
}
