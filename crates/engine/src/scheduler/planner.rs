//! The planner: which requests enter which slots, which positions of which slots a step
//! computes under its row and time budgets, and whose KV is given up when the pool runs
//! short. It knows token counts, positions and admission orders, not models: the engine
//! answers its questions through [`Slots`] and predicts step times with its cost model,
//! and the tests below drive it with plain numbers.
//!
//! A step is planned in two phases, oldest request first within each:
//! 1. Decoding slots (the last sampled token pending, after the accepted drafts a recurrent
//!    state gave back): each takes its rows, then as much of its draft
//!    as the rows and the time target allow. The target is the [`StepBudget`] applied to
//!    the predicted time of the decoding rows alone (by default 2.5× it): a stream waits
//!    at most that long for its next token whoever else is reading a prompt. A stream
//!    decoding alone with no prompt waiting keeps its whole draft (it delays nobody).
//! 2. Prompts share what is left: the most rows whose step is predicted within the
//!    target (all `n_batch` rows when nobody decodes), at least one. The oldest prompt is
//!    given a quarter of them (so that no prompt starves), the rest go to the prompts with
//!    the fewest tokens left first (so that a short prompt is not queued behind long ones).
//!    When nobody decodes yet but a prompt ends in this step, its stream starts within
//!    the step: the other prompts' rows (another ending prompt's too) are then cut to the
//!    target of its first decoding row on top of its own rows.
//!
//! Worked example (`n_batch = 64`, a step predicted at 10 ms + 1 ms per row, budget
//! 2.5×): slots in admission order A (a prompt of 2,000 tokens), B (decoding, with a draft
//! of 3), C (a prompt of 6 tokens). The decoding rows alone: B's 1 row, 11 ms, so the
//! target is 27.5 ms. B takes its row and its draft (4 rows, 14 ms). Prompts may add 13
//! rows (27 ms): A is given ⌈13 / 4⌉ = 4, C its 6 (fewest left), A the last 3. The step
//! is `A 7 rows, B 4 rows, C 6 rows`; A's prompt goes on in the next steps.

use std::collections::VecDeque;

use crate::cost::Shape;
use crate::StepBudget;

/// Positions `from..from + n` of slot `slot` in this step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Planned {
    pub slot: usize,
    pub from: usize,
    pub n: usize,
}

/// What the planner asks of the engine's slots.
pub(super) trait Slots {
    /// The slots that may be planned this step, as `(admission order, slot)`.
    fn candidates(&self) -> Vec<(u64, usize)>;
    /// Called once per candidate, in admission order, before any is planned: a slot with
    /// no KV takes its cached prefix.
    fn prepare(&mut self, slot: usize);
    /// Tokens of `slot` not yet computed (the prompt's rest, or the last sampled token).
    fn pending(&self, slot: usize) -> usize;
    /// Whether it decodes: its pending tokens are the last sampled one and the accepted
    /// drafts a recurrent state gave back (computed again with it), and it may draft.
    fn decoding(&self, slot: usize) -> bool;
    /// Its draft tokens, cut to at most `keep`; returns how many it keeps.
    fn cut_draft(&mut self, slot: usize, keep: usize) -> usize;
    /// Positions it has computed.
    fn computed(&self, slot: usize) -> usize;
    /// Reserves KV for `positions` positions of `slot`, giving up younger slots' KV that
    /// is not in `plan` if it must (see [`victim`]). False when there is no room.
    fn make_room(&mut self, slot: usize, positions: usize, plan: &[Planned]) -> bool;
    /// `n` prompt rows of `slot` from `from`, changed so that no image is cut, within
    /// `room` rows (`Sequence::fit_images`).
    fn fit_images(&self, slot: usize, from: usize, n: usize, room: usize) -> usize;
}

