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
//! moving averages of measured minus predicted, the per-draft one moved by at most
//! [`OUTLIER`] of a step's predicted time a step (only drafting steps correct it: one step
//! in which the machine stalled for 0.1 s made drafts look 10 ms dearer a token, and one
//! user stopped drafting for the server's life). A step without drafts or prompt rows is
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
//! token the drafter missed, take at most [`PROBE_SHARE`] of the time, and as long as the
//! probe would beat the step's chosen depths if all its drafts were accepted (under load
//! a one-slot probe often cannot, and its catching up was what paused batches lost). The
//! fixed policy always asks for `n_max`, as llama.cpp does.
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
/// Share of a step's predicted seconds by which one step may move the per-draft
/// correction: a stall of the machine is one step's, a change of its speed shows in every
/// step.
const OUTLIER: f64 = 0.25;
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
    /// What the drafts add to `secs` by the curves (their rows, the draft steps,
    /// catching up); negative where the target's curve is not monotonic.
    draft_secs: f64,
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
    /// Seconds of a draft step by slots drafting: of one draft token each, or of a whole
    /// block where `block`.
    pub draft: CostCurve,
    /// The drafter drafts a block a forward (DFlash): a draft of any depth costs one step.
    pub block: bool,
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
            block: false,
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
        let drafting = self.drafting(depths);
        let (mut following, mut resume) = (0.0, 0.0);
        for (c, _) in cands.iter().zip(depths).filter(|(_, &d)| d > 0) {
            let missed = c.behind.saturating_sub(1) as f64 * self.catch_up;
            match c.paused() {
                true => resume += missed,
                false => following += missed,
            }
        }
        let secs = cost.predict(&forward) + drafting + following + resume;
        Forecast {
            tokens: cands
                .iter()
                .zip(depths)
                .map(|(c, &d)| self.expected(c, d))
                .sum(),
            secs,
            resume,
            draft_secs: secs - cost.predict(&base.shape),
            draft_tokens: drafts.rows,
            fits,
            plain: (drafts.rows == 0 && !base.reading)
                .then_some((base.shape.rows, cost.attend * base.shape.attended as f64)),
        }
    }

    /// Seconds of the draft steps that drafting `depths` takes.
    fn drafting(&self, depths: &[usize]) -> f64 {
        let deepest = depths.iter().copied().max().unwrap_or(0);
        match self.block {
            true => self.draft.at(depths.iter().filter(|&&d| d > 0).count()),
            false => (1..=deepest)
                .map(|j| self.draft.at(depths.iter().filter(|&&d| d >= j).count()))
                .sum(),
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
        // Drafts never make a step faster, whatever a noisy curve point or the correction
        // says: one that did would be chosen whatever its acceptance.
        let drafts = f.draft_secs - spread + self.per_draft * f.draft_tokens as f64;
        let mut secs = f.secs - f.draft_secs + drafts.max(0.0) + self.plain_extra;
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
        depths: Vec<usize>,
    ) -> (f64, Vec<usize>) {
        coordinate_ascent(
            depths,
            |i| std::iter::once(0).chain(cands[i].n_min.max(1)..=cands[i].n_max),
            |d| self.rate(cands, d, &self.forecast(cost, base, cands, d)),
        )
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
        for i in 0..cands.len() {
            let c = &cands[i];
            if depths[i] == 0 {
                self.end_spell(c.slot, true);
            }
            let draft_step = self.draft.at(1);
            let block = self.block;
            let catch_up = c.behind as f64 * self.catch_up;
            let s = self.slot(c.slot);
            s.depth = depths[i];
            s.spell += (depths[i] > 0) as usize;
            if depths[i] == 0 && c.n_max > 0 {
                s.idle += 1;
                let depth = match s.tried {
                    true => c.n_min.max(1),
                    false => c.n_min.max(FIRST_PROBE_DEPTH),
                }
                .min(c.n_max);
                let steps = if block { 1 } else { depth };
                let probe_secs = steps as f64 * draft_step + catch_up;
                let due = s.idle >= PROBE_AFTER || !s.tried;
                let affordable = probe_secs <= budget || !s.tried;
                if due && affordable && self.could_pay(cost, base, cands, &depths, i) {
                    budget -= probe_secs;
                    self.slot(c.slot).idle = 0;
                    depths[i] = depth;
                    probed = true;
                }
            } else {
                s.idle = 0;
            }
            self.slot(c.slot).tried |= depths[i] > 0;
        }
        self.probe_only = probed && !chosen;
        self.last = Some(self.forecast(cost, base, cands, &depths));
        depths
    }

    /// Lengths for drafts already made (`confidence[i]` for `cands[i]`'s, one per token)
    /// by a drafter that gives each position's probability of being accepted when the ones
    /// before it are (a confidence head): per slot the length, at most its draft's, that
    /// gives the step the most expected tokens a second with those probabilities in place
    /// of the slot's measured acceptance, the drafting already done counted whatever the
    /// lengths. The fixed policy keeps every draft.
    pub fn trim(
        &mut self,
        cost: &StepCost,
        base: &Base,
        cands: &[Candidate],
        confidence: &[Vec<f32>],
    ) -> Vec<usize> {
        let drafted: Vec<usize> = confidence.iter().map(Vec::len).collect();
        if self.kind == PolicyKind::Fixed {
            return drafted;
        }
        let spent = self.drafting(&drafted);
        let forecast = |d: &[usize]| {
            let f = self.forecast(cost, base, cands, d);
            let spent = spent - self.drafting(d);
            Forecast {
                secs: f.secs + spent,
                draft_secs: f.draft_secs + spent,
                ..f
            }
        };
        let score = |d: &[usize]| {
            let f = forecast(d);
            let tokens = d
                .iter()
                .zip(confidence)
                .map(|(&j, c)| {
                    let run = c[..j].iter().scan(1.0, |p, &a| {
                        *p *= a as f64;
                        Some(*p)
                    });
                    1.0 + run.sum::<f64>()
                })
                .sum();
            self.rate(cands, d, &Forecast { tokens, ..f })
        };
        let (_, lengths) = coordinate_ascent(drafted.clone(), |i| 0..=drafted[i], score);
        self.last = Some(forecast(&lengths));
        lengths
    }

    /// Whether candidate `i` drafting at some depth with every draft accepted would beat
    /// `depths`: a probe where even that cannot pay (a batch whose plain step is cheap per
    /// token, a prompt's catching up) only costs.
    fn could_pay(
        &self,
        cost: &StepCost,
        base: &Base,
        cands: &[Candidate],
        depths: &[usize],
        i: usize,
    ) -> bool {
        let now = self.rate(cands, depths, &self.forecast(cost, base, cands, depths));
        let mut with = depths.to_vec();
        (cands[i].n_min.max(1)..=cands[i].n_max).any(|d| {
            with[i] = d;
            let f = self.forecast(cost, base, cands, &with);
            let accepted = Forecast {
                tokens: f.tokens - self.expected(&cands[i], d) + (d + 1) as f64,
                ..f
            };
            self.rate(cands, &with, &accepted) > now
        })
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
            let drafts = f.draft_tokens as f64;
            let predicted = f.secs + self.plain_extra + self.per_draft * drafts;
            self.tally.predicted_secs += predicted;
            self.tally.measured_secs += secs;
            let missed = secs - predicted;
            if f.draft_tokens == 0 {
                self.plain_extra += ALPHA * missed;
                if let Some((rows, attention)) = f.plain {
                    if self.plain_floor.len() <= rows {
                        self.plain_floor.resize(rows + 1, None);
                    }
                    let seen = secs - attention;
                    let floor = self.plain_floor[rows].get_or_insert(seen);
                    *floor += FLOOR_ALPHA * (seen - *floor);
                }
            } else if f.resume == 0.0 && !self.probe_only {
                let bound = OUTLIER * predicted.max(0.0);
                self.per_draft += ALPHA * missed.clamp(-bound, bound) / drafts;
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

/// Coordinate ascent from `x`: each coordinate `i` in turn takes the value of `options(i)`
/// that scores best with the others fixed (the first of equals, the current one kept
/// unless beaten), twice over. The best score and its point.
fn coordinate_ascent<I: IntoIterator<Item = usize>>(
    mut x: Vec<usize>,
    options: impl Fn(usize) -> I,
    score: impl Fn(&[usize]) -> f64,
) -> (f64, Vec<usize>) {
    let mut best = score(&x);
    for _pass in 0..2 {
        for i in 0..x.len() {
            for v in options(i) {
                let was = std::mem::replace(&mut x[i], v);
                let r = score(&x);
                if r > best {
                    best = r;
                } else {
                    x[i] = was;
                }
            }
        }
    }
    (best, x)
}

#[cfg(test)]
mod tests;
