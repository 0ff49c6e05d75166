//! The host-memory tier of the prefix cache (`--cache-ram`, [`kv::HostCache`]) and its disk
//! tier (`--cache-dir`, [`DiskCache`]): what a finished or preempted sequence computed is
//! copied there as the pool's prefix cache takes it, and a new sequence's prefix is read
//! back from there past what the pool still holds. With recurrent layers a block's bytes are
//! followed by the states' snapshot after it where the pool has one, and a prefix is read
//! back up to its last block with a snapshot (which the sequence's state slot then loads).
//! With windowed layers (sliding windows, records' recent parts) a block's bytes are
//! followed by its companion's where it has one, and a prefix is read back as far as the
//! companions of its last window come with it (or are still in the pool).

use kv::{HostCache, KvConfig, BLOCK_SIZE};

use super::disk_tier::DiskCache;
use super::persist::write_saved;
use super::{Engine, Sequence};
use crate::Executor;

/// Whether a pool shaped `kv` can use the tiers: a model not split, whose recurrent states
/// (if any) have snapshots and keep no window beside them.
pub(super) fn tiers_fit(kv: &KvConfig, split: bool) -> bool {
    let snapshots = kv.state.is_none_or(|s| s.n_snaps > 0);
    !split && snapshots && !(kv.state.is_some() && kv.window.is_some())
}

/// The sizes a block's bytes in the tiers can have: its KV's, and with recurrent layers
/// its KV's followed by a snapshot of the states, with windowed layers by its companion's.
fn block_sizes(kv: &KvConfig) -> Vec<usize> {
    let size = kv.full_block_bytes();
    let mut sizes = vec![size];
    sizes.extend(kv.state.map(|s| size + s.snapshot_bytes()));
    sizes.extend(kv.window.map(|_| size + kv.windowed_block_bytes()));
    sizes
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
        let block = seq.kv.blocks()[i];
        exec.read_kv_block(block, &mut data);
        if let Some(c) = exec.kv().companion_of(block) {
            exec.device_mut().kv_read_companion(c, &mut data);
        }
        if let Some(snap) = exec.kv().snapshot_of(block) {
            exec.device_mut().state_read(snap, &mut data);
        }
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
        let sizes = block_sizes(self.exec.kv().config());
        let size = sizes[0];
        let mut data: Vec<Vec<u8>> = Vec::new();
        let blocks = host.blocks(&a.tokens, n_max, a.cache_namespace);
        for (i, (k, parent, in_ram)) in blocks.into_iter().enumerate().skip(held / BLOCK_SIZE) {
            let tokens = &a.tokens[i * BLOCK_SIZE..(i + 1) * BLOCK_SIZE];
            let block = match in_ram {
                true => host.get(k).map(<[u8]>::to_vec),
                false => self
                    .disk
                    .as_ref()
                    .and_then(|d| d.read(k, parent, tokens, &sizes)),
            };
            let Some(block) = block else { break };
            if !in_ram {
                host.insert(k, parent, tokens, block.clone());
            }
            data.push(block);
        }
        let from = held / BLOCK_SIZE;
        let cfg = self.exec.kv().config();
        if cfg.state.is_some() {
            let last = data.iter().rposition(|d| d.len() > size);
            data.truncate(last.map_or(0, |l| l + 1));
        }
        if cfg.window.is_some() {
            let pool = self.exec.kv();
            let kept = |i: usize| match i.checked_sub(from) {
                Some(j) => data[j].len() > size,
                None => pool.companion_of(a.kv.blocks()[i]).is_some(),
            };
            let whole = |n: usize| (n - cfg.last_window_blocks(n)..n).all(kept);
            let m = (1..=data.len()).rev().find(|&m| whole(from + m));
            data.truncate(m.unwrap_or(0));
        }
        if data.is_empty() {
            return held;
        }
        let n = from + data.len();
        // The companions of the last window's blocks read back (those in the pool have theirs).
        let fresh = (n - cfg.last_window_blocks(n)).max(from) - from;
        let window: Vec<u8> = data[fresh..]
            .iter()
            .flat_map(|d| &d[size..])
            .copied()
            .collect();
        let len = n * BLOCK_SIZE;
        let pool = self.exec.kv_mut();
        if pool.reserve(&mut a.kv, len).is_err() {
            self.cache.evict(pool, data.len());
            if pool.reserve(&mut a.kv, len).is_err() {
                return held;
            }
        }
        let blocks: Vec<&[u8]> = data.iter().map(|d| &d[..size]).collect();
        let state = match self.exec.kv().config().state {
            Some(_) => &data.last().expect("not empty")[size..],
            None => &[],
        };
        match write_saved(&mut self.exec, &mut a.kv, from, &blocks, &window, state) {
            Ok(()) => len,
            Err(_) => {
                // No room for the window: what the sequence needed of it may be let go, so
                // it starts again.
                self.exec.kv_mut().release(&mut a.kv);
                0
            }
        }
    }
}
