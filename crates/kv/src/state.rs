//! Recurrent state: layers that keep, per sequence, a state of fixed size instead of a
//! position's keys and values (a convolution's last inputs, a linear attention's matrix).
//!
//! A sequence holding positions `0..len` holds one *slot* of state, which its device keeps
//! as it is after position `len - 1`, and, where the last forward that computed any of its
//! positions had drafts, *checkpoints*: the state before its first draft row
//! ([`crate::SeqKv::uncertain_from`]; position `checkpoint`) and before each of the
//! [`StateKv::rows`]` - 1` rows after it (vLLM keeps a state per speculative token the same
//! way). A state cannot be cut back to any position the way paged KV is; it can go back to
//! the kept state at or before the cut, and the engine computes again what lies between
//! (positions a truncation did not keep):
//!
//! ```text
//! forward   rows 40..45 (a token and four drafts): checkpoint = 41, len = 45
//! rows = 4:
//! truncate  to 41 (no draft accepted)    → kept 41: the device restores checkpoint row 0
//! truncate  to 43 (two drafts accepted)  → kept 43: the device restores checkpoint row 2
//! rows = 1 (the checkpoint alone):
//! truncate  to 43 (two drafts accepted)  → kept 41: the device restores checkpoint row 0,
//!           the engine computes 41..43 again with its next rows
//! either:
//! truncate  to 38 (before the checkpoint) → kept 0: the slot goes back to the pool
//! ```
//!
//! A forward whose rows of a sequence start at position 0 starts from the zero state.
//!
//! *Snapshots* let a prefix be shared anyway ([`crate::snapshot`]): a full block of the
//! pool may carry a copy of the state after its last position, which a sequence starting
//! with that block's prefix loads into its slot.

/// The state layers of a pool: which KV layers they are, their state's size, and how many
/// sequences hold one at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StateKv {
    /// Bit `l` set: KV layer `l` keeps a state (at most 128 KV layers).
    pub layers: u128,
    /// Floats of one layer's state of one sequence (the largest of the state layers').
    pub floats: usize,
    /// Slots: sequences that can hold a state at once.
    pub n_slots: usize,
    /// Snapshots of states after a block's last position (llama.cpp's context checkpoints).
    pub n_snaps: usize,
    /// Checkpoints per slot (at least 1): the state before a forward's first draft row and
    /// before each of the next `rows - 1` rows, so that a cut within them keeps what was
    /// accepted.
    pub rows: usize,
}

impl StateKv {
    /// Whether KV layer `layer` keeps a state.
    pub fn has(&self, layer: usize) -> bool {
        layer < 128 && self.layers >> layer & 1 == 1
    }

    /// State layers.
    pub fn n_layers(&self) -> usize {
        self.layers.count_ones() as usize
    }

    /// Bytes of one snapshot: every state layer's floats (f32).
    pub fn snapshot_bytes(&self) -> usize {
        4 * self.n_layers() * self.floats
    }

    /// Checkpoint rows per slot: [`StateKv::rows`], at least 1.
    pub fn kept_rows(&self) -> usize {
        self.rows.max(1)
    }

    /// Bytes of the states, their checkpoints and the snapshots (f32).
    pub fn total_bytes(&self) -> u64 {
        let states = self.n_slots * (1 + self.kept_rows()) + self.n_snaps;
        4 * (self.n_layers() * self.floats * states) as u64
    }
}

/// No slot.
pub const NO_SLOT: u32 = u32::MAX;

#[cfg(test)]
pub(crate) mod tests {
    use gguf::GgmlType;

    use super::*;
    use crate::{Error, KvConfig, KvPool, SeqKv};

    /// Layer 1 of 2 keeps a state of 24 floats; 16 blocks.
    pub(crate) fn pool(n_slots: usize, n_snaps: usize) -> KvPool {
        pool_with_rows(n_slots, n_snaps, 1)
    }

    /// [`pool`] with `rows` checkpoints per slot.
    fn pool_with_rows(n_slots: usize, n_snaps: usize, rows: usize) -> KvPool {
        KvPool::new(KvConfig {
            n_layer: 2,
            n_head_kv: 1,
            head_dim: 32,
            ty: GgmlType::F16,
            n_positions: 256,
            window: None,
            state: Some(StateKv {
                layers: 0b10,
                floats: 24,
                n_slots,
                n_snaps,
                rows,
            }),
            records: None,
            empty: 0,
        })
        .unwrap()
    }

    /// A forward of rows `first..len` of `seq`, all of them drafts.
    pub(crate) fn forward(pool: &mut KvPool, seq: &mut SeqKv, first: usize, len: usize) {
        seq.uncertain_from(first);
        pool.reserve(seq, len).unwrap();
        pool.prepare(seq, first, len).unwrap();
        pool.commit(seq, len);
    }

