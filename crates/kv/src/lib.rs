//! The paged KV cache's accounting: a pool of fixed-size blocks, the same for every layer,
//! and a block table per sequence. The blocks' storage is the device's
//! (`device::Device::kv_alloc`): each block holds `BLOCK_SIZE` positions of
//! `[n_head_kv, head_dim]` keys (and the same of values) of every layer, in the pool's
//! element type (F32, F16, BF16, or a quantized type, whose keys and values are stored
//! rotated: [`Rotation`]).
//!
//! A block may be held by several sequences (and the prefix cache) at once: a full block of
//! a prompt prefix they have in common, which none of them writes again. Each holder counts
//! as one reference; the block is free when the last lets go.
//!
//! A model with sliding-window layers keeps those layers in a second, smaller class of
//! blocks that only the window's positions occupy ([`window`]). A model with recurrent
//! layers keeps theirs as one state per sequence, in slots ([`state`]). A record layer
//! ([`RecordKv`]) keeps a recent part of its last positions in the windowed class and a
//! kept part of every position in the pool's blocks, each as wide as the layer asks.

use std::ops::Range;
use std::sync::Arc;

use gguf::GgmlType;

pub mod host_cache;
mod prefix;
pub mod snapshot;
pub mod state;
pub mod window;
pub use host_cache::HostCache;
pub use prefix::{PrefixCache, SHARED};
use snapshot::Snapshots;
pub use state::StateKv;
use window::Companions;
pub use window::WindowKv;

/// Positions per block.
pub const BLOCK_SIZE: usize = 16;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(
        "KV cache type {0} is not supported (f32, f16, bf16, q8_0, q4_0, q4_1, iq4_nl, q5_0, q5_1)"
    )]
    UnsupportedType(GgmlType),
    #[error("KV cache type {ty} needs head_dim to be a multiple of {block}, got {head_dim}")]
    HeadDim {
        ty: GgmlType,
        block: u64,
        head_dim: usize,
    },
    #[error("the KV cache is full: {needed} more blocks of {BLOCK_SIZE} positions needed, {free} free (raise -c)")]
    OutOfBlocks { needed: usize, free: usize },
    #[error("the sliding-window KV ({n_blocks} blocks) is needed whole by the running sequences (raise --parallel or use --swa-full)")]
    OutOfWindowBlocks { n_blocks: usize },
    #[error("sliding-window and state KV support at most 128 layers, the model has {0}")]
    TooManyLayers(usize),
    #[error("all {n_slots} recurrent-state slots are held (raise --parallel)")]
    OutOfStates { n_slots: usize },
}

pub type Result<T> = std::result::Result<T, Error>;

/// What a record layer keeps of each position instead of keys and values (DeepSeek-V4's
/// compressed attention): its *keys'* store holds `recent` f32 per position, of the last
/// positions only when the pool has a windowed class (which the layer is then in), and
/// its *values'* store `kept` floats of the pool's type per position, of every position.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordKv {
    pub recent: usize,
    pub kept: usize,
}

/// The shape of a KV pool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KvConfig {
    pub n_layer: usize,
    pub n_head_kv: usize,
    pub head_dim: usize,
    pub ty: GgmlType,
    /// Total positions the pool holds, over all sequences (rounded up to whole blocks).
    pub n_positions: usize,
    /// The windowed layers' smaller class of blocks; `None`: every layer keeps every
    /// position.
    pub window: Option<WindowKv>,
    /// The state layers (they hold no blocks); `None`: every layer is paged.
    pub state: Option<StateKv>,
    /// Per KV layer, `Some` for a record layer; `None`: no layer is.
    pub records: Option<Arc<[Option<RecordKv>]>>,
    /// Bit `l` set: KV layer `l` keeps nothing (a block of a feed-forward network alone);
    /// at most 128 KV layers.
    pub empty: u128,
}

