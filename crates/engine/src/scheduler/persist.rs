//! Slot save, restore and erase (llama-server's `/slots/{id}?action=...`). A slot holds a
//! request's KV only while the request runs; then its full blocks go to the prefix cache.
//! So a slot's saved state is the cached prefix of the last request it served: its tokens
//! (whole blocks) and those blocks' bytes; with windowed layers (sliding windows, records'
//! recent parts), up to where its last window is still kept, whose companions' bytes
//! follow; with recurrent layers, up to its last block with a snapshot of the states, whose
//! bytes follow. Restoring puts them back in the prefix cache,
//! where the next request with that prefix finds them; erasing drops them. Each is done
//! within the namespace the caller names: another key's prompts are neither saved nor
//! erased.

use kv::{KvConfig, SeqKv, BLOCK_SIZE};

use super::Engine;

/// A slot's cached prefix, saved: tokens of whole blocks, the pool's shape, and the blocks'
/// bytes ([`device::Device::kv_read_block`]'s layout, block after block), then, with a
/// windowed class, the companions of its last window
/// ([`KvConfig::last_window_blocks`], [`device::Device::kv_read_companion`]'s layout), then,
/// with recurrent layers, the states after the last block ([`device::Device::state_read`]'s).
#[derive(Debug, Clone, PartialEq)]
pub struct SavedPrefix {
    pub tokens: Vec<u32>,
    pub kv: KvConfig,
    pub data: Vec<u8>,
}

/// What to do with a slot's cached prefix.
#[derive(Debug)]
pub enum SlotOp {
    Save,
    Restore(Box<SavedPrefix>),
    Erase,
}

/// What was done: the prefix saved, or the positions restored or erased.
#[derive(Debug)]
pub enum SlotDone {
    Saved(Box<SavedPrefix>),
    Restored(usize),
    Erased(usize),
}

