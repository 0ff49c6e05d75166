//! Sliding-window KV: the windowed layers keep only the positions some row can still see.
//!
//! Each block of the pool (a "global" block: positions `16i..16i+16` of one token prefix)
//! may have a *companion*: a block of the windowed class holding the same positions for
//! the windowed layers. Since the forward is batch-invariant, the companion's contents are
//! a function of the global block's prefix, so whoever holds the global block (sequences
//! sharing a prefix, the prefix cache) sees the same companion.
//!
//! A sequence *needs* the companions of the blocks its next row can see (the window before
//! position `len`) and of the blocks its current forward writes. A companion nobody needs
//! is *idle*: it stays attached, so a prefix taken again later may still use it, until the
//! room is wanted (least recently idled first) or its global block is freed.
//!
//! ```text
//! seq blocks   [b0] [b1] [b2] [b3] [b4] [b5]      len = 90, window = 40
//! needed                      [b3] [b4] [b5]      (next row at 90 sees 51..=90)
//! companions   --   idle --   w7   w2   w9
//! ```

use std::collections::BTreeMap;
use std::ops::Range;

use crate::{Error, Result, BLOCK_SIZE};

/// The windowed class of a pool: which KV layers keep only a window, how wide, and how
/// many blocks their storage has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowKv {
    /// Positions a row sees, itself included: row `p` sees `p + 1 - size ..= p`.
    pub size: usize,
    /// Bit `l` set: KV layer `l` is windowed (at most 128 KV layers).
    pub layers: u128,
    /// Blocks of the windowed class.
    pub n_blocks: usize,
}

impl WindowKv {
    /// Whether KV layer `layer` is windowed.
    pub fn has(&self, layer: usize) -> bool {
        layer < 128 && self.layers >> layer & 1 == 1
    }

    /// Blocks `n_seq` sequences need at once, `n_rows` rows a forward: per sequence the
    /// window before its next row and the blocks its rows start, plus the rows' blocks.
    pub fn blocks_for(size: usize, n_seq: usize, n_rows: usize) -> usize {
        n_seq * ((size - 1).div_ceil(BLOCK_SIZE) + 2) + n_rows.div_ceil(BLOCK_SIZE)
    }

    /// Index of the first block the row at `pos` sees.
    pub fn first_seen(&self, pos: usize) -> usize {
        (pos + 1).saturating_sub(self.size) / BLOCK_SIZE
    }
}

/// No companion.
pub const NONE: u32 = u32::MAX;

/// The windowed class's accounting, per global block.
pub(crate) struct Companions {
    pub(crate) cfg: WindowKv,
    free: Vec<u32>,
    /// Per global block: its companion, or [`NONE`].
    of: Vec<u32>,
    /// Per global block: how many sequences need its companion.
    needers: Vec<u32>,
    /// Idle companions by the tick they became idle: global block.
    idle: BTreeMap<u64, u32>,
    /// Per global block: its key in `idle`, 0 when not idle.
    idle_at: Vec<u64>,
    tick: u64,
}

impl Companions {
    pub(crate) fn new(cfg: WindowKv, n_global: usize) -> Self {
        Companions {
            cfg,
            free: (0..cfg.n_blocks as u32).rev().collect(),
            of: vec![NONE; n_global],
            needers: vec![0; n_global],
            idle: BTreeMap::new(),
            idle_at: vec![0; n_global],
            tick: 0,
        }
    }

    pub(crate) fn of(&self, block: u32) -> u32 {
        self.of[block as usize]
    }

    /// Blocks of the windowed class no sequence needs (free or idle).
    pub(crate) fn available(&self) -> usize {
        self.free.len() + self.idle.len()
    }

    /// Whether `blocks[range]` all have companions (and can be needed without computing).
    pub(crate) fn all_kept(&self, blocks: &[u32], range: Range<usize>) -> bool {
        blocks[range].iter().all(|&b| self.of(b) != NONE)
    }

    /// Needs the companion of `block`, attaching a fresh one (contents unspecified) when it
    /// has none.
    pub(crate) fn need(&mut self, block: u32) -> Result<()> {
        let b = block as usize;
        if self.of[b] == NONE {
            self.of[b] = self.take_room()?;
        } else if self.needers[b] == 0 {
            self.idle.remove(&self.idle_at[b]);
            self.idle_at[b] = 0;
        }
        self.needers[b] += 1;
        Ok(())
    }

    /// Lets go of one need of `block`'s companion; the last leaves it idle.
    pub(crate) fn let_go(&mut self, block: u32) {
        let b = block as usize;
        self.needers[b] -= 1;
        if self.needers[b] == 0 {
            self.tick += 1;
            self.idle.insert(self.tick, block);
            self.idle_at[b] = self.tick;
        }
    }

    /// `block` went back to the pool: its companion too.
    pub(crate) fn freed(&mut self, block: u32) {
        let b = block as usize;
        if self.of[b] != NONE {
            debug_assert_eq!(self.needers[b], 0, "a freed block is needed by no one");
            self.idle.remove(&self.idle_at[b]);
            self.idle_at[b] = 0;
            self.free.push(self.of[b]);
            self.of[b] = NONE;
        }
    }