/// The orthonormal Walsh–Hadamard transform (`H_n / sqrt(n)`, Sylvester's order, its own
/// inverse) a quantized pool applies per block of consecutive values of every head, as
/// llama.cpp does for a quantized cache: keys and the queries that meet them over blocks of
/// `keys` values, values and the attention's output (which undoes it) over blocks of
/// `values`. `q·k` is unchanged, while a head's outlying values are spread over the
/// block, so that its blocks of 32 quantize with less error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rotation {
    /// The largest power of two (at least 64) that divides `head_dim`.
    pub keys: usize,
    /// 64.
    pub values: usize,
}

impl KvConfig {
    /// The pool's [`Rotation`]: `None` for F32, F16 and BF16 pools, and for heads whose
    /// width is not a multiple of 64.
    pub fn rotation(&self) -> Option<Rotation> {
        let quantized = self.ty.block_size() > 1;
        (quantized && self.head_dim > 0 && self.head_dim.is_multiple_of(64)).then(|| Rotation {
            keys: 1 << self.head_dim.trailing_zeros(),
            values: 64,
        })
    }

    pub fn n_blocks(&self) -> usize {
        self.n_positions.div_ceil(BLOCK_SIZE)
    }

    /// Bytes of one position of one layer's keys (or values), but a record layer's.
    pub fn position_bytes(&self) -> usize {
        self.ty
            .row_bytes((self.n_head_kv * self.head_dim) as u64)
            .unwrap_or(0) as usize
    }

    /// Bytes of one block of one layer's keys (or values), but a record layer's.
    pub fn block_bytes(&self) -> usize {
        BLOCK_SIZE * self.position_bytes()
    }

    /// KV layer `layer`'s record shape, when it is a record layer.
    pub fn record(&self, layer: usize) -> Option<RecordKv> {
        self.records.as_ref().and_then(|r| r[layer])
    }

    /// Bytes of one position of KV layer `layer`'s keys' store (`values` false) or values'.
    pub fn store_position_bytes(&self, layer: usize, values: bool) -> usize {
        match self.record(layer) {
            Some(r) if values => self.ty.row_bytes(r.kept as u64).unwrap_or(0) as usize,
            Some(r) => 4 * r.recent,
            None => self.position_bytes(),
        }
    }

    /// Bytes of one block of KV layer `layer`'s keys' or values' store.
    pub fn store_block_bytes(&self, layer: usize, values: bool) -> usize {
        BLOCK_SIZE * self.store_position_bytes(layer, values)
    }

    /// Whether KV layer `layer`'s keys' or values' store keeps every position in the pool's
    /// blocks (a record layer's values always do).
    pub fn store_is_full(&self, layer: usize, values: bool) -> bool {
        !self.is_state(layer)
            && !self.keeps_nothing(layer)
            && (!self.is_windowed(layer) || values && self.record(layer).is_some())
    }

    /// Blocks of KV layer `layer`'s keys' or values' store.
    pub fn store_blocks(&self, layer: usize, values: bool) -> usize {
        match self.window {
            _ if self.is_state(layer) || self.keeps_nothing(layer) => 0,
            _ if self.store_is_full(layer, values) => self.n_blocks(),
            Some(w) => w.n_blocks,
            None => self.n_blocks(),
        }
    }

    /// Bytes of one block over every store that keeps every position: what a block's
    /// reads and writes move ([`KvPool`]'s blocks).
    pub fn full_block_bytes(&self) -> usize {
        let stores = (0..self.n_layer).flat_map(|l| [(l, false), (l, true)]);
        stores
            .filter(|&(l, v)| self.store_is_full(l, v))
            .map(|(l, v)| self.store_block_bytes(l, v))
            .sum()
    }

    /// Whether KV layer `layer`'s keys' or values' store is in the windowed class (a
    /// window's keys or values, a record's recent part): its blocks are companions.
    pub fn store_is_windowed(&self, layer: usize, values: bool) -> bool {
        self.is_windowed(layer) && !self.store_is_full(layer, values)
    }