impl Engine {
    /// Carries out `op` on slot `slot` in namespace `ns`; the error says why not.
    pub(super) fn slot_op(&mut self, slot: usize, ns: u64, op: SlotOp) -> Result<SlotDone, String> {
        if slot >= self.slots.len() {
            return Err(format!("there is no slot {slot}"));
        }
        if self.slots[slot].is_some() {
            return Err(format!("slot {slot} is processing a request"));
        }
        if self.front.is_some() {
            return Err("a split model keeps no prefix cache to save or restore".into());
        }
        if self.exec.kv().config().state.is_some()
            && !self.exec.kv().snapshots()
            && !matches!(op, SlotOp::Erase)
        {
            return Err("this model's recurrent layers keep a state, and with --ctx-checkpoints 0 no snapshot of it: its slots cannot be saved or restored".into());
        }
        let cfg = self.exec.kv().config();
        if cfg.window.is_some() && cfg.state.is_some() && !matches!(op, SlotOp::Erase) {
            return Err("this model keeps both windows and recurrent states: its slots cannot be saved or restored yet".into());
        }
        let last = self.last[slot]
            .as_ref()
            .filter(|l| l.1 == ns)
            .map(|l| l.0.clone());
        match op {
            SlotOp::Save => {
                let tokens =
                    last.ok_or_else(|| format!("slot {slot} has no cached prompt of this key"))?;
                let mut blocks = self.cache.blocks(&tokens, tokens.len(), ns);
                let kv = self.exec.kv();
                let snap = match kv.config().state {
                    None => None,
                    Some(_) => {
                        let mut back = blocks.iter().enumerate().rev();
                        let last = back.find_map(|(i, &b)| Some((i, kv.snapshot_of(b)?)));
                        let (last, snap) = last.ok_or_else(|| format!("slot {slot}'s cached prompt has no snapshot of its recurrent states to save (it is shorter than a block, or its snapshots were given up)"))?;
                        blocks.truncate(last + 1);
                        Some(snap)
                    }
                };
                if kv.config().window.is_some() {
                    blocks.truncate(kv.usable(&blocks));
                }
                let window = kv.last_window(&blocks);
                let mut data = Vec::new();
                for &b in &blocks {
                    self.exec.read_kv_block(b, &mut data);
                }
                for &c in &window {
                    self.exec.device_mut().kv_read_companion(c, &mut data);
                }
                if let Some(snap) = snap {
                    self.exec.device_mut().state_read(snap, &mut data);
                }
                Ok(SlotDone::Saved(Box::new(SavedPrefix {
                    tokens: tokens[..blocks.len() * BLOCK_SIZE].to_vec(),
                    kv: self.exec.kv().config().clone(),
                    data,
                })))
            }
            SlotOp::Restore(saved) => {
                let here = self.exec.kv().config().clone();
                let n_blocks = saved.tokens.len() / BLOCK_SIZE;
                let bytes = here.full_block_bytes();
                let window = here.last_window_blocks(n_blocks) * here.windowed_block_bytes();
                let state = here.state.map(|s| s.snapshot_bytes());
                if saved.kv != here
                    || saved.tokens.len() % BLOCK_SIZE != 0
                    || saved.data.len() != n_blocks * bytes + window + state.unwrap_or(0)
                    || state.is_some() && n_blocks == 0
                {
                    return Err(format!(
                        "the saved KV ({:?}, {} tokens, {} bytes) does not fit this server's pool ({here:?})",
                        saved.kv,
                        saved.tokens.len(),
                        saved.data.len()
                    ));
                }
                // The restored blocks replace those the cache holds for these tokens, whose
                // window or snapshot may be gone (it keeps its own block of a prefix).
                self.cache.forget(self.exec.kv_mut(), &saved.tokens, ns);
                let mut seq = SeqKv::default();
                let pool = self.exec.kv_mut();
                if pool.reserve(&mut seq, saved.tokens.len()).is_err() {
                    self.cache.evict(self.exec.kv_mut(), n_blocks);
                    self.exec
                        .kv_mut()
                        .reserve(&mut seq, saved.tokens.len())
                        .map_err(|e| format!("no room for the saved KV: {e}"))?;
                }
                let blocks: Vec<&[u8]> = (0..n_blocks)
                    .map(|i| &saved.data[i * bytes..(i + 1) * bytes])
                    .collect();
                let (window, state) = saved.data[n_blocks * bytes..].split_at(window);
                if let Err(e) = write_saved(&mut self.exec, &mut seq, 0, &blocks, window, state) {
                    self.exec.kv_mut().release(&mut seq);
                    return Err(format!("no room for the saved KV: {e}"));
                }
                let pool = self.exec.kv_mut();
                self.cache.give(pool, &mut seq, &saved.tokens, ns);
                self.last[slot] = Some((saved.tokens.clone(), ns));
                Ok(SlotDone::Restored(saved.tokens.len()))
            }
            SlotOp::Erase => {
                let n = match last {
                    Some(tokens) => self.cache.forget(self.exec.kv_mut(), &tokens, ns),
                    None => 0,
                };
                self.last[slot] = None;
                Ok(SlotDone::Erased(n))
            }
        }
    }
}

/// Writes `blocks` (each [`KvConfig::full_block_bytes`]) into `seq`'s blocks from its block
/// `from` on (reserved) and marks them held ([`kv::KvPool::commit_saved`]); with a windowed
/// class, `window` (the companions of those of `blocks` in the last window, in order,
/// [`SavedPrefix`]'s layout) goes to the companions they get, the window's blocks before
/// `from` keeping theirs; where the pool snapshots recurrent states, `state` (a snapshot's
/// bytes) becomes the last one's snapshot. The error: no room for the window.
pub(super) fn write_saved(
    exec: &mut crate::Executor,
    seq: &mut SeqKv,
    from: usize,
    blocks: &[&[u8]],
    window: &[u8],
    state: &[u8],
) -> kv::Result<()> {
    for (i, data) in blocks.iter().enumerate() {
        exec.write_kv_block(seq.blocks()[from + i], data);
    }
    let len = (from + blocks.len()) * BLOCK_SIZE;
    if exec.kv().config().window.is_some() && len > 0 {
        exec.kv_mut().prepare(seq, len, len)?;
        let companions = exec.kv().last_window(&seq.blocks()[..len / BLOCK_SIZE]);
        let written = &companions[companions.len().saturating_sub(blocks.len())..];
        let bytes = exec.kv().config().windowed_block_bytes();
        for (&c, data) in written.iter().zip(window.chunks_exact(bytes)) {
            exec.device_mut().kv_write_companion(c, data);
        }
    }
    if let Some(snap) = exec.kv_mut().commit_saved(seq, len) {
        exec.device_mut().state_write(snap, state);
    }
    Ok(())
}
