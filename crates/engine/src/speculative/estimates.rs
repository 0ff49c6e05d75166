//! What the speculation policy learns from verified drafts and drafting spells: acceptance
//! by draft position, and how long a slot that starts drafting keeps drafting.

use crate::cost::ALPHA;

/// Acceptance assumed before anything is observed.
pub(super) const PRIOR: f64 = 0.7;
/// Observations a prior counts as: a position's first observations move its average by
/// `1 / (n + PRIOR_WEIGHT)` (then by [`ALPHA`]), so that a request whose text drafts unlike
/// the last ones' learns it in a step or two.
const PRIOR_WEIGHT: f64 = 2.0;
/// Steps drafted per pause that the spell estimates start from: a request's first spell
/// (it starts from the prompt, taken to draft to its end unless measured otherwise) and a
/// spell after a pause (it resumed on recovered estimates, which are less sure).
pub(super) const SPELL_PRIOR: [f64; 2] = [64.0, 8.0];
const SPELL_BOUNDS: (f64, f64) = (1.0, 64.0);

/// Moving averages of conditional acceptance per draft position. A position never
/// observed is taken to accept as the deepest one observed: a slot drafting shallow
/// never learns the deeper positions otherwise, and code accepted at the first position
/// is accepted at the next ones too.
#[derive(Debug, Clone)]
pub(super) struct Acceptance {
    a: Vec<f64>,
    /// Leading positions observed at least once.
    seen: usize,
    /// Observations at each position.
    n: Vec<f64>,
}

impl Acceptance {
    pub(super) fn new(n: usize, prior: f64) -> Self {
        Acceptance {
            a: vec![prior; n],
            seen: 0,
            n: vec![0.0; n],
        }
    }

    /// The acceptance at each position, unobserved ones taken as the deepest observed.
    pub(super) fn extrapolated(&self) -> Vec<f64> {
        (0..self.a.len()).map(|i| self.at(i)).collect()
    }

    /// `self`'s averages as the prior of a new estimate, which takes the positions it has
    /// not observed itself as its deepest observed one.
    pub(super) fn as_prior(&self) -> Self {
        Acceptance {
            a: self.extrapolated(),
            seen: 0,
            n: vec![0.0; self.n.len()],
        }
    }

    pub(super) fn at(&self, i: usize) -> f64 {
        match self.seen {
            0 => self.a[i],
            n => self.a[i.min(n - 1)],
        }
    }

    /// Expected tokens a step yields with `d` drafts: the target's own token plus each
    /// draft accepted together with all before it.
    pub(super) fn expected(&self, d: usize) -> f64 {
        let mut run = 1.0;
        let mut e = 1.0;
        for i in 0..d.min(self.a.len()) {
            run *= self.at(i);
            e += run;
        }
        e
    }

    pub(super) fn observe(&mut self, drafted: usize, accepted: usize) {
        let reached = drafted.min(accepted + 1).min(self.a.len());
        for i in self.seen..reached {
            self.a[i] = self.at(i);
        }
        self.seen = self.seen.max(reached);
        for i in 0..reached {
            let hit = if i < accepted { 1.0 } else { 0.0 };
            self.n[i] += 1.0;
            let rate = ALPHA.max(1.0 / (self.n[i] + PRIOR_WEIGHT));
            self.a[i] += rate * (hit - self.a[i]);
        }
    }
}

/// How many steps a slot that starts drafting keeps drafting before it pauses: steps
/// drafted over the pauses that ended them, both decaying by [`ALPHA`] at each spell's end.
/// A spell cut short by its request's end counts its steps but no pause (the request's
/// end is weighed by `remaining`); counting it as a pause let one short warm-up request
/// keep later requests from ever starting, their prompts' catching up spread over a
/// spell of a few steps.
#[derive(Debug, Clone, Copy)]
pub(super) struct Spells {
    steps: f64,
    pauses: f64,
}

impl Spells {
    pub(super) fn new(prior: f64) -> Self {
        Spells {
            steps: prior,
            pauses: 1.0,
        }
    }

    pub(super) fn end(&mut self, steps: usize, paused: bool) {
        let keep = 1.0 - ALPHA;
        self.steps = self.steps * keep + steps as f64;
        self.pauses = self.pauses * keep + paused as u8 as f64;
    }

    pub(super) fn mean(&self) -> f64 {
        (self.steps / self.pauses.max(1e-9)).clamp(SPELL_BOUNDS.0, SPELL_BOUNDS.1)
    }
}