    /// Bytes of one companion over every windowed store: what a companion's reads and
    /// writes move ([`window`]); 0 without a windowed class.
    pub fn windowed_block_bytes(&self) -> usize {
        let stores = (0..self.n_layer).flat_map(|l| [(l, false), (l, true)]);
        stores
            .filter(|&(l, v)| self.store_is_windowed(l, v))
            .map(|(l, v)| self.store_block_bytes(l, v))
            .sum()
    }

    /// How many blocks of a prefix of `n_blocks` whole blocks the row after it sees (the
    /// last window's, whose companions a saved prefix carries); 0 without a windowed class.
    pub fn last_window_blocks(&self, n_blocks: usize) -> usize {
        self.window
            .map_or(0, |w| n_blocks - w.first_seen(n_blocks * BLOCK_SIZE))
    }

    /// Whether KV layer `layer` keeps only a window (in the windowed class of blocks).
    pub fn is_windowed(&self, layer: usize) -> bool {
        self.window.is_some_and(|w| w.has(layer))
    }

    /// Whether KV layer `layer` keeps a recurrent state rather than paged keys and values.
    pub fn is_state(&self, layer: usize) -> bool {
        self.state.is_some_and(|s| s.has(layer))
    }

    /// Whether KV layer `layer` keeps nothing ([`KvConfig::empty`]).
    pub fn keeps_nothing(&self, layer: usize) -> bool {
        layer < 128 && self.empty >> layer & 1 == 1
    }

    /// Bytes the pool allocates: every store of every paged layer, and the states with
    /// their checkpoints.
    pub fn total_bytes(&self) -> u64 {
        let stores = (0..self.n_layer).flat_map(|l| [(l, false), (l, true)]);
        let paged: u64 = stores
            .map(|(l, v)| self.store_blocks(l, v) as u64 * self.store_block_bytes(l, v) as u64)
            .sum();
        paged + self.state.map_or(0, |s| s.total_bytes())
    }

    /// Checks the element type and that a head is whole blocks of it.
    pub fn validate(&self) -> Result<()> {
        match self.ty {
            GgmlType::F16 | GgmlType::BF16 | GgmlType::F32 | GgmlType::Q8_0 => {}
            GgmlType::Q4_0 | GgmlType::Q4_1 | GgmlType::IQ4_NL => {}
            GgmlType::Q5_0 | GgmlType::Q5_1 => {}
            ty => return Err(Error::UnsupportedType(ty)),
        }
        if !(self.head_dim as u64).is_multiple_of(self.ty.block_size()) {
            return Err(Error::HeadDim {
                ty: self.ty,
                block: self.ty.block_size(),
                head_dim: self.head_dim,
            });
        }
        let masks = self.window.is_some() || self.state.is_some() || self.empty != 0;
        if masks && self.n_layer > 128 {
            return Err(Error::TooManyLayers(self.n_layer));
        }
        if let Some(r) = &self.records {
            assert_eq!(r.len(), self.n_layer, "a record shape per KV layer");
        }
        Ok(())
    }
}

/// One sequence's cached positions: `len` positions held in `blocks`, in order.
#[derive(Debug, Default, Clone)]
pub struct SeqKv {
    blocks: Vec<u32>,
    len: usize,
    /// Indices into `blocks` whose windowed companions it needs ([`window`]).
    need: Range<usize>,
    /// Its recurrent-state slot ([`state`]), once it holds one.
    state: Option<u32>,
    /// The position of its state's checkpoint.
    checkpoint: usize,
    /// Where the next forward's rows may be cut back from ([`SeqKv::uncertain_from`]).
    uncertain: Option<usize>,
}

impl SeqKv {
    /// Positions whose keys and values are cached.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Says that the next forward's rows of this sequence from position `pos` on are
    /// drafts, which a truncation may cut back: with state layers, the state before `pos`
    /// becomes the checkpoint. A forward without drafts keeps no checkpoint (it is never
    /// cut back; a state copy per sequence and step saved).
    pub fn uncertain_from(&mut self, pos: usize) {
        self.uncertain = Some(pos);
    }

