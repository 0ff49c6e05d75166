//! Snapshots of recurrent states, so that a state model shares prefixes too.
//!
//! A state cannot be cut back to a position, so a prefix's blocks alone do not let a
//! sequence skip computing it. A *snapshot* is a copy of a sequence's state right after the
//! last position of one of its full blocks, attached to that block of the pool: since the
//! forward is batch-invariant, the state after a prefix is a function of the prefix, so
//! whoever holds the block (sequences sharing the prefix, the prefix cache) may load it.
//!
//! A forward whose rows of a sequence end at a block's end snapshots the state there (the
//! device copies it after the forward, [`Snapshots::saves`]). A sequence that comes to
//! hold a prefix whose last block has a snapshot loads it into its slot before its next
//! forward ([`Snapshots::loads`]). A snapshot goes with its block (freed, or cut back into
//! by a sequence that holds it alone), or, when the room is wanted, the least recently
//! used goes first.
//!
//! ```text
//! seq blocks  [b0] [b1] [b2] [b3~]       len 60: rows 48..60 computed after 32..48
//! snapshots         s4   s1               (states after 32 and 48)
//! a new sequence with the same first 48 tokens: holds b0 b1 b2, loads s1, computes 48..
//! ```

use std::collections::BTreeMap;

use crate::window::NONE;

/// The snapshots' accounting.
pub(crate) struct Snapshots {
    free: Vec<u32>,
    /// Per global block: its snapshot, or [`NONE`].
    of: Vec<u32>,
    /// Per snapshot: its block, and its key in `lru`.
    owner: Vec<(u32, u64)>,
    lru: BTreeMap<u64, u32>,
    tick: u64,
    /// Copies the device owes: `(slot, snapshot)` after the forward just computed,
    /// `(snapshot, slot)` before the next one.
    pub(crate) saves: Vec<(u32, u32)>,
    pub(crate) loads: Vec<(u32, u32)>,
}

impl Snapshots {
    pub(crate) fn new(n_snaps: usize, n_global: usize) -> Self {
        Snapshots {
            free: (0..n_snaps as u32).rev().collect(),
            of: vec![NONE; n_global],
            owner: vec![(NONE, 0); n_snaps],
            lru: BTreeMap::new(),
            tick: 0,
            saves: Vec::new(),
            loads: Vec::new(),
        }
    }

    /// Whether block `block` has a snapshot.
    pub(crate) fn has(&self, block: u32) -> bool {
        self.of[block as usize] != NONE
    }

    fn touch(&mut self, snap: u32) {
        let (block, at) = self.owner[snap as usize];
        self.lru.remove(&at);
        self.tick += 1;
        self.lru.insert(self.tick, snap);
        self.owner[snap as usize] = (block, self.tick);
    }

    /// Block `block` loses its snapshot, if it has one.
    pub(crate) fn drop_of(&mut self, block: u32) {
        let snap = std::mem::replace(&mut self.of[block as usize], NONE);
        if snap != NONE {
            let (_, at) = self.owner[snap as usize];
            self.lru.remove(&at);
            self.owner[snap as usize] = (NONE, 0);
            self.free.push(snap);
        }
    }

    /// Block `block`'s snapshot, if it has one.
    pub(crate) fn of_block(&self, block: u32) -> Option<u32> {
        Some(self.of[block as usize]).filter(|&s| s != NONE)
    }

    /// Block `block` gets a snapshot whose bytes its caller writes (its own when it has one,
    /// else a free one, else the least recently used that no slot is still to load);
    /// `None` when there is none.
    pub(crate) fn place(&mut self, block: u32) -> Option<u32> {
        if let Some(snap) = self.of_block(block) {
            self.touch(snap);
            return Some(snap);
        }
        let snap = match self.free.pop() {
            Some(s) => s,
            None => {
                let loading = |s: &u32| self.loads.iter().any(|l| l.0 == *s);
                let &s = self.lru.values().find(|s| !loading(s))?;
                self.drop_of(self.owner[s as usize].0);
                self.free.pop().expect("just freed")
            }
        };
        self.of[block as usize] = snap;
        self.owner[snap as usize].0 = block;
        self.touch(snap);
        Some(snap)
    }

    /// Block `block`, just completed in `slot`'s state, gets a snapshot of it (taking the
    /// least recently used one when none is free); nothing without any.
    pub(crate) fn save(&mut self, block: u32, slot: u32) {
        let had = self.of_block(block).is_some();
        if let Some(snap) = self.place(block).filter(|_| !had) {
            self.saves.push((slot, snap));
        }
    }

    /// A freed slot owes nothing: its loads are dropped.
    pub(crate) fn slot_freed(&mut self, slot: u32) {
        self.loads.retain(|&(_, s)| s != slot);
    }

