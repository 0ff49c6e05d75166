//! The host-memory tier of the prefix cache (`--cache-ram`, [`kv::HostCache`]): what a
//! finished or preempted sequence computed is copied there as the pool's prefix cache takes
//! it, and a new sequence's prefix is read back from there past what the pool still holds.

use kv::{HostCache, KvConfig, BLOCK_SIZE};

use super::{Engine, Sequence};
use crate::Executor;

/// The host tier for a pool shaped `kv` and a cap of `mib` MiB: none when the cap is 0,
/// the model is split, or a layer keeps less than every position in the pool's blocks.
pub(super) fn host_cache(kv: &KvConfig, mib: usize, split: bool) -> Option<HostCache> {
    let whole = kv.window.is_none() && kv.state.is_none() && kv.records.is_none();
    (mib > 0 && !split && whole).then(|| HostCache::new(mib << 20))
}

/// Copies `seq`'s full computed blocks that `host` lacks into it.
pub(super) fn spill(exec: &mut Executor, host: &mut HostCache, seq: &Sequence) {
    let n = seq.kv.len().min(seq.tokens.len()) / BLOCK_SIZE;
    let blocks = host.blocks(&seq.tokens, n, seq.cache_namespace);
    for (i, (k, parent, held)) in blocks.into_iter().enumerate() {
        if !held {
            let mut data = Vec::new();
            exec.read_kv_block(seq.kv.blocks()[i], &mut data);
            let tokens = &seq.tokens[i * BLOCK_SIZE..(i + 1) * BLOCK_SIZE];
            host.insert(k, parent, tokens, data);
        }
    }
}

impl Engine {
    /// Extends the prefix `slot`'s sequence holds (whole blocks, short of its last token)
    /// with the blocks the host tier holds after it, written into fresh blocks of the pool
    /// (the prefix cache giving up blocks for them if it must). Returns the positions it
    /// holds.
    pub(super) fn read_back(&mut self, slot: usize) -> usize {
        let a = &mut self.slots[slot].as_mut().expect("slot is active").seq;
        let held = a.kv.len();
        let Some(host) = self.host.as_mut().filter(|_| held.is_multiple_of(BLOCK_SIZE)) else {
            return held;
        };
        let max = a.tokens.len() - 1;
        let from = held / BLOCK_SIZE;
        let data: Vec<Vec<u8>> = host
            .chain(&a.tokens, max, a.cache_namespace, from)
            .into_iter()
            .map(<[u8]>::to_vec)
            .collect();
        if data.is_empty() {
            return held;
        }
        let len = (from + data.len()) * BLOCK_SIZE;
        let pool = self.exec.kv_mut();
        if pool.reserve(&mut a.kv, len).is_err() {
            self.cache.evict(pool, data.len());
            if pool.reserve(&mut a.kv, len).is_err() {
                return held;
            }
        }
        for (i, d) in data.iter().enumerate() {
            let block = a.kv.blocks()[from + i];
            self.exec.write_kv_block(block, d);
        }
        self.exec.kv_mut().commit(&mut a.kv, len);
        len
    }
}