    /// The position of its state's checkpoint, whose state before it the device keeps; 0
    /// for none.
    pub fn checkpoint(&self) -> usize {
        self.checkpoint
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Positions the sequence can hold without new blocks.
    pub fn capacity(&self) -> usize {
        self.blocks.len() * BLOCK_SIZE
    }

    /// The blocks holding its positions, in order.
    pub fn blocks(&self) -> &[u32] {
        &self.blocks
    }

    /// Its recurrent-state slot, when the pool has state layers and it holds one.
    pub fn state_slot(&self) -> Option<u32> {
        self.state
    }
}

/// The pool's free blocks, and the holders of every other block.
pub struct KvPool {
    cfg: KvConfig,
    free: Vec<u32>,
    /// Per block: the sequences (and cache entry) holding it.
    refs: Vec<u32>,
    win: Option<Companions>,
    /// Free recurrent-state slots.
    free_states: Vec<u32>,
    snaps: Option<Snapshots>,
}

impl KvPool {
    pub fn new(cfg: KvConfig) -> Result<Self> {
        cfg.validate()?;
        Ok(KvPool {
            free: (0..cfg.n_blocks() as u32).rev().collect(),
            refs: vec![0; cfg.n_blocks()],
            win: cfg.window.map(|w| Companions::new(w, cfg.n_blocks())),
            free_states: (0..cfg.state.map_or(0, |s| s.n_slots as u32))
                .rev()
                .collect(),
            snaps: cfg
                .state
                .filter(|s| s.n_snaps > 0)
                .map(|s| Snapshots::new(s.n_snaps, cfg.n_blocks())),
            cfg,
        })
    }

    pub fn config(&self) -> &KvConfig {
        &self.cfg
    }

    pub fn free_blocks(&self) -> usize {
        self.free.len()
    }

    /// Whether the pool keeps snapshots of recurrent states ([`snapshot`]).
    pub fn snapshots(&self) -> bool {
        self.snaps.is_some()
    }

    /// Makes room in `seq` for `n_positions` positions in all, taking blocks from the pool
    /// (and a state slot, with state layers). On failure nothing is taken.
    pub fn reserve(&mut self, seq: &mut SeqKv, n_positions: usize) -> Result<()> {
        let needed = n_positions
            .div_ceil(BLOCK_SIZE)
            .saturating_sub(seq.blocks.len());
        if needed > self.free.len() {
            return Err(Error::OutOfBlocks {
                needed,
                free: self.free.len(),
            });
        }
        if let Some(s) = self.cfg.state.filter(|_| seq.state.is_none()) {
            seq.state = Some(
                self.free_states
                    .pop()
                    .ok_or(Error::OutOfStates { n_slots: s.n_slots })?,
            );
        }
        let at = self.free.len() - needed;
        for b in self.free.drain(at..).rev() {
            self.refs[b as usize] = 1;
            seq.blocks.push(b);
        }
        Ok(())
    }

    /// Lets the empty `seq` hold `blocks` too: full, computed blocks at the start of another
    /// sequence whose tokens `seq` starts with (their positions are never written again).
    /// `seq` then holds `blocks.len() * BLOCK_SIZE` positions. `blocks` must be
    /// [`Self::usable`] whole.
    pub fn share(&mut self, blocks: &[u32], seq: &mut SeqKv) {
        assert!(seq.blocks.is_empty(), "share needs an empty sequence");
        assert_eq!(
            self.usable(blocks),
            blocks.len(),
            "shared blocks are usable"
        );
        for &b in blocks {
            assert!(self.refs[b as usize] > 0, "a shared block is held");
            self.refs[b as usize] += 1;
        }
        seq.blocks.extend_from_slice(blocks);
        seq.len = blocks.len() * BLOCK_SIZE;
        self.adopt(seq);
    }

