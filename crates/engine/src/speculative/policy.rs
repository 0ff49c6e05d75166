//! How deep each slot drafts: measured costs against expected accepted tokens.
//!
//! The adaptive policy maximizes, over the draft depths `d_s` of the decoding slots,
//!
//! ```text
//!                 Σ_s E_s(d_s)
//! rate = ─────────────────────────────────   E_s(d) = 1 + Σ_{j=1..d} Π_{i≤j} a_s(i)
//!        T(base + drafts) + D + C + K + X
//! ```
//!
//! where `T` is the step's forward time as [`crate::cost::StepCost`] predicts it (the
//! planner's step budget predicts with the same model), `base` the rows the step has
//! anyway (one per decoding slot plus the prompt rows the budget gives), `drafts` slot
//! `s`'s `d_s` draft rows after its position, each wanting logits and attending its
//! slot's context; `D = Σ_{j=1..max d} D(#{s: d_s ≥ j})` the draft steps, `D(r)` one over
//! `r` slots; `C` the drafter catching up on the tokens it has not computed for the
//! drafting slots (the target's own token each step, a draft's last token when all were
//! accepted: charged whole, every step); `K` the catching up of slots that start or resume
//! drafting (every token they missed, a new request's prompt included, in one batched
//! forward: spread over the steps they are expected to draft before they pause, steps
//! drafted per pause measured apart for a request's first spell and for spells after a
//! pause, fewer when the request ends sooner); `X` what the measured steps showed the
//! prediction misses: seconds per step without drafts, and per draft token with them,
//! moving averages of measured minus predicted. A step without drafts or prompt rows is
//! predicted at the lower of that and its *plain floor*: a slow moving average of what
//! plain steps of as many rows measured, less their attention, plus this step's attention
//! (the cost curve's point moves fast, and a few slow steps raised it enough to resume a
//! paused batch that then drafted at a loss with nothing measuring plain steps again).
//! `a_s(i)` is slot `s`'s acceptance at draft position `i` given the positions before it
//! were accepted: the acceptance over all slots as its prior, then a moving average that
//! takes its first observations at nearly full weight (`1 / (n + 2)`).
//!
//! A slot at depth 0 costs nothing: its drafter computes nothing for it (it is *paused*
//! once it has missed more than a step's tokens), so a step with every slot at depth 0
//! is a plain decoding step. The depths are chosen for the batch jointly: coordinate
//! ascent from the depths of the last step, from all slots at depth 0 and from every
//! slot at each same depth, the best of them kept. Drafts that would take the step past
//! the step budget's target with its prompt rows are not considered: while prompts are
//! read, their rows come first, and no paused slot resumes (the batch is about to grow). The batch changes depths only for a predicted gain of
//! [`HYSTERESIS`] (of [`START_GAIN`] when that resumes a paused slot), so slots do not
//! flap between drafting and not. A request the batch does not draft for probes
//! [`FIRST_PROBE_DEPTH`] deep at its first step, and a slot that has not drafted for
//! [`PROBE_AFTER`] steps drafts once, so that estimates made on other requests' texts do
//! not keep a request from drafting, as long as probes, with the catching up on every
//! token the drafter missed, take at most [`PROBE_SHARE`] of the time. The fixed policy
//! always asks for `n_max`, as llama.cpp does.
//!
//! Worked example (1.5B target, 0.5B draft, short context): T(1 row) = 41 ms,
//! T(2) = 46 ms, T(5) = 62 ms, D(1) = 16 ms, a = 0.9 at every position. One slot:
//! d = 0: 1 / 41 ms = 24 tok/s; d = 1: 1.9 / 62 ms = 31 tok/s; d = 4: 4.1 / 126 ms =
//! 32 tok/s, so the policy drafts 4. With a = 0.5, d = 1 gives 1.5 / 62 ms = 24 tok/s, no
//! gain: it decodes plainly. Eight slots where T(8) = 81 ms and T(16) = 133 ms, D(8) =
//! 40 ms: all at d = 1 give 15.2 / 173 ms = 88 tok/s against 8 / 81 ms = 99 tok/s, so
//! none drafts, although one slot alone drafting 1 (8.9 / 100 ms) looks no worse than its
//! neighbours drafting.

