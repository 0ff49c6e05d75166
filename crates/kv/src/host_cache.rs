//! Prompt prefixes kept in host memory beyond the pool (llama-server's `--cache-ram`):
//! the bytes of full blocks ([`crate::KvConfig::full_block_bytes`] each), by the same chained
//! prefix keys as [`crate::PrefixCache`], so that a conversation whose blocks the pool gave
//! up is read back instead of computed again.
//!
//! The engine copies a finished sequence's full blocks here as it gives them to the prefix
//! cache (those not here yet), and a new sequence whose prefix runs on past what the pool
//! still holds writes the rest back into fresh blocks ([`HostCache::blocks`] names a
//! prefix's blocks, [`HostCache::get`] gives one's bytes). Only pools whose every layer keeps
//! every position use it (a window, a state or a record layer's recent part is not in a
//! block's bytes). Least recently used blocks go first when the bytes would pass the cap.
//!
//! ```text
//! tokens       [t0 .. t15] [t16 .. t31] [t32 .. t47] [t48 ..]
//! pool cache   b7          (evicted)
//! host cache   k0          k1           k2
//! a new turn:  shares b7, writes k1 and k2 into fresh blocks, computes from 48
//! ```

use std::collections::{BTreeMap, HashMap};

use crate::prefix::key;
use crate::BLOCK_SIZE;

struct Entry {
    parent: u64,
    tokens: [u32; BLOCK_SIZE],
    data: Vec<u8>,
    tick: u64,
}

/// See the module doc.
pub struct HostCache {
    cap: usize,
    bytes: usize,
    entries: HashMap<u64, Entry>,
    /// tick → key; the smallest tick goes first.
    lru: BTreeMap<u64, u64>,
    tick: u64,
}

impl HostCache {
    /// A cache of at most `cap` bytes.
    pub fn new(cap: usize) -> Self {
        HostCache {
            cap,
            bytes: 0,
            entries: HashMap::new(),
            lru: BTreeMap::new(),
            tick: 0,
        }
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// The most bytes it holds.
    pub fn cap(&self) -> usize {
        self.cap
    }

    /// Per full block of the first `n_blocks` of `tokens` in namespace `ns`: its key, its
    /// parent's, and whether the cache holds it.
    pub fn blocks(&self, tokens: &[u32], n_blocks: usize, ns: u64) -> Vec<(u64, u64, bool)> {
        let mut parent = ns;
        let chunks = tokens.chunks_exact(BLOCK_SIZE).take(n_blocks);
        chunks
            .map(|chunk| {
                let k = key(parent, chunk);
                let held = self.matches(k, parent, chunk);
                let out = (k, parent, held);
                parent = k;
                out
            })
            .collect()
    }

    fn matches(&self, k: u64, parent: u64, chunk: &[u32]) -> bool {
        self.entries
            .get(&k)
            .is_some_and(|e| e.parent == parent && e.tokens[..] == *chunk)
    }

    /// Keeps `data`, the bytes of the block of `tokens` (one block's) whose key is `k` and
    /// whose parent's is `parent`, giving up the least recently used blocks for room; a
    /// block larger than the cap is not kept.
    pub fn insert(&mut self, k: u64, parent: u64, tokens: &[u32], data: Vec<u8>) {
        if data.len() > self.cap || self.entries.contains_key(&k) {
            return;
        }
        while self.bytes + data.len() > self.cap {
            let (_, old) = self.lru.pop_first().expect("bytes are held by entries");
            let e = self.entries.remove(&old).expect("lru and entries agree");
            self.bytes -= e.data.len();
        }
        self.tick += 1;
        self.bytes += data.len();
        self.lru.insert(self.tick, k);
        let mut toks = [0u32; BLOCK_SIZE];
        toks.copy_from_slice(tokens);
        let entry = Entry {
            parent,
            tokens: toks,
            data,
            tick: self.tick,
        };
        self.entries.insert(k, entry);
    }

    /// The bytes of the block keyed `k`, which becomes the most recently used.
    pub fn get(&mut self, k: u64) -> Option<&[u8]> {
        let e = self.entries.get_mut(&k)?;
        self.tick += 1;
        self.lru.remove(&e.tick);
        e.tick = self.tick;
        self.lru.insert(self.tick, k);
        Some(&e.data)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_are_kept_by_prefix_and_the_least_recent_goes_first() {
        let mut c = HostCache::new(3 * 10);
        let a: Vec<u32> = (0..64).collect();
        let blocks = c.blocks(&a, 4, 7);
        assert!(blocks.iter().all(|b| !b.2));
        for (i, &(k, parent, _)) in blocks.iter().enumerate().take(3) {
            c.insert(k, parent, &a[i * 16..(i + 1) * 16], vec![i as u8; 10]);
        }
        assert_eq!(c.bytes(), 30);
        let held = |c: &HostCache, t: &[u32], ns| -> Vec<bool> {
            c.blocks(t, 4, ns).iter().map(|b| b.2).collect()
        };
        assert_eq!(held(&c, &a, 7), [true, true, true, false]);
        assert_eq!(held(&c, &a, 8), [false; 4], "another namespace");
        let mut b = a.clone();
        b[20] = 999;
        assert_eq!(
            held(&c, &b, 7),
            [true, false, false, false],
            "another second block"
        );
        assert_eq!(c.get(blocks[0].0), Some(&[0u8; 10][..]));
        c.get(blocks[2].0);
        c.insert(blocks[3].0, blocks[3].1, &a[48..64], vec![3; 10]);
        assert_eq!(c.bytes(), 30);
        assert_eq!(
            held(&c, &a, 7),
            [true, false, true, true],
            "the least recent went"
        );
        c.insert(1, 0, &a[..16], vec![0; 31]);
        assert_eq!(c.bytes(), 30, "larger than the cap: not kept");
    }
}
