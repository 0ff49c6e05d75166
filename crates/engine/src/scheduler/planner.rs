//! The planner: which requests enter which slots, which positions of which slots a step
//! computes under its token budget, and whose KV is given up when the pool runs short.
//! It knows token counts and admission orders, not models: the engine answers its
//! questions through [`Slots`], and the tests below drive it with plain numbers.
//!
//! Budget, worked through (`n_batch = 8`): slots in admission order A (a prompt of 20
//! tokens not yet computed), B (decoding: 1 pending token and a draft of 3), C (decoding,
//! 1 pending). A may take `8 - 2 = 6` rows, leaving one row for each decoder after it;
//! B then has `8 - 6 - 1 = 1` row, so its draft is cut to nothing; C gets the last row.
//! The step is `A 0..6, B 1 row, C 1 row`; A's prompt goes on in the next steps.

use std::collections::VecDeque;

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
    /// Called once per candidate, in admission order, before it is planned: a slot with no
    /// KV takes its cached prefix.
    fn prepare(&mut self, slot: usize);
    /// Tokens of `slot` not yet computed (the prompt's rest, or the last sampled token).
    fn pending(&self, slot: usize) -> usize;
    /// Its draft tokens, cut to at most `keep`; returns how many it keeps.
    fn cut_draft(&mut self, slot: usize, keep: usize) -> usize;
    /// Positions it has computed.
    fn computed(&self, slot: usize) -> usize;
    /// Reserves KV for `positions` positions of `slot`, giving up younger slots' KV that
    /// is not in `plan` if it must (see [`victim`]). False when there is no room.
    fn make_room(&mut self, slot: usize, positions: usize, plan: &[Planned]) -> bool;
}

/// The step's rows: every candidate, oldest first, computes what it has not computed
/// yet (its pending tokens, then its draft), within `n_batch` rows over all; a slot's
/// share is cut so that every decoding slot after it still gets its row (see the module
/// doc). A slot without KV room is left out.
pub(super) fn plan(n_batch: usize, slots: &mut dyn Slots) -> Vec<Planned> {
    let mut order = slots.candidates();
    order.sort_unstable();
    let mut plan: Vec<Planned> = Vec::new();
    let mut budget = n_batch;
    for (k, &(_, slot)) in order.iter().enumerate() {
        let decoders_after = order[k + 1..]
            .iter()
            .filter(|&&(_, s)| slots.pending(s) == 1)
            .count();
        slots.prepare(slot);
        let room = budget.saturating_sub(decoders_after);
        let pending = slots.pending(slot);
        let draft = slots.cut_draft(slot, room.saturating_sub(pending));
        let n = (pending + draft).min(room);
        if n == 0 {
            continue;
        }
        let from = slots.computed(slot);
        if slots.make_room(slot, from + n, &plan) {
            budget -= n;
            plan.push(Planned { slot, from, n });
        }
    }
    plan
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
/// free slot. A request that `check` refuses is handed to `refuse` with the reason and
/// takes no slot. Returns the slots filled, in order.
pub(super) fn admit<T, Q>(
    slots: &mut [Option<T>],
    queue: &mut VecDeque<Q>,
    check: impl Fn(&Q) -> Result<(), String>,
    mut refuse: impl FnMut(Q, String),
    mut enter: impl FnMut(Q) -> T,
) -> Vec<usize> {
    let mut filled = Vec::new();
    while let Some(free) = slots.iter().position(Option::is_none) {
        let Some(q) = queue.pop_front() else {
            break;
        };
        match check(&q) {
            Err(why) => refuse(q, why),
            Ok(()) => {
                slots[free] = Some(enter(q));
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
        fn cut_draft(&mut self, slot: usize, keep: usize) -> usize {
            let d = &mut self.slots[slot].2;
            *d = (*d).min(keep);
            *d
        }
        fn computed(&self, slot: usize) -> usize {
            self.slots[slot].3
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

    #[test]
    fn the_budget_leaves_a_row_for_every_decoder_after_a_prompt() {
        // The module doc's example: A prompt, B decoding with a draft of 3, C decoding.
        let mut f = fake(&[(0, 20, 0, 0), (1, 1, 3, 30), (2, 1, 0, 12)], 1000);
        let p = plan(8, &mut f);
        let want = [
            Planned {
                slot: 0,
                from: 0,
                n: 6,
            },
            Planned {
                slot: 1,
                from: 30,
                n: 1,
            },
            Planned {
                slot: 2,
                from: 12,
                n: 1,
            },
        ];
        assert_eq!(p, want);
        assert_eq!(f.slots[1].2, 0, "B's draft was cut to its room");
        assert_eq!(
            f.prepared,
            [0, 1, 2],
            "each candidate prepared, oldest first"
        );
    }

    #[test]
    fn decoders_keep_their_drafts_when_the_budget_allows_and_prompts_take_the_rest() {
        // Decoders first in admission order: each takes its token and draft; the younger
        // prompt gets what is left of 16.
        let mut f = fake(&[(0, 1, 4, 10), (1, 1, 2, 10), (2, 50, 0, 0)], 1000);
        let p = plan(16, &mut f);
        assert_eq!(p.iter().map(|p| p.n).collect::<Vec<_>>(), [5, 3, 8]);
        // Two prompts: the older fills the budget; the younger waits.
        let mut f = fake(&[(3, 40, 0, 0), (5, 40, 0, 0)], 1000);
        let p = plan(16, &mut f);
        assert_eq!(
            p,
            [Planned {
                slot: 0,
                from: 0,
                n: 16
            }]
        );
    }

    #[test]
    fn a_slot_without_kv_room_is_left_out_and_costs_no_budget() {
        let mut f = fake(&[(0, 30, 0, 0), (1, 1, 0, 7)], 20);
        let p = plan(32, &mut f);
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
            |&q| (q < 1000).then_some(()).ok_or(format!("{q} is too long")),
            |q, why| refused.push((q, why)),
            |q| q,
        );
        assert_eq!(filled, [1, 2, 4]);
        assert_eq!(slots, [Some(100), Some(7), Some(8), Some(101), Some(9)]);
        assert_eq!(refused, [(1000, "1000 is too long".to_string())]);
        assert_eq!(queue, [10], "the rest waits for a slot");
    }
}
