//! Prefix reuse: full KV blocks of finished sequences, kept by the content of the token
//! prefix they complete, handed to a later sequence whose tokens start the same way.
//!
//! A block's key chains the key of the block before it with the block's own tokens, so it
//! names the whole prefix up to the block's end:
//!
//! ```text
//! tokens  [t0 .. t15] [t16 .. t31] [t32 .. t40]
//! key     k0 = h(ROOT, t0..t15)
//!                     k1 = h(k0, t16..t31)
//!                                  (partial block: never cached)
//! ```
//!
//! Since the forward is batch-invariant, a reused block holds exactly the keys and values
//! the new sequence would have computed, so reuse never changes an answer.
//!
//! Prefixes live in namespaces: the chain starts from the namespace instead of `ROOT`
//! (`k0 = h(ns, t0..t15)`), so a prefix cached in one namespace is invisible from any other
//! (the server gives each API key, and each `cache_salt`, its own; 0 is the shared one).
//!
//! The cache holds one reference to each block it keeps ([`crate::KvPool::share`]: live
//! sequences may hold the same block). `take` moves the cache's references into a sequence;
//! `give` moves a finished sequence's back. Eviction drops the least recently used blocks'
//! references, deepest blocks of a prefix first, until enough blocks are free.

use std::collections::hash_map::DefaultHasher;
use std::collections::{BTreeMap, HashMap};
use std::hash::{Hash, Hasher};

use crate::{KvPool, SeqKv, BLOCK_SIZE};

/// The shared namespace.
pub const SHARED: u64 = 0;

struct Entry {
    block: u32,
    parent: u64,
    tokens: [u32; BLOCK_SIZE],
    tick: u64,
}

/// Cached blocks by prefix key, with their least-recently-used order.
#[derive(Default)]
pub struct PrefixCache {
    entries: HashMap<u64, Entry>,
    /// tick → key; the smallest tick is evicted first.
    lru: BTreeMap<u64, u64>,
    tick: u64,
}

/// The key of the block of `tokens` after the block keyed `parent` (or a namespace).
pub(crate) fn key(parent: u64, tokens: &[u32]) -> u64 {
    let mut h = DefaultHasher::new();
    parent.hash(&mut h);
    tokens.hash(&mut h);
    h.finish().max(1)
}

impl PrefixCache {
    pub fn new() -> Self {
        Self::default()
    }

    /// Blocks the cache holds.
    pub fn n_blocks(&self) -> usize {
        self.entries.len()
    }

    /// Positions [`Self::take`] would give `tokens` now.
    pub fn peek(&self, pool: &KvPool, tokens: &[u32], max_positions: usize, ns: u64) -> usize {
        pool.usable(&self.blocks(tokens, max_positions, ns)) * BLOCK_SIZE
    }

    /// The blocks cached in namespace `ns` for the longest prefix of `tokens` that fits in
    /// `max_positions` (whole blocks), in order; the cache keeps them.
    pub fn blocks(&self, tokens: &[u32], max_positions: usize, ns: u64) -> Vec<u32> {
        let n_max = max_positions.min(tokens.len()) / BLOCK_SIZE;
        let mut parent = ns;
        let mut blocks = Vec::new();
        for chunk in tokens.chunks_exact(BLOCK_SIZE).take(n_max) {
            let k = key(parent, chunk);
            match self.entries.get(&k) {
                Some(e) if e.parent == parent && e.tokens[..] == *chunk => blocks.push(e.block),
                _ => break,
            }
            parent = k;
        }
        blocks
    }

    /// Drops the cached prefix of `tokens` in namespace `ns` (its blocks go back to the pool
    /// unless a sequence holds them); the positions dropped.
    pub fn forget(&mut self, pool: &mut KvPool, tokens: &[u32], ns: u64) -> usize {
        let mut seq = SeqKv::default();
        let n = self.blocks(tokens, tokens.len(), ns).len();
        self.move_into(&mut seq, tokens, n, ns);
        pool.release(&mut seq);
        n * BLOCK_SIZE
    }