/// What bounds a step.
pub(super) struct Limits<'a> {
    /// Rows over all slots.
    pub n_batch: usize,
    pub budget: StepBudget,
    /// Predicted seconds of a step of this shape.
    pub predict: &'a dyn Fn(&Shape) -> f64,
    /// A prompt's rows are cut back to end at a multiple of this many positions where that
    /// leaves any (a block, for a pool that snapshots recurrent states where a forward ends
    /// at a block's end; 1: no cut): rows that end the prompt too, so that its last full
    /// block has a snapshot a later turn resumes from (its last rows follow in one more
    /// forward).
    pub align: usize,
}

/// The oldest waiting prompt is given at least `1 / OLDEST_SHARE` of the prompt rows.
const OLDEST_SHARE: usize = 4;

/// The step's rows (see the module doc), in admission order. A slot without KV room is
/// left out.
pub(super) fn plan(limits: &Limits, slots: &mut dyn Slots) -> Vec<Planned> {
    let mut order = slots.candidates();
    order.sort_unstable();
    for &(_, s) in &order {
        slots.prepare(s);
    }
    let (decoding, prompts): (Vec<_>, Vec<_>) =
        order.iter().copied().partition(|&(_, s)| slots.decoding(s));
    let mut shape = decoding
        .iter()
        .map(|&(_, s)| Shape::run(slots.computed(s), slots.pending(s), 1))
        .fold(Shape::default(), Shape::plus);
    let target = step_target(limits, &shape);
    let fits = |s: &Shape| target.is_none_or(|t| (limits.predict)(s) <= t);
    let pending: usize = decoding.iter().map(|&(_, s)| slots.pending(s)).sum();
    let mut rows_left = limits.n_batch.saturating_sub(pending);
    let (mut planned, mut orders): (Vec<Planned>, Vec<u64>) = (Vec::new(), Vec::new());
    let mut take = |slots: &mut dyn Slots, order: u64, p: Planned| {
        if slots.make_room(p.slot, p.from + p.n, &planned) {
            planned.push(p);
            orders.push(order);
        }
    };
    // A stream decoding alone, no prompt waiting, delays nobody with its draft: the
    // policy's choice of depth stands (rows permitting).
    let alone = decoding.len() == 1 && prompts.is_empty();
    for &(o, s) in &decoding {
        let (from, pending) = (slots.computed(s), slots.pending(s));
        let mut keep = slots.cut_draft(s, rows_left);
        while keep > 0 && !alone && !fits(&shape.plus(Shape::run(from + pending, keep, keep))) {
            keep -= 1;
        }
        let keep = slots.cut_draft(s, keep);
        rows_left -= keep;
        shape = shape.plus(Shape::run(from + pending, keep, keep));
        let p = Planned {
            slot: s,
            from,
            n: pending + keep,
        };
        take(slots, o, p);
    }
    let waiting: Vec<(usize, usize)> = prompts
        .iter()
        .map(|&(_, s)| (slots.computed(s), slots.pending(s)))
        .collect();
    let mut shares = prompt_shares(limits, target, shape, rows_left, &waiting);
    if decoding.is_empty() {
        shares = streams_starting(limits, rows_left, &waiting, shares);
    }
    let mut room = rows_left;
    for (&(o, s), (n, &(from, _))) in prompts.iter().zip(shares.into_iter().zip(&waiting)) {
        let aligned = (from + n) / limits.align * limits.align;
        let n = if aligned > from && aligned < from + n {
            aligned - from
        } else {
            n
        };
        let n = slots.fit_images(s, from, n, room);
        if n > 0 {
            room -= n;
            take(slots, o, Planned { slot: s, from, n });
        }
    }
    let mut by_order: Vec<(u64, Planned)> = orders.into_iter().zip(planned).collect();
    by_order.sort_unstable_by_key(|x| x.0);
    by_order.into_iter().map(|x| x.1).collect()
}