    /// How many of `blocks` (full, computed blocks of a prefix, in order) a sequence can
    /// start from without computing any again: the most whose last window still has its
    /// windowed companions (all of them without a windowed class) and, with state layers,
    /// whose last block has a snapshot ([`snapshot`]) while a state slot is free.
    pub fn usable(&self, blocks: &[u32]) -> usize {
        let state_ok = |k: usize| match (&self.cfg.state, &self.snaps) {
            (None, _) => true,
            (Some(_), Some(s)) => k > 0 && s.has(blocks[k - 1]) && !self.free_states.is_empty(),
            (Some(_), None) => false,
        };
        let window_ok = |k: usize| match &self.win {
            Some(w) => w.all_kept(blocks, w.cfg.first_seen(k * BLOCK_SIZE)..k),
            None => true,
        };
        (0..=blocks.len())
            .rev()
            .find(|&k| k == 0 || state_ok(k) && window_ok(k))
            .unwrap_or(0)
    }

    /// Needs the companions of the window before the next row of `seq`, which just came to
    /// hold its blocks; they all have one ([`Self::usable`]). With state layers, gives it a
    /// slot that loads the snapshot of its last block.
    pub(crate) fn adopt(&mut self, seq: &mut SeqKv) {
        if let Some(snaps) = self.snaps.as_mut().filter(|_| seq.len > 0) {
            let slot = self
                .free_states
                .pop()
                .expect("a usable prefix has a free slot");
            snaps.load(seq.blocks[seq.len / BLOCK_SIZE - 1], slot);
            seq.state = Some(slot);
            seq.checkpoint = seq.len;
        }
        let Some(w) = &mut self.win else { return };
        let lo = w.cfg.first_seen(seq.len);
        let hi = seq.len.div_ceil(BLOCK_SIZE);
        for &b in &seq.blocks[lo..hi] {
            w.need(b).expect("a usable block has its companion");
        }
        seq.need = lo..hi;
    }

    /// Drops one hold of `block`; the last frees it.
    pub(crate) fn unref(&mut self, block: u32) {
        let r = &mut self.refs[block as usize];
        *r -= 1;
        if *r == 0 {
            self.free.push(block);
            if let Some(w) = &mut self.win {
                w.freed(block);
            }
            if let Some(s) = &mut self.snaps {
                s.drop_of(block);
            }
        }
    }

    /// Lets go of every windowed companion `seq` needs (they stay, idle, with its blocks).
    pub(crate) fn let_go(&mut self, seq: &mut SeqKv) {
        if let Some(w) = &mut self.win {
            for &b in &seq.blocks[seq.need.clone()] {
                w.let_go(b);
            }
        }
        seq.need = 0..0;
    }

    /// Forgets positions `len..` of `seq`, dropping its holds of the blocks past them.
    pub(crate) fn cut(&mut self, seq: &mut SeqKv, len: usize) {
        seq.len = seq.len.min(len);
        let keep = len.div_ceil(BLOCK_SIZE);
        while seq.blocks.len() > keep {
            let b = seq.blocks.pop().expect("len > keep");
            let i = seq.blocks.len();
            if seq.need.contains(&i) {
                self.win.as_mut().expect("needs are windowed").let_go(b);
                seq.need.end = i;
            }
            self.unref(b);
        }
        if seq.need.is_empty() {
            seq.need = 0..0;
        }
        if let Some(s) = &mut self.snaps {
            match seq.blocks.get(len / BLOCK_SIZE) {
                Some(&b) if self.refs[b as usize] == 1 => s.drop_of(b),
                _ => {}
            }
        }
        if seq.blocks.is_empty() {
            if let Some(slot) = seq.state.take() {
                self.free_states.push(slot);
                if let Some(s) = &mut self.snaps {
                    s.slot_freed(slot);
                }
            }
        }
    }