use super::estimates::{Acceptance, Spells, PRIOR, SPELL_PRIOR};
use crate::cost::{CostCurve, Shape, StepCost, ALPHA};

/// Which depths are asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PolicyKind {
    /// Maximize expected accepted tokens per second for the whole batch.
    Adaptive,
    /// Always `n_max` (llama.cpp's behaviour), for comparison.
    Fixed,
}

/// Relative predicted gain below which the batch keeps its depths.
pub const HYSTERESIS: f64 = 0.03;
/// Relative predicted gain the batch needs to resume a paused slot: measured costs move by
/// several percent between runs on a shared machine, and a wrong start costs catching up.
pub const START_GAIN: f64 = 0.10;
/// Weight of a plain step in the plain floor: a few slow steps (another process, the
/// minute's memory rate) move the cost curve's point by [`ALPHA`] each and made a paused
/// batch resume on a plain rate the next steps did not have; the floor moves by a fiftieth.
const FLOOR_ALPHA: f64 = 0.02;
/// Steps at depth 0 after which a slot drafts once.
pub const PROBE_AFTER: usize = 16;
/// Share of the engine's time that probes may take, catching up included, over about the
/// last [`PROBE_WINDOW`] steps: counted since the start, the time of long runs without
/// probes let one busy batch probe every slot every [`PROBE_AFTER`] steps (a 5% loss at
/// 8 users). 2%: a one-user request's first probe (its prompt's catching up and 2 draft
/// steps, ~0.1 s for a 0.5B draft) must fit in that share of the last steps' time.
pub const PROBE_SHARE: f64 = 0.02;
pub const PROBE_WINDOW: f64 = 256.0;
/// Tokens a drafting slot's drafter computes each step anyway (the token it drafts from,
/// and a draft's last token when all were accepted): more means it was paused.
const FOLLOWING: usize = 2;
/// Depth of a request's first probe: one verification tells whether its drafts hold past
/// the first position (deeper positions are taken as its deepest observed one).
const FIRST_PROBE_DEPTH: usize = 2;

/// One decoding slot the policy chooses a depth for.
#[derive(Debug, Clone, Copy)]
pub struct Candidate {
    pub slot: usize,
    /// The most this slot may draft now (request, flag and room left).
    pub n_max: usize,
    /// Drafts shorter than this are not worth verifying for this request (0 or more).
    pub n_min: usize,
    /// Tokens the drafter must compute before it can draft for this slot (at least the
    /// token it drafts from).
    pub behind: usize,
    /// Tokens the request may still generate.
    pub remaining: usize,
    /// The position of its pending token (its drafts come after it).
    pub position: usize,
}

impl Candidate {
    /// Whether its drafter missed more than a step's tokens (it was not drafting).
    pub fn paused(&self) -> bool {
        self.behind > FOLLOWING
    }
}

/// Whether `depths` has a paused candidate draft.
fn resumes(cands: &[Candidate], depths: &[usize]) -> bool {
    cands.iter().zip(depths).any(|(c, &d)| d > 0 && c.paused())
}

/// The step that drafts would join.
#[derive(Debug, Clone, Copy, Default)]
pub struct Base {
    /// Its forward without drafts: the decoding rows and the prompt rows the step budget
    /// gives.
    pub shape: Shape,
    /// The step budget's target (`None`: no cap). Drafts must fit in it after the prompt
    /// rows: the planner would otherwise give their time to the drafts and read the
    /// prompts more slowly, which no draft is worth.
    pub cap: Option<f64>,
    /// Whether prompts are read in this step: their sequences will soon decode too, so
    /// the batch that a paused slot's catching up would be paid back in will not last,
    /// and no paused slot resumes.
    pub reading: bool,
}