/// With nobody decoding, a prompt that ends in this step starts its stream in it, at its
/// last row: the rest of the step is then a gap in that stream. So the ending prompt with
/// the fewest rows here (the older on ties) keeps them, and every other prompt, ending or
/// not, is cut so that the step is predicted within those rows plus the budget's target
/// for its first decoding row. `shares` are the rows given to the `waiting` prompts
/// without a cap.
fn streams_starting(
    limits: &Limits,
    rows_left: usize,
    waiting: &[(usize, usize)],
    shares: Vec<usize>,
) -> Vec<usize> {
    let Some(first) = (0..waiting.len())
        .filter(|&i| shares[i] > 0 && shares[i] == waiting[i].1)
        .min_by_key(|&i| (shares[i], i))
    else {
        return shares;
    };
    let stream = Shape::run(waiting[first].0 + waiting[first].1, 1, 1);
    let Some(goal) = step_target(limits, &stream) else {
        return shares;
    };
    let others: Vec<usize> = (0..waiting.len()).filter(|&i| i != first).collect();
    if others.is_empty() {
        return shares;
    }
    let mut kept = vec![0; waiting.len()];
    kept[first] = shares[first];
    let base = with_prompts(Shape::default(), &kept, waiting);
    let rest: Vec<(usize, usize)> = others.iter().map(|&i| waiting[i]).collect();
    let target = Some((limits.predict)(&base) + goal);
    let more = prompt_shares(limits, target, base, rows_left - shares[first], &rest);
    for (&i, n) in others.iter().zip(more) {
        kept[i] = n;
    }
    kept
}

/// How long the step may take when `decoding` is the shape of its decoding rows alone;
/// `None`: no cap (nobody decodes, or the budget is off).
pub(super) fn step_target(limits: &Limits, decoding: &Shape) -> Option<f64> {
    match decoding.rows {
        0 => None,
        _ => limits.budget.target((limits.predict)(decoding)),
    }
}