    /// Forgets positions `len..` of `seq`, and returns the positions it keeps: `len` (or
    /// fewer when it held fewer); with state layers, when `len` is short of what it holds
    /// but not of the checkpoint, the last kept state's position at or before `len`
    /// (`checkpoint + min(len - checkpoint, rows - 1)`: its device must then restore
    /// checkpoint row `kept - checkpoint`, [`state`]); or 0 when the window before position
    /// `len` lost its windowed blocks or `len` is short of the checkpoint (cutting back
    /// further than the last forward's rows may), in which case all of `seq` went back to
    /// the pool.
    pub fn truncate(&mut self, seq: &mut SeqKv, len: usize) -> usize {
        let len = match self.cfg.state {
            Some(_) if len >= seq.len => len,
            Some(s) if len >= seq.checkpoint && seq.checkpoint > 0 => {
                seq.checkpoint + (len - seq.checkpoint).min(s.kept_rows() - 1)
            }
            Some(_) => 0,
            None => len,
        };
        if len == 0 && self.cfg.state.is_some() {
            self.release(seq);
            return 0;
        }
        self.cut(seq, len);
        let Some(w) = &mut self.win else {
            return seq.len;
        };
        let lo = w.cfg.first_seen(seq.len);
        let hi = if seq.need.is_empty() {
            seq.len.div_ceil(BLOCK_SIZE)
        } else {
            seq.need.start
        };
        if lo >= hi {
            return seq.len;
        }
        if !w.all_kept(&seq.blocks, lo..hi) {
            self.release(seq);
            return 0;
        }
        for &b in &seq.blocks[lo..hi] {
            w.need(b).expect("kept");
        }
        seq.need = lo..seq.need.end.max(hi);
        seq.len
    }

    /// Returns all of `seq`'s blocks to the pool.
    pub fn release(&mut self, seq: &mut SeqKv) {
        self.let_go(seq);
        self.cut(seq, 0);
    }

    /// Before a forward whose rows of `seq` are positions `first..len`: needs (attaching
    /// where missing) the windowed companions of the blocks those rows see or write.
    /// With state layers, the position [`SeqKv::uncertain_from`] gave becomes the state's
    /// checkpoint where it is one of the rows (the device keeps the state before that row,
    /// [`state`]); else the forward keeps none.
    pub fn prepare(&mut self, seq: &mut SeqKv, first: usize, len: usize) -> Result<()> {
        let uncertain = seq.uncertain.take();
        if self.cfg.state.is_some() {
            seq.checkpoint = uncertain.filter(|u| (first..len).contains(u)).unwrap_or(0);
        }
        let Some(w) = &mut self.win else {
            return Ok(());
        };
        let lo = w.cfg.first_seen(first);
        debug_assert!(first >= seq.len, "rows follow what the sequence holds");
        if seq.need.is_empty() || seq.need.end < lo {
            for &b in &seq.blocks[seq.need.clone()] {
                w.let_go(b);
            }
            seq.need = lo..lo;
        }
        let hi = len.div_ceil(BLOCK_SIZE);
        for i in seq.need.end..hi {
            w.need(seq.blocks[i])?;
            seq.need.end = i + 1;
        }
        Ok(())
    }

    /// Marks positions up to `len` of `seq` as cached (after every layer has written them).
    /// The windowed blocks before the window of the row at `len` become idle. With state
    /// layers and `len` at a block's end, that block gets a snapshot of the state.
    pub fn commit(&mut self, seq: &mut SeqKv, len: usize) {
        assert!(len <= seq.capacity());
        seq.len = len;
        if let (Some(s), Some(slot)) = (&mut self.snaps, seq.state) {
            if len > 0 && len.is_multiple_of(BLOCK_SIZE) {
                s.save(seq.blocks[len / BLOCK_SIZE - 1], slot);
            }
        }
        if let Some(w) = &mut self.win {
            let lo = w.cfg.first_seen(len).min(seq.need.end);
            for &b in &seq.blocks[seq.need.start.min(lo)..lo] {
                w.let_go(b);
            }
            seq.need.start = seq.need.start.max(lo);
        }
    }

