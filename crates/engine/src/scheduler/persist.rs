//! Slot save, restore and erase (llama-server's `/slots/{id}?action=...`). A slot holds a
//! request's KV only while the request runs; then its full blocks go to the prefix cache.
//! So a slot's saved state is the cached prefix of the last request it served: its tokens
//! (whole blocks) and those blocks' bytes. Restoring puts them back in the prefix cache,
//! where the next request with that prefix finds them; erasing drops them. Each is done
//! within the namespace the caller names: another key's prompts are neither saved nor
//! erased.

use kv::{KvConfig, SeqKv, BLOCK_SIZE};

use super::Engine;

/// A slot's cached prefix, saved: tokens of whole blocks, the pool's shape, and the blocks'
/// bytes ([`device::Device::kv_read_block`]'s layout, block after block).
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
        if self.exec.kv().config().state.is_some() && !matches!(op, SlotOp::Erase) {
            return Err("this model's recurrent layers keep a state, not a prefix's KV blocks: its slots cannot be saved or restored yet".into());
        }
        if self.exec.kv().config().window.is_some() && !matches!(op, SlotOp::Erase) {
            return Err("this model's sliding-window layers keep only their last window, not a prefix's whole KV: saving and restoring slots needs --swa-full".into());
        }
        let last = self.last[slot]
            .as_ref()
            .filter(|l| l.1 == ns)
            .map(|l| l.0.clone());
        match op {
            SlotOp::Save => {
                let tokens =
                    last.ok_or_else(|| format!("slot {slot} has no cached prompt of this key"))?;
                let blocks = self.cache.blocks(&tokens, tokens.len(), ns);
                let mut data = Vec::new();
                for &b in &blocks {
                    self.exec.read_kv_block(b, &mut data);
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
                if saved.kv != here
                    || saved.tokens.len() % BLOCK_SIZE != 0
                    || saved.data.len() != n_blocks * bytes
                {
                    return Err(format!(
                        "the saved KV ({:?}, {} tokens, {} bytes) does not fit this server's pool ({here:?})",
                        saved.kv,
                        saved.tokens.len(),
                        saved.data.len()
                    ));
                }
                let mut seq = SeqKv::default();
                let pool = self.exec.kv_mut();
                if pool.reserve(&mut seq, saved.tokens.len()).is_err() {
                    self.cache.evict(self.exec.kv_mut(), n_blocks);
                    self.exec
                        .kv_mut()
                        .reserve(&mut seq, saved.tokens.len())
                        .map_err(|e| format!("no room for the saved KV: {e}"))?;
                }
                for (&b, chunk) in seq
                    .blocks()
                    .to_vec()
                    .iter()
                    .zip(saved.data.chunks_exact(bytes))
                {
                    self.exec.write_kv_block(b, chunk);
                }
                let pool = self.exec.kv_mut();
                pool.commit(&mut seq, saved.tokens.len());
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