#[derive(Debug, Clone)]
struct SlotState {
    acc: Acceptance,
    depth: usize,
    idle: usize,
    /// Steps drafted since it last resumed (probes aside).
    spell: usize,
    /// Whether it paused before in this request (its next spell is a resumed one).
    resumed: bool,
    /// Whether it drafted in this request, probes included.
    tried: bool,
}

/// What a step with some depths is predicted to give and cost.
#[derive(Debug, Clone, Copy, Default)]
struct Forecast {
    tokens: f64,
    /// Seconds of the step as the cost curves predict it, catching up included whole.
    secs: f64,
    /// Catching up of resuming slots, included whole in `secs`.
    resume: f64,
    draft_tokens: usize,
    /// Whether the drafts fit the step budget.
    fits: bool,
    /// A step without drafts or prompt rows: its decoding rows, and its attention's
    /// predicted seconds.
    plain: Option<(usize, f64)>,
}

/// Totals of the steps the policy chose depths for.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Tally {
    pub predicted_secs: f64,
    pub measured_secs: f64,
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
    /// Seconds of engine steps, and of drafting in steps that only probed, over about the
    /// last [`PROBE_WINDOW`] steps (older steps fade out).
    busy: f64,
    probing: f64,
    /// Whether the depths chosen last are probes only.
    probe_only: bool,
    /// The step chosen last, until it is accounted.
    last: Option<Forecast>,
    /// Moving averages of measured minus predicted seconds: of a step without drafts,
    /// and per draft token of a step with drafts beyond that.
    plain_extra: f64,
    per_draft: f64,
    /// By decoding rows, a slow moving average of what plain steps (no drafts, no prompt
    /// rows) measured less their attention's predicted seconds.
    plain_floor: Vec<Option<f64>>,
    /// Spells of slots starting to draft for the first time in their request, and of
    /// slots resuming after a pause.
    spells: [Spells; 2],
    pub tally: Tally,
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
            last: None,
            plain_extra: 0.0,
            per_draft: 0.0,
            plain_floor: Vec::new(),
            spells: SPELL_PRIOR.map(Spells::new),
            tally: Tally::default(),
        }
    }

    fn slot(&mut self, s: usize) -> &mut SlotState {
        let global = &self.global;
        self.slots[s].get_or_insert_with(|| SlotState {
            acc: global.as_prior(),
            depth: 0,
            idle: 0,
            spell: 0,
            resumed: false,
            tried: false,
        })
    }

    fn expected(&self, c: &Candidate, d: usize) -> f64 {
        self.slots[c.slot]
            .as_ref()
            .map_or(1.0, |s| s.acc.expected(d))
    }

    /// Expected tokens and seconds of the step with `depths`, from the cost curves.
    fn forecast(
        &self,
        cost: &StepCost,
        base: &Base,
        cands: &[Candidate],
        depths: &[usize],
    ) -> Forecast {
        let drafts = cands
            .iter()
            .zip(depths)
            .map(|(c, &d)| Shape::run(c.position + 1, d, d))
            .fold(Shape::default(), Shape::plus);
        let forward = base.shape.plus(drafts);
        let fits = drafts.rows == 0
            || !(base.reading && resumes(cands, depths))
                && base.cap.is_none_or(|cap| cost.predict(&forward) <= cap);
        let deepest = depths.iter().copied().max().unwrap_or(0);
        let drafting: f64 = (1..=deepest)
            .map(|j| self.draft.at(depths.iter().filter(|&&d| d >= j).count()))
            .sum();
        let (mut following, mut resume) = (0.0, 0.0);
        for (c, _) in cands.iter().zip(depths).filter(|(_, &d)| d > 0) {
            let missed = c.behind.saturating_sub(1) as f64 * self.catch_up;
            match c.paused() {
                true => resume += missed,
                false => following += missed,
            }
        }
        Forecast {
            tokens: cands
                .iter()
                .zip(depths)
                .map(|(c, &d)| self.expected(c, d))
                .sum(),
            secs: cost.predict(&forward) + drafting + following + resume,
            resume,
            draft_tokens: drafts.rows,
            fits,
            plain: (drafts.rows == 0 && !base.reading)
                .then_some((base.shape.rows, cost.attend * base.shape.attended as f64)),
        }
    }

    /// What the decision weighs: `f`'s seconds corrected by what measured steps showed,
    /// with resuming slots' catching up spread over the steps they may still draft.
    fn rate(&self, cands: &[Candidate], depths: &[usize], f: &Forecast) -> f64 {
        if !f.fits {
            return 0.0;
        }
        let spread: f64 = cands
            .iter()
            .zip(depths)
            .filter(|(c, &d)| d > 0 && c.paused())
            .map(|(c, &d)| {
                let steps =
                    (c.remaining as f64 / self.expected(c, d)).clamp(1.0, self.spell(c.slot));
                c.behind.saturating_sub(1) as f64 * self.catch_up * (1.0 - 1.0 / steps)
            })
            .sum();
        let mut secs = f.secs - spread + self.plain_extra + self.per_draft * f.draft_tokens as f64;
        if let Some((rows, attention)) = f.plain {
            if let Some(Some(floor)) = self.plain_floor.get(rows) {
                secs = secs.min(floor + attention);
            }
        }
        f.tokens / secs.max(1e-6)
    }

    /// Coordinate ascent from `depths`: each slot in turn takes its best depth with the
    /// others fixed, twice over.
    fn ascend(
        &self,
        cost: &StepCost,
        base: &Base,
        cands: &[Candidate],
        mut depths: Vec<usize>,
    ) -> (f64, Vec<usize>) {
        let score = |d: &[usize]| self.rate(cands, d, &self.forecast(cost, base, cands, d));
        let mut best = score(&depths);
        for _pass in 0..2 {
            for i in 0..cands.len() {
                let options = std::iter::once(0).chain(cands[i].n_min.max(1)..=cands[i].n_max);
                for d in options {
                    let was = std::mem::replace(&mut depths[i], d);
                    let r = score(&depths);
                    if r > best {
                        best = r;
                    } else {
                        depths[i] = was;
                    }
                }
            }
        }
        (best, depths)
    }

    /// The depth each candidate drafts this step (0: decode plainly). `base` is the
    /// step without drafts.
    pub fn choose(&mut self, cost: &StepCost, base: &Base, cands: &[Candidate]) -> Vec<usize> {
        if self.kind == PolicyKind::Fixed {
            let depths: Vec<usize> = cands.iter().map(|c| c.n_max).collect();
            self.last = Some(self.forecast(cost, base, cands, &depths));
            return depths;
        }
        let allowed = |c: &Candidate, d: usize| if d < c.n_min { 0 } else { d.min(c.n_max) };
        let current: Vec<usize> = cands
            .iter()
            .map(|c| allowed(c, self.slot(c.slot).depth))
            .collect();
        let deepest = cands.iter().map(|c| c.n_max).max().unwrap_or(0);
        let starts = std::iter::once(current.clone())
            .chain((0..=deepest).map(|d| cands.iter().map(|c| allowed(c, d)).collect()));
        let mut best = (f64::MIN, current.clone());
        for start in starts {
            let found = self.ascend(cost, base, cands, start);
            if found.0 > best.0 {
                best = found;
            }
        }
        let now = self.rate(cands, &current, &self.forecast(cost, base, cands, &current));
        let resumes = resumes(cands, &best.1);
        let margin = match resumes {
            true => START_GAIN,
            false => HYSTERESIS,
        };
        let mut depths = match best.0 > now * (1.0 + margin) {
            true => best.1,
            false => current,
        };
        let chosen = depths.iter().any(|&d| d > 0);
        let mut budget = PROBE_SHARE * self.busy - self.probing;
        let mut probed = false;
        for (c, d) in cands.iter().zip(depths.iter_mut()) {
            if *d == 0 {
                self.end_spell(c.slot, true);
            }
            let draft_step = self.draft.at(1);
            let catch_up = c.behind as f64 * self.catch_up;
            let s = self.slot(c.slot);
            s.depth = *d;
            s.spell += (*d > 0) as usize;
            if *d == 0 && c.n_max > 0 {
                s.idle += 1;
                let depth = match s.tried {
                    true => c.n_min.max(1),
                    false => c.n_min.max(FIRST_PROBE_DEPTH),
                }
                .min(c.n_max);
                let cost = depth as f64 * draft_step + catch_up;
                if (s.idle >= PROBE_AFTER || !s.tried) && cost <= budget {
                    budget -= cost;
                    s.idle = 0;
                    *d = depth;
                    probed = true;
                }
            } else {
                s.idle = 0;
            }
            s.tried |= *d > 0;
        }
        self.probe_only = probed && !chosen;
        self.last = Some(self.forecast(cost, base, cands, &depths));
        depths
    }

    /// Accounts one engine step that took `step`, of which `drafting` was spent drafting:
    /// what the curves missed enters the corrections, from steps without probes or
    /// resuming slots (whose catching up is rarer and noisier than the rest).
    pub fn account(&mut self, step: std::time::Duration, drafting: std::time::Duration) {
        let secs = step.as_secs_f64();
        let keep = 1.0 - 1.0 / PROBE_WINDOW;
        self.busy = self.busy * keep + secs;
        self.probing *= keep;
        if let Some(f) = self.last.take() {
            self.tally.predicted_secs +=
                f.secs + self.plain_extra + self.per_draft * f.draft_tokens as f64;
            self.tally.measured_secs += secs;
            let missed = secs - f.secs;
            if f.draft_tokens == 0 {
                self.plain_extra += ALPHA * (missed - self.plain_extra);
                if let Some((rows, attention)) = f.plain {
                    if self.plain_floor.len() <= rows {
                        self.plain_floor.resize(rows + 1, None);
                    }
                    let seen = secs - attention;
                    let floor = self.plain_floor[rows].get_or_insert(seen);
                    *floor += FLOOR_ALPHA * (seen - *floor);
                }
            } else if f.resume == 0.0 && !self.probe_only {
                let per = (missed - self.plain_extra) / f.draft_tokens as f64;
                self.per_draft += ALPHA * (per.clamp(-0.1, 0.1) - self.per_draft);
            }
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
        self.end_spell(slot, false);
        self.slots[slot] = None;
    }

    /// Slot `slot` stops drafting, paused or because its request ended: the steps it
    /// drafted enter the estimate of its kind of spell.
    fn end_spell(&mut self, slot: usize, paused: bool) {
        let Some(s) = self.slots[slot].as_mut().filter(|s| s.spell > 0) else {
            return;
        };
        let n = std::mem::take(&mut s.spell);
        self.spells[s.resumed as usize].end(n, paused);
        s.resumed |= paused;
    }

    /// Steps slot `slot` is expected to keep drafting if it starts now.
    fn spell(&self, slot: usize) -> f64 {
        let resumed = self.slots[slot].as_ref().is_some_and(|s| s.resumed);
        self.spells[resumed as usize].mean()
    }

    /// The expected acceptance at each draft position, over all slots.
    pub fn acceptance(&self) -> Vec<f64> {
        self.global.extrapolated()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn ms(p: &[(usize, f64)]) -> Vec<(usize, f64)> {
        p.iter().map(|&(r, t)| (r, t / 1e3)).collect()
    }

    /// The target's forwards as one curve (no separate head, no attention term), and the
    /// drafter's steps.
    fn costs() -> (StepCost, CostCurve) {
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

    fn cand(slot: usize, n_max: usize, behind: usize) -> Candidate {
        Candidate {
            slot,
            n_max,
            n_min: 0,
            behind,
            remaining: 256,
            position: 100,
        }
    }

    fn one(n_max: usize) -> Vec<Candidate> {
        vec![cand(0, n_max, 1)]
    }

    fn rows(n: usize) -> Base {
        let shape = Shape {
            rows: n,
            logits: 1,
            attended: 0,
        };
        Base {
            shape,
            cap: None,
            reading: false,
        }
    }

    #[test]
    fn drafts_deep_when_drafts_are_accepted_and_not_at_all_when_rejected() {
        let (t, d) = costs();
        let mut p = Policy::new(PolicyKind::Adaptive, 8, 1, d);
        for _ in 0..50 {
            p.observe(0, 8, 8);
        }
        let deep = p.choose(&t, &rows(1), &one(8))[0];
        assert!(deep >= 4, "depth {deep} with everything accepted");
        for _ in 0..50 {
            p.observe(0, 4, 0);
        }
        assert_eq!(p.choose(&t, &rows(1), &one(8))[0], 0);
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
            let d = p.choose(&t, &rows(1), &one(8))[0];
            p.account(
                Duration::from_millis(41 + drafting_ms * d as u64),
                Duration::from_millis(drafting_ms * d as u64),
            );
            d
        };
        assert_eq!(
            step(&mut p, 1),
            FIRST_PROBE_DEPTH,
            "a request's first probe"
        );
        let depths: Vec<usize> = (0..PROBE_AFTER).map(|_| step(&mut p, 1)).collect();
        assert_eq!(depths.iter().filter(|&&d| d > 0).count(), 1);
        let costly: usize = (0..4 * PROBE_AFTER).map(|_| step(&mut p, 5000)).sum();
        assert_eq!(
            costly, 1,
            "one probe that took 5 s stops probing for a while"
        );
        let mut f = Policy::new(PolicyKind::Fixed, 8, 1, d);
        assert_eq!(f.choose(&t, &rows(1), &one(5)), vec![5]);
    }

    #[test]
    fn probes_take_their_share_of_recent_time_only() {
        let (t, d) = costs();
        let mut p = Policy::new(PolicyKind::Adaptive, 8, 8, d);
        p.catch_up = 2e-3;
        for _ in 0..10_000 {
            p.account(Duration::from_millis(40), Duration::ZERO);
        }
        for s in 0..8 {
            for _ in 0..50 {
                p.observe(s, 4, 0);
            }
        }
        let cands: Vec<Candidate> = (0..8).map(|s| cand(s, 8, 20)).collect();
        let (mut probing, mut total) = (0.0, 0.0);
        for _ in 0..256 {
            let depths = p.choose(&t, &rows(8), &cands);
            let n = depths.iter().filter(|&&d| d > 0).count() as f64;
            let drafting = n * (0.016 + 20.0 * 2e-3);
            probing += drafting;
            total += 0.081 + drafting;
            p.account(
                Duration::from_secs_f64(0.081 + drafting),
                Duration::from_secs_f64(drafting),
            );
        }
        assert!(probing > 0.0);
        assert!(
            probing / total < 2.0 * PROBE_SHARE,
            "{probing:.2} s of {total:.2} s probing after 400 s without probes"
        );
    }

    /// Earlier requests drafted fully or not at all, half each: alone, that no longer pays
    /// one slot here. A new request probes at its start, learns from that one
    /// verification that its drafts hold, and drafts.
    #[test]
    fn a_new_request_probes_first_and_learns_fast() {
        let (t, d) = costs();
        let mut p = Policy::new(PolicyKind::Adaptive, 8, 1, d);
        p.catch_up = 1e-3;
        for i in 0..50 {
            p.observe(0, 4, 4 * (i % 2));
        }
        p.release(0);
        let fresh = [cand(0, 8, 40)];
        assert_eq!(p.choose(&t, &rows(1), &fresh)[0], 0, "no probe budget yet");
        for _ in 0..256 {
            p.account(Duration::from_millis(41), Duration::ZERO);
        }
        assert_eq!(p.choose(&t, &rows(1), &fresh)[0], FIRST_PROBE_DEPTH);
        p.account(Duration::from_millis(180), Duration::from_millis(140));
        p.observe(0, FIRST_PROBE_DEPTH, FIRST_PROBE_DEPTH);
        assert!(
            p.choose(&t, &rows(1), &one(8))[0] > 0,
            "drafts after one good probe"
        );
    }

    #[test]
    fn a_slot_drafting_shallow_learns_to_draft_deeper() {
        let (t, d) = costs();
        let mut p = Policy::new(PolicyKind::Adaptive, 8, 1, d);
        for _ in 0..50 {
            p.observe(0, 1, 1);
        }
        assert!(
            p.choose(&t, &rows(1), &one(8))[0] >= 4,
            "positions 2..8 taken as position 1"
        );
    }

    #[test]
    fn a_large_batch_makes_drafts_cheap_and_a_long_context_dear() {
        let (mut t, d) = costs();
        let mut p = Policy::new(PolicyKind::Adaptive, 8, 1, d);
        for _ in 0..50 {
            p.observe(0, 2, 1);
        }
        let alone = p.choose(&t, &rows(1), &one(8))[0];
        let with_prompt = p.choose(&t, &rows(40), &one(8))[0];
        assert!(with_prompt >= alone, "{with_prompt} < {alone}");
        assert!(alone > 0, "the first draft position is always accepted");
        t.attend = 1e-3;
        let far = p.choose(&t, &rows(1), &one(8))[0];
        assert_eq!(far, 0, "a draft row attending 100 positions costs 0.1 s");
    }

    /// Eight slots drafting 1 each: the module doc's example. Any one slot leaving alone
    /// gains little (the draft step stays), all leaving together gain.
    #[test]
    fn the_batch_stops_drafting_together_when_no_slot_alone_would() {
        let (t, _) = costs();
        let d = CostCurve::from_points(&ms(&[(1, 16.0), (8, 40.0)]), 8);
        let mut p = Policy::new(PolicyKind::Adaptive, 8, 8, d);
        let cands: Vec<Candidate> = (0..8).map(|s| cand(s, 8, 1)).collect();
        for s in 0..8 {
            for _ in 0..50 {
                p.observe(s, 1, 1);
            }
            p.slot(s).depth = 1;
        }
        let all = vec![1; 8];
        let mut one_less = all.clone();
        one_less[0] = 0;
        let r = |dd: &[usize]| p.rate(&cands, dd, &p.forecast(&t, &rows(8), &cands, dd));
        assert!(r(&one_less) < r(&all), "no single slot gains by leaving");
        assert_eq!(p.choose(&t, &rows(8), &cands), vec![0; 8]);
    }

    #[test]
    fn a_paused_slot_resumes_only_when_its_catching_up_pays() {
        let (t, d) = costs();
        let mut p = Policy::new(PolicyKind::Adaptive, 8, 1, d);
        p.catch_up = 2e-3;
        for _ in 0..50 {
            p.observe(0, 8, 8);
        }
        let mut short = cand(0, 8, 400);
        short.remaining = 4;
        assert_eq!(
            p.choose(&t, &rows(1), &[short])[0],
            0,
            "0.8 s of catching up for 4 tokens"
        );
        assert!(short.paused());
        let long = cand(0, 8, 400);
        let reading = Base {
            reading: true,
            ..rows(1)
        };
        assert_eq!(
            p.choose(&t, &reading, &[long])[0],
            0,
            "not while a prompt is read"
        );
        assert!(
            p.choose(&t, &rows(1), &[long])[0] > 0,
            "spread over the spells drafted"
        );
    }

    /// Four paused slots whose drafts would gain a little over plain steps of 80 ms. After
    /// a long run of 56 ms plain steps, five slow ones (the cost curve's point and the
    /// correction raised with them) do not resume them; a lasting slowdown does. (They
    /// offer no drafts while the plain steps run, and drafted before: no probes.)
    #[test]
    fn a_few_slow_plain_steps_do_not_resume_a_paused_batch() {
        let (t, d) = costs();
        let offering = |n_max| -> Vec<Candidate> { (0..4).map(|s| cand(s, n_max, 60)).collect() };
        let run = |steps: &[f64]| {
            let mut p = Policy::new(PolicyKind::Adaptive, 4, 4, d.clone());
            p.catch_up = 1e-3;
            let mut t = t.clone();
            let plain = rows(4);
            for &ms in steps {
                assert_eq!(p.choose(&t, &plain, &offering(0)), vec![0; 4]);
                let took = Duration::from_secs_f64(ms / 1e3);
                t.observe(&plain.shape, took);
                p.account(took, Duration::ZERO);
            }
            for s in 0..4 {
                for _ in 0..50 {
                    p.observe(s, 4, 2);
                }
                p.slot(s).tried = true;
            }
            p.choose(&t, &plain, &offering(4))
        };
        let mut spike = vec![56.2; 200];
        spike.extend([80.0; 5]);
        assert_eq!(run(&spike), vec![0; 4], "five slow steps after 200");
        assert_ne!(run(&[80.0; 205]), vec![0; 4], "205 slow steps");
    }

    /// Steps that read prompts without drafts, slower than predicted, teach the plain
    /// correction only: a slot whose drafts are accepted still drafts afterwards.
    #[test]
    fn prompt_steps_without_drafts_leave_the_per_draft_correction_alone() {
        let (t, d) = costs();
        let mut p = Policy::new(PolicyKind::Adaptive, 8, 1, d);
        for _ in 0..50 {
            p.observe(0, 8, 8);
        }
        let reading = Base {
            reading: true,
            ..rows(40)
        };
        for _ in 0..20 {
            assert_eq!(p.choose(&t, &reading, &[cand(0, 0, 1)]), vec![0]);
            p.account(Duration::from_millis(400), Duration::ZERO);
        }
        assert_eq!(p.per_draft, 0.0);
        assert!(p.choose(&t, &rows(1), &one(8))[0] >= 4);
    }

    #[test]
    fn drafts_never_take_the_step_budget_from_prompt_rows() {
        let (t, d) = costs();
        let mut p = Policy::new(PolicyKind::Adaptive, 8, 1, d);
        for _ in 0..50 {
            p.observe(0, 8, 8);
        }
        let cap = Some(t.predict(&Shape::run(101, 3, 3)));
        let alone = Base { cap, ..rows(1) };
        let depth = p.choose(&t, &alone, &one(8))[0];
        assert!(
            (1..=2).contains(&depth),
            "1 + {depth} rows within 3 rows' time"
        );
        let with_prompt = Base { cap, ..rows(3) };
        assert_eq!(
            p.choose(&t, &with_prompt, &one(8))[0],
            0,
            "two prompt rows fill the budget"
        );
    }

    #[test]
    fn steps_slower_than_predicted_stop_drafting() {
        let (t, d) = costs();
        let mut p = Policy::new(PolicyKind::Adaptive, 8, 1, d);
        for _ in 0..50 {
            p.observe(0, 4, 2);
        }
        assert!(p.choose(&t, &rows(1), &one(4))[0] > 0);
        let mut drafted = Vec::new();
        for _ in 0..40 {
            let depth = p.choose(&t, &rows(1), &one(4))[0];
            drafted.push(depth > 0);
            let took = match depth {
                0 => 0.041,
                d => 0.041 + 0.05 * d as f64,
            };
            p.account(Duration::from_secs_f64(took), Duration::ZERO);
            if depth > 0 {
                p.observe(0, depth, 2.min(depth));
            }
        }
        let late = drafted[20..].iter().filter(|&&d| d).count();
        assert!(
            late <= 1,
            "50 ms a draft token measured: {late} of the last 20 steps drafted (a probe at most)"
        );
        assert!(p.tally.measured_secs > 0.0 && p.tally.predicted_secs > 0.0);
    }
}