    /// Marks positions up to `len` of `seq` as written from saved bytes rather than computed
    /// (a restored prefix). With state layers `len` is a block's end, and its last block gets
    /// a snapshot whose bytes the caller writes (the id returned; `None` when the pool keeps
    /// none), which `seq`'s state slot loads before its next forward.
    pub fn commit_saved(&mut self, seq: &mut SeqKv, len: usize) -> Option<u32> {
        let slot = seq.state.take();
        self.commit(seq, len);
        seq.state = slot;
        let (s, slot) = (self.snaps.as_mut()?, slot?);
        assert!(
            len > 0 && len.is_multiple_of(BLOCK_SIZE),
            "a saved state ends at a block's end"
        );
        let block = seq.blocks[len / BLOCK_SIZE - 1];
        let snap = s.place(block)?;
        s.load(block, slot);
        seq.checkpoint = len;
        Some(snap)
    }

    /// The windowed companions of the last window of `blocks` (whole blocks of a prefix,
    /// [`Self::usable`] whole, or held by a sequence [`Self::prepare`]d at their end), in
    /// block order ([`KvConfig::last_window_blocks`]); empty without a windowed class.
    pub fn last_window(&self, blocks: &[u32]) -> Vec<u32> {
        let Some(w) = &self.win else {
            return Vec::new();
        };
        let n = self.cfg.last_window_blocks(blocks.len());
        let of = |&b: &u32| w.of(b);
        let window: Vec<u32> = blocks[blocks.len() - n..].iter().map(of).collect();
        assert!(window.iter().all(|&c| c != window::NONE), "a kept window");
        window
    }

    /// Block `block`'s windowed companion ([`window`]), if it has one.
    pub fn companion_of(&self, block: u32) -> Option<u32> {
        let c = self.win.as_ref()?.of(block);
        (c != window::NONE).then_some(c)
    }

    /// Block `block`'s snapshot of the recurrent states ([`snapshot`]), if it has one.
    pub fn snapshot_of(&self, block: u32) -> Option<u32> {
        self.snaps.as_ref()?.of_block(block)
    }

    /// Per block of `seq`, its windowed companion (`u32::MAX` where it has none); empty
    /// without a windowed class.
    pub fn window_table(&self, seq: &SeqKv) -> Vec<u32> {
        match &self.win {
            Some(w) => seq.blocks.iter().map(|&b| w.of(b)).collect(),
            None => Vec::new(),
        }
    }

    /// Per sequence, its state slot ([`state::NO_SLOT`] where it holds none); empty without
    /// state layers.
    pub fn state_slots(&self, seqs: &[&mut SeqKv]) -> Vec<u32> {
        match self.cfg.state {
            Some(_) => seqs
                .iter()
                .map(|s| s.state.unwrap_or(state::NO_SLOT))
                .collect(),
            None => Vec::new(),
        }
    }

    /// The snapshots the device owes of the states the forward just computed: `(slot,
    /// snapshot)`, to copy after it ([`snapshot`]).
    pub fn snapshot_saves(&mut self) -> Vec<(u32, u32)> {
        self.snaps
            .as_mut()
            .map_or(Vec::new(), |s| std::mem::take(&mut s.saves))
    }

    /// The snapshots the device owes to slots: `(snapshot, slot)`, to copy before the next
    /// forward.
    pub fn snapshot_loads(&mut self) -> Vec<(u32, u32)> {
        self.snaps
            .as_mut()
            .map_or(Vec::new(), |s| std::mem::take(&mut s.loads))
    }