    /// Moves the longest prefix of `tokens` cached in namespace `ns` that fits in
    /// `max_positions` (whole blocks) and is [`KvPool::usable`] into the empty `seq`, and
    /// returns the positions it now holds.
    pub fn take(
        &mut self,
        pool: &mut KvPool,
        seq: &mut SeqKv,
        tokens: &[u32],
        max_positions: usize,
        ns: u64,
    ) -> usize {
        assert!(seq.blocks.is_empty(), "take needs an empty sequence");
        let n = self.peek(pool, tokens, max_positions, ns) / BLOCK_SIZE;
        self.move_into(seq, tokens, n, ns);
        pool.adopt(seq);
        seq.len
    }

    /// Moves the cache's first `n` blocks of `tokens`' prefix (all cached) into `seq`.
    fn move_into(&mut self, seq: &mut SeqKv, tokens: &[u32], n: usize, ns: u64) {
        let mut parent = ns;
        for chunk in tokens.chunks_exact(BLOCK_SIZE).take(n) {
            let k = key(parent, chunk);
            let e = self.entries.remove(&k).expect("peeked");
            self.lru.remove(&e.tick);
            seq.blocks.push(e.block);
            parent = k;
        }
        seq.len = seq.blocks.len() * BLOCK_SIZE;
    }

    /// Returns all of `seq`'s blocks: each full block whose positions are cached goes into
    /// the cache under namespace `ns` (or back to the pool when the cache already has that
    /// prefix), the rest to the pool. `tokens` are the sequence's tokens, at least
    /// `seq.len()` of them. With state layers but no snapshots nothing is cached: no prefix
    /// of such a pool is [`KvPool::usable`].
    pub fn give(&mut self, pool: &mut KvPool, seq: &mut SeqKv, tokens: &[u32], ns: u64) {
        if pool.config().state.is_some() && !pool.snapshots() {
            pool.release(seq);
            return;
        }
        let n_full = seq.len.min(tokens.len()) / BLOCK_SIZE;
        let mut keys = Vec::with_capacity(n_full);
        let mut parent = ns;
        for chunk in tokens.chunks_exact(BLOCK_SIZE).take(n_full) {
            let k = key(parent, chunk);
            keys.push((k, parent));
            parent = k;
        }
        pool.let_go(seq);
        pool.cut(seq, n_full * BLOCK_SIZE);
        // Deepest first, so that a prefix's root is the most recently used of its blocks.
        for (i, &(k, parent)) in keys.iter().enumerate().rev() {
            let block = seq.blocks[i];
            self.tick += 1;
            let tick = self.tick;
            if let Some(e) = self.entries.get_mut(&k) {
                pool.unref(block);
                self.lru.remove(&e.tick);
                e.tick = tick;
                self.lru.insert(tick, k);
                continue;
            }
            let mut toks = [0u32; BLOCK_SIZE];
            toks.copy_from_slice(&tokens[i * BLOCK_SIZE..(i + 1) * BLOCK_SIZE]);
            self.entries.insert(
                k,
                Entry {
                    block,
                    parent,
                    tokens: toks,
                    tick,
                },
            );
            self.lru.insert(tick, k);
        }
        seq.blocks.clear();
        seq.len = 0;
        pool.cut(seq, 0);
    }

