//! The host-memory tier of the prefix cache (`--cache-ram`, [`kv::HostCache`]) and its disk
//! tier (`--cache-dir`, [`DiskCache`]): what a finished or preempted sequence computed is
//! copied there as the pool's prefix cache takes it, and a new sequence's prefix is read
//! back from there past what the pool still holds.

use kv::{HostCache, KvConfig, BLOCK_SIZE};

use super::disk_tier::DiskCache;
use super::{Engine, Sequence};
use crate::Executor;

/// Whether a pool shaped `kv` can use the tiers: a model not split whose layers all keep
/// every position in the pool's blocks.
pub(super) fn tiers_fit(kv: &KvConfig, split: bool) -> bool {
    !split && kv.window.is_none() && kv.state.is_none() && kv.records.is_none()
}

/// Copies `seq`'s full computed blocks that the tiers lack into them.
pub(super) fn spill(
    exec: &mut Executor,
    host: &mut HostCache,
    disk: Option<&DiskCache>,
    seq: &Sequence,
) {
    let n = seq.kv.len().min(seq.tokens.len()) / BLOCK_SIZE;
    let blocks = host.blocks(&seq.tokens, n, seq.cache_namespace);
    for (i, (k, parent, held)) in blocks.into_iter().enumerate() {
        let on_disk = disk.is_some_and(|d| d.has(k));
        if held || on_disk && host.cap() == 0 {
            continue;
        }
        let mut data = Vec::new();
        exec.read_kv_block(seq.kv.blocks()[i], &mut data);
        let tokens = &seq.tokens[i * BLOCK_SIZE..(i + 1) * BLOCK_SIZE];
        if let Some(d) = disk.filter(|_| !on_disk) {
            d.write(k, parent, tokens, &data);
        }
        host.insert(k, parent, tokens, data);
    }
}

impl Engine {
    /// Extends the prefix `slot`'s sequence holds (whole blocks, short of its last token)
    /// with the blocks the tiers hold after it, in a row, written into fresh blocks of the
    /// pool (the prefix cache giving up blocks for them if it must). Returns the positions
    /// it holds.
    pub(super) fn read_back(&mut self, slot: usize) -> usize {
        let a = &mut self.slots[slot].as_mut().expect("slot is active").seq;
        let held = a.kv.len();
        let Some(host) = self
            .host
            .as_mut()
            .filter(|_| held.is_multiple_of(BLOCK_SIZE))
        else {
            return held;
        };
        let n_max = (a.tokens.len() - 1) / BLOCK_SIZE;
        let size = self.exec.kv().config().full_block_bytes();
        let mut data: Vec<Vec<u8>> = Vec::new();
        let blocks = host.blocks(&a.tokens, n_max, a.cache_namespace);
        for (i, (k, parent, in_ram)) in blocks.into_iter().enumerate().skip(held / BLOCK_SIZE) {
            let tokens = &a.tokens[i * BLOCK_SIZE..(i + 1) * BLOCK_SIZE];
            let block = match in_ram {
                true => host.get(k).map(<[u8]>::to_vec),
                false => self
                    .disk
                    .as_ref()
                    .and_then(|d| d.read(k, parent, tokens, size)),
            };
            let Some(block) = block else { break };
            if !in_ram {
                host.insert(k, parent, tokens, block.clone());
            }
            data.push(block);
        }
        if data.is_empty() {
            return held;
        }
        let from = held / BLOCK_SIZE;
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