    /// A free windowed block, else the least recently idled one, detached.
    fn take_room(&mut self) -> Result<u32> {
        if let Some(w) = self.free.pop() {
            return Ok(w);
        }
        let Some((_, owner)) = self.idle.pop_first() else {
            return Err(Error::OutOfWindowBlocks {
                n_blocks: self.cfg.n_blocks,
            });
        };
        let o = owner as usize;
        self.idle_at[o] = 0;
        Ok(std::mem::replace(&mut self.of[o], NONE))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{KvConfig, KvPool, PrefixCache, SeqKv};
    use gguf::GgmlType;

    /// 64 global blocks; a window of 40 positions in 8 windowed blocks.
    fn pool() -> KvPool {
        KvPool::new(KvConfig {
            n_layer: 2,
            n_head_kv: 1,
            head_dim: 32,
            ty: GgmlType::F16,
            n_positions: 64 * BLOCK_SIZE,
            window: Some(WindowKv {
                size: 40,
                layers: 0b10,
                n_blocks: 8,
            }),
            state: None,
            records: None,
            empty: 0,
        })
        .unwrap()
    }

    /// Computes positions `seq.len()..len` of `seq` in forwards of `rows` rows.
    fn advance(pool: &mut KvPool, seq: &mut SeqKv, len: usize, rows: usize) {
        while seq.len() < len {
            let to = (seq.len() + rows).min(len);
            pool.reserve(seq, to).unwrap();
            pool.prepare(seq, seq.len(), to).unwrap();
            let table = pool.window_table(seq);
            let first = WindowKv::first_seen(&pool.cfg.window.unwrap(), seq.len());
            assert!(table[first..to.div_ceil(BLOCK_SIZE)]
                .iter()
                .all(|&w| w != NONE));
            pool.commit(seq, to);
        }
    }

    #[test]
    fn a_record_layer_keeps_its_recent_part_windowed_and_its_kept_part_whole() {
        let mut cfg = pool().config().clone();
        let rec = crate::RecordKv {
            recent: 100,
            kept: 8,
        };
        cfg.records = Some(vec![None, Some(rec)].into());
        let (f16, bs) = (2, BLOCK_SIZE);
        assert_eq!(cfg.store_block_bytes(1, false), bs * 4 * 100, "recent: f32");
        assert_eq!(cfg.store_block_bytes(1, true), bs * f16 * 8);
        assert_eq!(
            (cfg.store_blocks(1, false), cfg.store_blocks(1, true)),
            (8, 64)
        );
        assert!(!cfg.store_is_full(1, false) && cfg.store_is_full(1, true));
        let full = 2 * bs * f16 * 32 + bs * f16 * 8;
        assert_eq!(cfg.full_block_bytes(), full);
        let total = 64 * (2 * bs * f16 * 32 + bs * f16 * 8) + 8 * bs * 4 * 100;
        assert_eq!(cfg.total_bytes(), total as u64);
        cfg.window = None;
        assert_eq!(
            cfg.store_blocks(1, false),
            64,
            "no windowed class: every position"
        );
    }

    #[test]
    fn only_the_window_keeps_windowed_blocks() {
        let mut pool = pool();
        assert_eq!(pool.config().store_blocks(0, false), 64);
        assert_eq!(pool.config().store_blocks(1, true), 8);
        let mut a = SeqKv::default();
        advance(&mut pool, &mut a, 1000, 16);
        assert_eq!(a.blocks().len(), 63);
        let kept = pool.window_table(&a).iter().filter(|&&w| w != NONE).count();
        assert_eq!(kept, 8, "idle companions stay until the room is wanted");
        assert_eq!(
            a.need,
            60..63,
            "positions 961.. are what the row at 1000 sees"
        );
        assert_eq!(pool.window_available(), 5);
        pool.release(&mut a);
        assert_eq!((pool.free_blocks(), pool.window_available()), (64, 8));
    }

    #[test]
    fn rollback_keeps_the_window_and_a_deep_cut_starts_over() {
        let mut pool = pool();
        let mut a = SeqKv::default();
        advance(&mut pool, &mut a, 200, 16);
        advance(&mut pool, &mut a, 208, 8);
        assert_eq!(
            pool.truncate(&mut a, 201),
            201,
            "back within the last forward"
        );
        assert_eq!(a.need, 10..13);
        let mut b = SeqKv::default();
        advance(&mut pool, &mut b, 300, 32);
        assert_eq!(pool.truncate(&mut a, 100), 0, "its window was taken by b");
        assert_eq!(a.blocks().len(), 0);
        advance(&mut pool, &mut a, 60, 60);
        assert_eq!(pool.truncate(&mut a, 30), 30, "still there, needed again");
        assert_eq!(a.need, 0..2);
    }

    #[test]
    fn a_cached_prefix_is_taken_up_to_where_its_window_is_kept() {
        let mut pool = pool();
        let mut cache = PrefixCache::new();
        let tokens: Vec<u32> = (0..200).collect();
        let mut a = SeqKv::default();
        advance(&mut pool, &mut a, 200, 16);
        let blocks = a.blocks().to_vec();
        assert_eq!(pool.usable(&blocks[..12]), 12);
        assert_eq!(
            pool.usable(&blocks[..9]),
            9,
            "idle companions of 5..10 remain"
        );
        assert_eq!(pool.usable(&blocks[..6]), 0, "blocks 3 and 4 lost theirs");
        cache.give(&mut pool, &mut a, &tokens, 0);
        let mut b = SeqKv::default();
        assert_eq!(cache.take(&mut pool, &mut b, &tokens, 199, 0), 192);
        let mut c = SeqKv::default();
        pool.share(&b.blocks()[..12], &mut c);
        assert_eq!((b.need.clone(), c.need.clone()), (9..12, 9..12));
        pool.release(&mut b);
        advance(&mut pool, &mut c, 240, 16);
        assert_eq!(c.len(), 240);
    }
}