    /// Windowed blocks no sequence needs (free or idle); 0 without a windowed class.
    pub fn window_available(&self) -> usize {
        self.win.as_ref().map_or(0, Companions::available)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(n_positions: usize) -> KvConfig {
        KvConfig {
            n_layer: 2,
            n_head_kv: 2,
            head_dim: 32,
            ty: GgmlType::F16,
            n_positions,
            window: None,
            state: None,
            records: None,
            empty: 0,
        }
    }

    #[test]
    fn reserve_truncate_release() {
        let mut pool = KvPool::new(cfg(64)).unwrap();
        assert_eq!(pool.free_blocks(), 4);
        let mut a = SeqKv::default();
        pool.reserve(&mut a, 17).unwrap();
        assert_eq!(a.capacity(), 32);
        let mut b = SeqKv::default();
        let e = pool.reserve(&mut b, 49).unwrap_err();
        assert!(matches!(e, Error::OutOfBlocks { needed: 4, free: 2 }));
        assert_eq!(pool.free_blocks(), 2);
        pool.commit(&mut a, 17);
        pool.truncate(&mut a, 5);
        assert_eq!((a.len(), a.capacity(), pool.free_blocks()), (5, 16, 3));
        pool.release(&mut a);
        assert_eq!(pool.free_blocks(), 4);
    }

    #[test]
    fn a_shared_block_is_free_when_its_last_holder_lets_go() {
        let mut pool = KvPool::new(cfg(64)).unwrap();
        let mut a = SeqKv::default();
        pool.reserve(&mut a, 40).unwrap();
        pool.commit(&mut a, 40);
        let mut b = SeqKv::default();
        pool.share(&a.blocks()[..2], &mut b);
        assert_eq!((b.len(), pool.free_blocks()), (32, 1));
        pool.reserve(&mut b, 33).unwrap();
        assert_eq!(pool.free_blocks(), 0);
        pool.release(&mut a);
        assert_eq!(pool.free_blocks(), 1, "only a's own third block is free");
        pool.release(&mut b);
        assert_eq!(pool.free_blocks(), 4);
    }

    #[test]
    fn quantized_pools_with_heads_a_multiple_of_64_wide_are_rotated() {
        let rot = |ty, head_dim| {
            let mut c = cfg(16);
            (c.ty, c.head_dim) = (ty, head_dim);
            c.rotation().map(|r| (r.keys, r.values))
        };
        assert_eq!(rot(GgmlType::Q8_0, 64), Some((64, 64)));
        assert_eq!(rot(GgmlType::Q4_0, 128), Some((128, 64)));
        assert_eq!(rot(GgmlType::Q8_0, 192), Some((64, 64)));
        assert_eq!(rot(GgmlType::Q5_1, 256), Some((256, 64)));
        assert_eq!(rot(GgmlType::Q8_0, 96), None);
        assert_eq!(rot(GgmlType::Q8_0, 32), None);
        for ty in [GgmlType::F16, GgmlType::BF16, GgmlType::F32] {
            assert_eq!(rot(ty, 128), None);
        }
    }

    /// A layer that keeps nothing (a feed-forward block alone) has no store: no blocks, no
    /// bytes, nothing a block's reads and writes move.
    #[test]
    fn empty_layers_hold_nothing() {
        let mut c = cfg(64);
        let paged = c.total_bytes();
        let full = c.full_block_bytes();
        c.n_layer += 1;
        c.empty = 1 << (c.n_layer - 1);
        let l = c.n_layer - 1;
        assert!(c.keeps_nothing(l) && !c.keeps_nothing(0));
        assert!(!c.store_is_full(l, false) && !c.store_is_full(l, true));
        assert_eq!((c.store_blocks(l, false), c.store_blocks(l, true)), (0, 0));
        assert_eq!((c.total_bytes(), c.full_block_bytes()), (paged, full));
        c.validate().unwrap();
    }

    #[test]
    fn q8_0_needs_whole_blocks() {
        let mut c = cfg(16);
        c.ty = GgmlType::Q8_0;
        c.head_dim = 48;
        assert!(matches!(KvPool::new(c.clone()), Err(Error::HeadDim { .. })));
        c.ty = GgmlType::Q4_K;
        assert!(matches!(KvPool::new(c), Err(Error::UnsupportedType(_))));
    }
}
