//! The target's states a drafter reads ([`super::Proposer::observe_state`]), kept per
//! slot from the first position it may still need; which of its blocks a drafter of its
//! features taps.

use model::TargetFeatures;

/// The target blocks whose outputs are the inputs `target` reads (the input of block `l`
/// is the state after block `l - 1`); an error for the input of block 0 (the embeddings),
/// which no block gives.
pub(super) fn feature_taps(target: &TargetFeatures) -> crate::Result<Vec<usize>> {
    target
        .layers
        .iter()
        .map(|&l| l.checked_sub(1))
        .collect::<Option<Vec<_>>>()
        .ok_or_else(|| {
            crate::Error::Config(format!(
                "the drafter reads the input of the target's block 0 (its embeddings; \
                 target_layers {:?}), which tandem does not tap",
                target.layers
            ))
        })
}

/// Per slot, the target's states of positions `from..` (`[n, width]` each slot's own).
pub(super) struct TargetStates(Vec<States>);

#[derive(Default)]
struct States {
    from: usize,
    rows: Vec<f32>,
}

impl TargetStates {
    pub fn new(n_slots: usize) -> TargetStates {
        TargetStates((0..n_slots).map(|_| States::default()).collect())
    }

    /// The target computed position `pos` of `slot` (its rows come in order; a position
    /// seen again replaces what followed it).
    pub fn observe(&mut self, slot: usize, pos: usize, state: &[f32]) {
        let s = &mut self.0[slot];
        let w = state.len();
        let held = s.rows.len() / w;
        if pos < s.from || pos > s.from + held {
            s.from = pos;
            s.rows.clear();
        } else {
            s.rows.truncate((pos - s.from) * w);
        }
        s.rows.extend_from_slice(state);
    }

    /// Appends to `out` the state (`width` floats) of position `pos` of `slot`, zeros where
    /// there is none (no position, or one the target took from its prefix cache).
    pub fn row_into(&self, slot: usize, pos: Option<usize>, width: usize, out: &mut Vec<f32>) {
        let s = &self.0[slot];
        match pos.filter(|&p| p >= s.from && (p - s.from + 1) * width <= s.rows.len()) {
            Some(p) => out.extend_from_slice(&s.rows[(p - s.from) * width..][..width]),
            None => out.resize(out.len() + width, 0.0),
        }
    }

    /// Forgets the states of `slot` before position `pos`.
    pub fn forget_before(&mut self, slot: usize, pos: usize, width: usize) {
        let s = &mut self.0[slot];
        let from = pos.max(s.from);
        let drop = ((from - s.from) * width).min(s.rows.len());
        s.rows.drain(..drop);
        s.from = from;
    }
}