    /// Frees least recently used blocks until `pool` has `n_free` free blocks; false when
    /// the cache ran empty first.
    pub fn evict(&mut self, pool: &mut KvPool, n_free: usize) -> bool {
        while pool.free_blocks() < n_free {
            let Some((_, k)) = self.lru.pop_first() else {
                return false;
            };
            let e = self.entries.remove(&k).expect("lru and entries agree");
            pool.unref(e.block);
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::KvConfig;
    use gguf::GgmlType;

    fn pool(n_blocks: usize) -> KvPool {
        KvPool::new(KvConfig {
            n_layer: 1,
            n_head_kv: 1,
            head_dim: 32,
            ty: GgmlType::F16,
            n_positions: n_blocks * BLOCK_SIZE,
            window: None,
            state: None,
            records: None,
            empty: 0,
        })
        .unwrap()
    }

    fn filled(pool: &mut KvPool, tokens: &[u32], computed: usize) -> SeqKv {
        let mut s = SeqKv::default();
        pool.reserve(&mut s, tokens.len()).unwrap();
        pool.commit(&mut s, computed);
        s
    }

    #[test]
    fn resumed_prefix_is_reused_block_for_block() {
        let mut pool = pool(8);
        let mut cache = PrefixCache::new();
        let turn1: Vec<u32> = (0..40).collect();
        let mut s = filled(&mut pool, &turn1, 40);
        let blocks = s.blocks.clone();
        cache.give(&mut pool, &mut s, &turn1, 0);
        assert_eq!((cache.n_blocks(), pool.free_blocks()), (2, 6));

        let mut turn2 = turn1.clone();
        turn2.extend(100..120);
        let mut t = SeqKv::default();
        assert_eq!(
            cache.take(&mut pool, &mut t, &turn2, turn2.len() - 1, 0),
            32
        );
        assert_eq!(t.blocks, blocks[..2]);
        assert_eq!(cache.n_blocks(), 0);

        let mut other: Vec<u32> = (0..40).collect();
        other[20] = 999;
        let mut u = SeqKv::default();
        cache.give(&mut pool, &mut t, &turn2, 0);
        assert_eq!(cache.take(&mut pool, &mut u, &other, 40, 0), 16);
    }

    #[test]
    fn uncomputed_and_partial_blocks_go_back_to_the_pool() {
        let mut pool = pool(4);
        let mut cache = PrefixCache::new();
        let toks: Vec<u32> = (0..50).collect();
        let mut s = filled(&mut pool, &toks, 20);
        cache.give(&mut pool, &mut s, &toks, 0);
        assert_eq!((cache.n_blocks(), pool.free_blocks()), (1, 3));
        let mut t = SeqKv::default();
        assert_eq!(cache.take(&mut pool, &mut t, &toks, 15, 0), 0);
    }

    #[test]
    fn eviction_frees_least_recent_and_deepest_first() {
        let mut pool = pool(4);
        let mut cache = PrefixCache::new();
        let a: Vec<u32> = (0..32).collect();
        let b: Vec<u32> = (100..132).collect();
        let mut s = filled(&mut pool, &a, 32);
        cache.give(&mut pool, &mut s, &a, 0);
        let mut s = filled(&mut pool, &b, 32);
        cache.give(&mut pool, &mut s, &b, 0);
        assert_eq!(pool.free_blocks(), 0);
        assert!(cache.evict(&mut pool, 1));
        let mut t = SeqKv::default();
        assert_eq!(
            cache.take(&mut pool, &mut t, &a, 32, 0),
            16,
            "a's deeper block went first"
        );
        pool.release(&mut t);
        assert!(cache.evict(&mut pool, 4));
        assert!(!cache.evict(&mut pool, 5));
    }

    #[test]
    fn duplicate_prefix_keeps_one_copy() {
        let mut pool = pool(4);
        let mut cache = PrefixCache::new();
        let a: Vec<u32> = (0..16).collect();
        let mut s1 = filled(&mut pool, &a, 16);
        let mut s2 = filled(&mut pool, &a, 16);
        cache.give(&mut pool, &mut s1, &a, 0);
        cache.give(&mut pool, &mut s2, &a, 0);
        assert_eq!((cache.n_blocks(), pool.free_blocks()), (1, 3));
    }

    #[test]
    fn a_namespace_sees_only_its_own_prefixes() {
        let mut pool = pool(8);
        let mut cache = PrefixCache::new();
        let toks: Vec<u32> = (0..40).collect();
        let mut s = filled(&mut pool, &toks, 40);
        cache.give(&mut pool, &mut s, &toks, 7);
        let mut t = SeqKv::default();
        assert_eq!(cache.take(&mut pool, &mut t, &toks, 39, SHARED), 0);
        assert_eq!(cache.take(&mut pool, &mut t, &toks, 39, 8), 0);
        assert_eq!(cache.take(&mut pool, &mut t, &toks, 39, 7), 32);
    }
}