    #[test]
    fn a_truncation_keeps_the_checkpoint_or_nothing() {
        let mut p = pool(2, 0);
        let mut a = SeqKv::default();
        forward(&mut p, &mut a, 0, 40);
        forward(&mut p, &mut a, 40, 45);
        assert_eq!(p.truncate(&mut a, 45), 45, "nothing to cut");
        assert_eq!(p.truncate(&mut a, 42), 40, "back to the checkpoint");
        assert_eq!(a.len(), 40);
        assert!(a.state_slot().is_some());
        forward(&mut p, &mut a, 40, 42);
        assert_eq!(p.truncate(&mut a, 39), 0, "short of the checkpoint");
        assert_eq!((a.len(), a.state_slot(), p.free_blocks()), (0, None, 16));
    }

    #[test]
    fn a_cut_within_the_kept_rows_keeps_what_was_accepted() {
        let mut p = pool_with_rows(2, 0, 4);
        let mut a = SeqKv::default();
        forward(&mut p, &mut a, 0, 40);
        forward(&mut p, &mut a, 40, 46);
        assert_eq!(p.truncate(&mut a, 43), 43, "checkpoint row 3");
        assert_eq!(p.truncate(&mut a, 41), 41, "checkpoint row 1");
        forward(&mut p, &mut a, 41, 47);
        assert_eq!(
            p.truncate(&mut a, 46),
            44,
            "past the rows: the last of them"
        );
        assert_eq!(a.len(), 44);
        assert_eq!(p.truncate(&mut a, 40), 0, "short of the checkpoint");
        let bytes = |rows| {
            let s = pool_with_rows(2, 3, rows).config().state.unwrap();
            s.total_bytes()
        };
        assert_eq!(
            (bytes(1), bytes(4)),
            (4 * 24 * (2 * 2 + 3), 4 * 24 * (2 * 5 + 3))
        );
    }

    #[test]
    fn drafts_take_the_checkpoint_at_the_first_of_them() {
        let mut p = pool(2, 0);
        let step = |p: &mut KvPool, seq: &mut SeqKv, first, len, drafts: Option<usize>| {
            if let Some(d) = drafts {
                seq.uncertain_from(d);
            }
            p.reserve(seq, len).unwrap();
            p.prepare(seq, first, len).unwrap();
            p.commit(seq, len);
        };
        let mut a = SeqKv::default();
        forward(&mut p, &mut a, 0, 40);
        step(&mut p, &mut a, 40, 45, Some(42));
        assert_eq!(a.checkpoint(), 42);
        assert_eq!(
            p.truncate(&mut a, 42),
            42,
            "no draft accepted: nothing to compute again"
        );
        assert_eq!(p.truncate(&mut a, 41), 0, "short of the checkpoint");
        let mut b = SeqKv::default();
        forward(&mut p, &mut b, 0, 40);
        step(&mut p, &mut b, 40, 45, Some(45));
        assert_eq!(b.checkpoint(), 0, "drafts past the rows: none kept");
        step(&mut p, &mut b, 45, 46, None);
        assert_eq!(b.checkpoint(), 0, "no drafts: none kept");
        assert_eq!(p.truncate(&mut b, 45), 0, "nothing to go back to");
    }

    #[test]
    fn a_first_forward_cut_back_keeps_nothing() {
        let mut p = pool(1, 0);
        let mut a = SeqKv::default();
        forward(&mut p, &mut a, 0, 5);
        assert_eq!(p.truncate(&mut a, 3), 0);
        assert_eq!(a.state_slot(), None);
    }

    #[test]
    fn slots_are_held_until_release_and_no_prefix_is_usable() {
        let mut p = pool(1, 0);
        let (mut a, mut b) = (SeqKv::default(), SeqKv::default());
        forward(&mut p, &mut a, 0, 32);
        let free = p.free_blocks();
        let e = p.reserve(&mut b, 16).unwrap_err();
        assert!(matches!(e, Error::OutOfStates { n_slots: 1 }), "{e}");
        assert_eq!(
            p.free_blocks(),
            free,
            "a refused reservation takes no block"
        );
        assert_eq!(p.usable(a.blocks()), 0);
        p.release(&mut a);
        p.reserve(&mut b, 16).unwrap();
        assert_eq!(b.state_slot(), Some(0));
        assert_eq!(p.state_slots(&[&mut a, &mut b]), vec![NO_SLOT, 0]);
    }

    #[test]
    fn state_layers_hold_no_blocks_and_count_their_bytes() {
        let cfg = pool(3, 0).config().clone();
        assert!(cfg.store_is_full(0, false) && cfg.is_state(1) && !cfg.store_is_full(1, true));
        assert_eq!(cfg.store_blocks(1, false), 0);
        let paged = 2 * cfg.n_blocks() as u64 * cfg.block_bytes() as u64;
        assert_eq!(cfg.total_bytes(), paged + 2 * 4 * 24 * 3);
    }
}