/// The rows each of the `waiting` prompts (`(computed, pending)`, oldest first) is
/// given on top of a step of `shape`: the most, at most `rows_left`, whose step is
/// predicted within `target`, and at least one, shared by [`share`].
pub(super) fn prompt_shares(
    limits: &Limits,
    target: Option<f64>,
    shape: Shape,
    rows_left: usize,
    waiting: &[(usize, usize)],
) -> Vec<usize> {
    let most = rows_left.min(waiting.iter().map(|w| w.1).sum());
    if most == 0 {
        return vec![0; waiting.len()];
    }
    let fits = |p: usize| {
        let with = with_prompts(shape, &share(p, waiting), waiting);
        target.is_none_or(|t| (limits.predict)(&with) <= t)
    };
    let (mut lo, mut hi) = (1, most);
    while lo < hi {
        let mid = (lo + hi).div_ceil(2);
        if fits(mid) {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    share(lo, waiting)
}

/// `shape` with `shares[i]` rows of each of the `waiting` prompts (`(computed, pending)`);
/// a prompt's last row wants logits.
pub(super) fn with_prompts(shape: Shape, shares: &[usize], waiting: &[(usize, usize)]) -> Shape {
    shares
        .iter()
        .zip(waiting)
        .map(|(&n, &(from, pending))| Shape::run(from, n, usize::from(n == pending)))
        .fold(shape, Shape::plus)
}

/// `rows` prompt rows shared among `waiting` prompts (`(computed, pending)`, oldest
/// first): the oldest is given `⌈rows / OLDEST_SHARE⌉`, the rest go to the prompts with
/// the fewest tokens left first (the older on ties), none more than it has pending.
fn share(rows: usize, waiting: &[(usize, usize)]) -> Vec<usize> {
    let mut given = vec![0; waiting.len()];
    let Some(&(_, first)) = waiting.first() else {
        return given;
    };
    given[0] = first.min(rows.div_ceil(OLDEST_SHARE));
    let mut left = rows - given[0];
    let mut by_rest: Vec<usize> = (0..waiting.len()).collect();
    by_rest.sort_by_key(|&i| (waiting[i].1 - given[i], i));
    for i in by_rest {
        let n = (waiting[i].1 - given[i]).min(left);
        given[i] += n;
        left -= n;
    }
    given
}

/// A slot holding KV that could be given up, for [`victim`].
#[derive(Debug, Clone, Copy)]
pub(super) struct Holder {
    pub order: u64,
    pub slot: usize,
    /// Positions its KV blocks hold.
    pub capacity: usize,
    /// Whether it must keep its KV (in this step's plan, or computed ahead by a front).
    pub pinned: bool,
}

/// Whose KV to give up so that the request of admission order `order` can go on: the
/// youngest request younger than it that holds KV and is not pinned.
pub(super) fn victim(holders: &[Holder], order: u64) -> Option<usize> {
    holders
        .iter()
        .filter(|h| h.order > order && h.capacity > 0 && !h.pinned)
        .max_by_key(|h| (h.order, h.slot))
        .map(|h| h.slot)
}

/// Moves queued requests into free slots (`None`), in arrival order, each into the lowest
/// free slot, or the one it is `pinned` to when that is free (`enter` is told which); a
/// pinned request whose slot is busy waits without holding up those behind it. A request that `check` refuses is handed to `refuse`
/// with the reason and takes no slot. Returns the slots filled, in order.
pub(super) fn admit<T, Q>(
    slots: &mut [Option<T>],
    queue: &mut VecDeque<Q>,
    pinned: impl Fn(&Q) -> Option<usize>,
    check: impl Fn(&Q) -> Result<(), String>,
    mut refuse: impl FnMut(Q, String),
    mut enter: impl FnMut(Q, usize) -> T,
) -> Vec<usize> {
    let mut filled = Vec::new();
    let mut at = 0;
    while at < queue.len() && slots.iter().any(Option::is_none) {
        let free = match pinned(&queue[at]) {
            Some(s) => slots.get(s).and_then(|x| x.is_none().then_some(s)),
            None => slots.iter().position(Option::is_none),
        };
        let Some(free) = free else {
            at += 1;
            continue;
        };
        let q = queue.remove(at).expect("in the queue");
        match check(&q) {
            Err(why) => refuse(q, why),
            Ok(()) => {
                slots[free] = Some(enter(q, free));
                filled.push(free);
            }
        }
    }
    filled
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Slots as plain numbers: pending tokens, draft length, computed positions, and a KV
    /// pool of `free` positions (no preemption).
    #[derive(Default)]
    struct Fake {
        /// `(order, pending, draft, computed)` per slot.
        slots: Vec<(u64, usize, usize, usize)>,
        free: usize,
        prepared: Vec<usize>,
    }

    impl Slots for Fake {
        fn candidates(&self) -> Vec<(u64, usize)> {
            self.slots
                .iter()
                .enumerate()
                .map(|(i, s)| (s.0, i))
                .collect()
        }
        fn prepare(&mut self, slot: usize) {
            self.prepared.push(slot);
        }
        fn pending(&self, slot: usize) -> usize {
            self.slots[slot].1
        }
        fn decoding(&self, slot: usize) -> bool {
            self.slots[slot].1 == 1 || self.slots[slot].2 > 0
        }
        fn cut_draft(&mut self, slot: usize, keep: usize) -> usize {
            let d = &mut self.slots[slot].2;
            *d = (*d).min(keep);
            *d
        }
        fn computed(&self, slot: usize) -> usize {
            self.slots[slot].3
        }
        fn fit_images(&self, _: usize, _: usize, n: usize, _: usize) -> usize {
            n
        }

        fn make_room(&mut self, slot: usize, positions: usize, _: &[Planned]) -> bool {
            let needed = positions - self.slots[slot].3;
            if needed > self.free {
                return false;
            }
            self.free -= needed;
            true
        }
    }

    fn fake(slots: &[(u64, usize, usize, usize)], free: usize) -> Fake {
        Fake {
            slots: slots.to_vec(),
            free,
            prepared: Vec::new(),
        }
    }

    /// 10 ms a step plus 1 ms a row.
    fn linear(s: &Shape) -> f64 {
        0.010 + 0.001 * s.rows as f64
    }

    fn limits(n_batch: usize, budget: StepBudget) -> Limits<'static> {
        Limits {
            n_batch,
            budget,
            predict: &linear,
            align: 1,
        }
    }

    fn rows(p: &[Planned]) -> Vec<(usize, usize)> {
        p.iter().map(|p| (p.slot, p.n)).collect()
    }

    #[test]
    fn a_prompt_s_forwards_end_at_blocks_when_aligned() {
        let aligned = Limits {
            align: 16,
            ..limits(64, StepBudget::AUTO)
        };
        let p = plan(&aligned, &mut fake(&[(0, 2000, 0, 5)], 100_000));
        assert_eq!((p[0].from, p[0].n), (5, 59), "ends at 64");
        let p = plan(
            &limits(64, StepBudget::AUTO),
            &mut fake(&[(0, 2000, 0, 5)], 100_000),
        );
        assert_eq!(p[0].n, 64);
        let p = plan(&aligned, &mut fake(&[(0, 30, 0, 5)], 100_000));
        assert_eq!(p[0].n, 27, "a prompt's last full block ends a forward too");
        let p = plan(&aligned, &mut fake(&[(0, 3, 0, 32)], 100_000));
        assert_eq!(p[0].n, 3, "then its last rows");
        let p = plan(&aligned, &mut fake(&[(0, 2000, 0, 60)], 100_000));
        assert_eq!(p[0].n, 52, "60 + 64 cut back to 112");
    }

    #[test]
    fn the_module_docs_example() {
        // A prompt of 2,000, B decoding with a draft of 3, C a prompt of 6.
        let mut f = fake(&[(0, 2000, 0, 0), (1, 1, 3, 30), (2, 6, 0, 0)], 100_000);
        let p = plan(&limits(64, StepBudget::AUTO), &mut f);
        assert_eq!(rows(&p), [(0, 7), (1, 4), (2, 6)]);
        assert_eq!(p[1].from, 30);
        assert_eq!(f.slots[1].2, 3, "B keeps its draft");
        assert_eq!(
            f.prepared,
            [0, 1, 2],
            "each candidate prepared, oldest first"
        );
    }

    #[test]
    fn while_a_sequence_decodes_prompt_rows_are_capped_by_the_predicted_step() {
        for budget in [
            StepBudget::AUTO,
            StepBudget::Times(400),
            StepBudget::Millis(50),
        ] {
            let mut f = fake(&[(0, 1, 0, 500), (1, 1, 0, 20), (2, 3000, 0, 0)], 100_000);
            let p = plan(&limits(2048, budget), &mut f);
            let decoding = linear(&Shape::run(0, 2, 2));
            let target = budget.target(decoding).expect("a cap");
            let total: usize = p.iter().map(|p| p.n).sum();
            let step = linear(&Shape::run(0, total, 0));
            assert!(step <= target + 1e-12, "{budget}: {step} s over {target} s");
            let more = linear(&Shape::run(0, total + 1, 0));
            assert!(more > target, "{budget}: one more row would still fit");
            assert_eq!(rows(&p)[..2], [(0, 1), (1, 1)], "every decoder has its row");
        }
        // Nobody decoding: the prompt takes the whole batch; the budget off: likewise.
        let mut f = fake(&[(2, 3000, 0, 0)], 100_000);
        assert_eq!(
            rows(&plan(&limits(2048, StepBudget::AUTO), &mut f)),
            [(0, 2048)]
        );
        let mut f = fake(&[(0, 1, 0, 500), (2, 3000, 0, 0)], 100_000);
        let p = plan(&limits(2048, StepBudget::Off), &mut f);
        assert_eq!(rows(&p), [(0, 1), (1, 2047)]);
    }

    #[test]
    fn drafts_count_in_the_step_and_are_cut_to_the_target() {
        // Target 2.5 × 12 ms = 30 ms, 20 rows: the two decoders' own rows take 2, the
        // older one's draft of 24 is cut to 18, the younger one's to nothing, and the
        // prompt still gets its one row.
        let mut f = fake(&[(0, 1, 24, 100), (1, 1, 4, 50), (2, 500, 0, 0)], 100_000);
        let p = plan(&limits(2048, StepBudget::AUTO), &mut f);
        assert_eq!(rows(&p), [(0, 19), (1, 1), (2, 1)]);
        assert_eq!((f.slots[0].2, f.slots[1].2), (18, 0));
        // Alone, no prompt waiting, a decoder keeps the draft the target would cut.
        let mut f = fake(&[(0, 1, 24, 100)], 100_000);
        let p = plan(&limits(2048, StepBudget::AUTO), &mut f);
        assert_eq!((rows(&p), f.slots[0].2), (vec![(0, 25)], 24));
        // With the budget off, drafts are bounded by the rows alone.
        let mut f = fake(&[(0, 1, 16, 100), (1, 1, 4, 50)], 100_000);
        let p = plan(&limits(12, StepBudget::Off), &mut f);
        assert_eq!(rows(&p), [(0, 11), (1, 1)]);
    }

    #[test]
    fn a_short_prompt_behind_long_ones_gets_rows_in_its_first_step() {
        let long = (2000, 0, 0);
        let w = |o: u64, (p, d, c): (usize, usize, usize)| (o, p, d, c);
        let mut f = fake(
            &[
                w(0, long),
                w(1, long),
                w(2, long),
                (3, 1, 0, 40),
                w(4, (64, 0, 0)),
            ],
            100_000,
        );
        let p = plan(&limits(2048, StepBudget::AUTO), &mut f);
        let short = p
            .iter()
            .find(|p| p.slot == 4)
            .expect("the short prompt is planned");
        let oldest = p
            .iter()
            .find(|p| p.slot == 0)
            .expect("the oldest is planned");
        let prompt_rows: usize = p.iter().filter(|p| p.slot != 3).map(|p| p.n).sum();
        assert!(short.n >= prompt_rows * 3 / 4 - 1, "{p:?}");
        assert!(
            oldest.n >= prompt_rows.div_ceil(4),
            "the oldest is not starved: {p:?}"
        );
        // Nobody decoding: the short prompt is read whole in the first step; with the
        // budget off the oldest long one takes the rest of the batch, with it on only what
        // fits the target of the short one's first decoding row (27 rows, see the test
        // below).
        let mut f = fake(&[w(0, long), w(1, long), w(2, (64, 0, 0))], 100_000);
        let p = plan(&limits(512, StepBudget::Off), &mut f);
        assert_eq!(rows(&p), [(0, 448), (2, 64)]);
        let mut f = fake(&[w(0, long), w(1, long), w(2, (64, 0, 0))], 100_000);
        let p = plan(&limits(512, StepBudget::AUTO), &mut f);
        assert_eq!(rows(&p), [(0, 27), (2, 64)]);
    }

    #[test]
    fn a_prompt_ending_in_a_step_with_nobody_decoding_caps_the_prompts_after_it() {
        // A has 34 tokens left and ends; its first decoding row alone is 11 ms, a target
        // of 27.5 ms on top of its own 44 ms: B may add 27 rows (10 + 34 + 27 ms).
        let mut f = fake(&[(0, 34, 0, 2048), (1, 2082, 0, 0)], 100_000);
        let p = plan(&limits(2048, StepBudget::AUTO), &mut f);
        assert_eq!(rows(&p), [(0, 34), (1, 27)]);
        let mut f = fake(&[(0, 34, 0, 2048), (1, 2082, 0, 0)], 100_000);
        let p = plan(&limits(2048, StepBudget::Off), &mut f);
        assert_eq!(rows(&p), [(0, 34), (1, 2014)]);
    }

    /// Two prompts that would both end in the step: the one with fewer rows starts its
    /// stream, the other's rows are cut as any other prompt's, whichever of them is older
    /// (a race found a 12 s first gap where both were read whole in one step).
    #[test]
    fn of_two_prompts_ending_together_the_longer_one_is_cut() {
        for (short, long) in [(0, 1), (1, 0)] {
            let mut s = [(0, 0, 0, 0); 2];
            s[short] = (short as u64, 34, 0, 2048);
            s[long] = (long as u64, 1300, 0, 700);
            let mut f = fake(&s, 100_000);
            let p = plan(&limits(2048, StepBudget::AUTO), &mut f);
            let n = |slot| p.iter().find(|p| p.slot == slot).map_or(0, |p| p.n);
            assert_eq!((n(short), n(long)), (34, 27), "{p:?}");
        }
    }

    #[test]
    fn a_slot_without_kv_room_is_left_out_and_costs_no_budget() {
        let mut f = fake(&[(0, 30, 0, 0), (1, 1, 0, 7)], 20);
        let p = plan(&limits(32, StepBudget::Off), &mut f);
        assert_eq!(
            p,
            [Planned {
                slot: 1,
                from: 7,
                n: 1
            }]
        );
    }

    #[test]
    fn the_victim_is_the_youngest_unpinned_holder_younger_than_the_requester() {
        let h = |order, slot, capacity, pinned| Holder {
            order,
            slot,
            capacity,
            pinned,
        };
        let holders = [
            h(4, 0, 32, false),
            h(9, 1, 16, true),
            h(7, 2, 48, false),
            h(8, 3, 0, false),
            h(2, 4, 64, false),
        ];
        assert_eq!(victim(&holders, 3), Some(2), "9 is pinned, 8 holds nothing");
        assert_eq!(victim(&holders, 7), None, "nobody younger can give");
        assert_eq!(victim(&holders, 1), Some(2));
    }

    #[test]
    fn admission_is_in_arrival_order_into_the_lowest_free_slots() {
        let mut slots: Vec<Option<u32>> = vec![Some(100), None, None, Some(101), None];
        let mut queue: VecDeque<u32> = [7, 1000, 8, 9, 10].into();
        let mut refused = Vec::new();
        let filled = admit(
            &mut slots,
            &mut queue,
            |_| None,
            |&q| (q < 1000).then_some(()).ok_or(format!("{q} is too long")),
            |q, why| refused.push((q, why)),
            |q, _| q,
        );
        assert_eq!(filled, [1, 2, 4]);
        assert_eq!(slots, [Some(100), Some(7), Some(8), Some(101), Some(9)]);
        assert_eq!(refused, [(1000, "1000 is too long".to_string())]);
        assert_eq!(queue, [10], "the rest waits for a slot");
    }

    #[test]
    fn a_request_pinned_to_a_busy_slot_waits_and_lets_others_by() {
        // Requests 10 and 11 want slot 0 (busy), 12 slot 2, 13 any slot.
        let mut slots: Vec<Option<u32>> = vec![Some(100), None, None];
        let mut queue: VecDeque<u32> = [10, 11, 12, 13].into();
        let pinned = |&q: &u32| match q {
            10 | 11 => Some(0),
            12 => Some(2),
            _ => None,
        };
        let admit_all = |slots: &mut [Option<u32>], queue: &mut VecDeque<u32>| {
            admit(slots, queue, pinned, |_| Ok(()), |_, _| {}, |q, _| q)
        };
        let filled = admit_all(&mut slots, &mut queue);
        assert_eq!(filled, [2, 1]);
        assert_eq!(slots, [Some(100), Some(13), Some(12)]);
        assert_eq!(queue, [10, 11], "in their order, for slot 0");
        slots[0] = None;
        let filled = admit_all(&mut slots, &mut queue);
        assert_eq!((filled, slots[0], queue.len()), (vec![0], Some(10), 1));
    }
}