    /// `slot` starts from block `block`'s snapshot.
    pub(crate) fn load(&mut self, block: u32, slot: u32) {
        let snap = self.of[block as usize];
        assert_ne!(snap, NONE, "a usable prefix ends at a snapshot");
        self.touch(snap);
        self.loads.push((snap, slot));
    }
}

#[cfg(test)]
mod tests {
    use crate::state::tests::{forward, pool};
    use crate::SeqKv;

    #[test]
    fn a_prefix_is_usable_up_to_its_last_snapshot_which_a_new_sequence_loads() {
        let mut p = pool(2, 2);
        let mut a = SeqKv::default();
        forward(&mut p, &mut a, 0, 20);
        assert_eq!(p.usable(a.blocks()), 0, "no forward ended at a block's end");
        forward(&mut p, &mut a, 20, 32);
        assert_eq!(p.snapshot_saves(), vec![(0, 0)], "slot 0 into snapshot 0");
        forward(&mut p, &mut a, 32, 40);
        assert_eq!(p.usable(&a.blocks()[..2]), 2);
        assert_eq!(p.usable(&a.blocks()[..1]), 0, "block 0 has none");
        let mut b = SeqKv::default();
        p.share(&a.blocks()[..2], &mut b);
        assert_eq!((b.len(), b.state_slot()), (32, Some(1)));
        assert_eq!(p.snapshot_loads(), vec![(0, 1)]);
        assert_eq!(p.usable(&a.blocks()[..2]), 0, "no slot left to load into");
        p.release(&mut b);
        forward(&mut p, &mut a, 40, 48);
        forward(&mut p, &mut a, 48, 64);
        assert_eq!(
            p.snapshot_saves(),
            vec![(0, 1), (0, 0)],
            "the oldest taken back"
        );
        assert_eq!(p.usable(&a.blocks()[..2]), 0);
        assert_eq!(p.usable(a.blocks()), 4);
        assert_eq!(p.truncate(&mut a, 60), 48, "back to the checkpoint");
        assert_eq!(p.usable(&a.blocks()[..3]), 3);
        forward(&mut p, &mut a, 48, 64);
        assert_eq!(
            p.snapshot_saves(),
            vec![(0, 0)],
            "the freed block's snapshot"
        );
        assert_eq!(p.truncate(&mut a, 48), 48);
        forward(&mut p, &mut a, 48, 50);
        assert_eq!(p.truncate(&mut a, 49), 48);
        assert_eq!(
            p.usable(&a.blocks()[..3]),
            3,
            "a whole block keeps its snapshot"
        );
    }

    #[test]
    fn restored_blocks_get_a_snapshot_to_fill_which_their_slot_loads_unless_freed() {
        let mut p = pool(2, 2);
        let mut a = SeqKv::default();
        p.reserve(&mut a, 40).unwrap();
        assert_eq!(
            p.commit_saved(&mut a, 32),
            Some(0),
            "the last block's snapshot"
        );
        assert_eq!(p.snapshot_saves(), vec![], "nothing computed to copy");
        assert_eq!(p.snapshot_of(a.blocks()[1]), Some(0));
        assert_eq!(p.snapshot_of(a.blocks()[0]), None);
        assert_eq!(p.snapshot_loads(), vec![(0, 0)], "into a's slot");
        assert_eq!(
            p.usable(&a.blocks()[..2]),
            2,
            "the restored prefix can be shared"
        );
        let mut b = SeqKv::default();
        p.reserve(&mut b, 16).unwrap();
        assert_eq!(p.commit_saved(&mut b, 16), Some(1));
        p.release(&mut b);
        assert_eq!(p.snapshot_loads(), vec![], "a freed slot loads nothing");
        let mut c = SeqKv::default();
        p.share(&a.blocks()[..2], &mut c);
        assert_eq!(
            p.snapshot_loads(),
            vec![(0, 1)],
            "a sharer loads the restored snapshot"
        );
    }

    #[test]
    fn a_snapshot_a_slot_is_still_to_load_is_not_taken() {
        let mut p = pool(3, 1);
        let mut a = SeqKv::default();
        forward(&mut p, &mut a, 0, 32);
        assert_eq!(p.snapshot_saves(), vec![(0, 0)]);
        let mut b = SeqKv::default();
        p.share(&a.blocks()[..2], &mut b);
        let mut c = SeqKv::default();
        p.reserve(&mut c, 16).unwrap();
        assert_eq!(
            p.commit_saved(&mut c, 16),
            None,
            "the only one is b's to load"
        );
        assert_eq!(p.snapshot_loads(), vec![(0, 1)]);
        p.release(&mut c);
        let mut d = SeqKv::default();
        p.reserve(&mut d, 16).unwrap();
        assert_eq!(
            p.commit_saved(&mut d, 16),
            Some(0),
            "loaded, it can be taken"
        );
    }
}
