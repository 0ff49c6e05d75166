//! Pipelining through a split model's box: the slots take turns in two cohorts by the
//! parity of their index, and each turn's step goes to the box before the engine finishes
//! the other cohort's step, so that the box computes one while this stage computes the
//! other. Without pipelining there is one cohort: every slot steps in every step.

use std::time::Duration;

use super::planner::Planned;

/// A step whose rows the front computes while the engine finishes the other cohort's.
pub(super) struct InFlight {
    pub plan: Vec<Planned>,
    /// What choosing its drafts took.
    pub drafting: Duration,
}

/// See the module doc.
#[derive(Default)]
pub(super) struct Cohorts {
    /// This turn's cohort (`None`: every slot steps together).
    turn: Option<usize>,
    /// The step submitted to the front and not yet finished (the other cohort's).
    inflight: Option<InFlight>,
}

impl Cohorts {
    pub fn new(pipelined: bool) -> Cohorts {
        Cohorts {
            turn: pipelined.then_some(0),
            inflight: None,
        }
    }

    /// How many turns a step may look through for a cohort with work.
    pub fn turns(&self) -> usize {
        if self.turn.is_some() {
            2
        } else {
            1
        }
    }

    pub fn pipelined(&self) -> bool {
        self.turn.is_some()
    }

    /// The other cohort's turn.
    pub fn next_turn(&mut self) {
        if let Some(t) = &mut self.turn {
            *t ^= 1;
        }
    }

    /// Whether `slot` drafts and plans this turn.
    pub fn in_turn(&self, slot: usize) -> bool {
        self.turn.is_none_or(|t| slot % 2 == t)
    }

    /// Whether a step is being computed ahead.
    pub fn busy(&self) -> bool {
        self.inflight.is_some()
    }

    /// Whether `slot` has rows in the step being computed ahead.
    pub fn in_flight(&self, slot: usize) -> bool {
        self.inflight
            .as_ref()
            .is_some_and(|f| f.plan.iter().any(|p| p.slot == slot))
    }

    /// Puts this turn's step (submitted to the front; `None` when it had no rows) in
    /// flight, passes the turn to the other cohort, and returns the other cohort's step,
    /// now to be finished.
    pub fn pass(&mut self, this: Option<InFlight>) -> Option<InFlight> {
        self.next_turn();
        std::mem::replace(&mut self.inflight, this)
    }

    /// Forgets the step in flight (its requests were ended).
    pub fn drop_inflight(&mut self) {
        self.inflight = None;
    }
}
