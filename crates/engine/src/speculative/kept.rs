//! What a drafter computing over a KV pool of its own keeps per slot.

use kv::SeqKv;

use super::DraftJob;
use crate::Executor;

/// Per slot: the drafter's KV sequence, the tokens whose rows it holds, and whether the
/// slot's request ended (its KV is then kept for the slot's next request, which catches
/// up only past the prefix they share, until another slot needs the room).
pub(super) struct KeptKv {
    pub seqs: Vec<SeqKv>,
    pub seen: Vec<Vec<u32>>,
    ended: Vec<bool>,
}

impl KeptKv {
    pub fn new(n_slots: usize) -> KeptKv {
        KeptKv {
            seqs: (0..n_slots).map(|_| SeqKv::default()).collect(),
            seen: vec![Vec::new(); n_slots],
            ended: vec![false; n_slots],
        }
    }

    /// Tokens of `tokens` whose rows slot `slot` keeps: the common prefix with what it
    /// computed, short of the last token (whose logits drafting needs).
    pub fn kept(&self, slot: usize, tokens: &[u32]) -> usize {
        let common = self.seen[slot].iter().zip(tokens);
        let common = common.take_while(|(a, b)| a == b).count();
        common.min(tokens.len().saturating_sub(1))
    }

    /// Rolls slot `slot` back to [`KeptKv::kept`] of `tokens` on `ctx`; returns how many
    /// positions it keeps.
    pub fn sync(&mut self, ctx: &mut Executor, slot: usize, tokens: &[u32]) -> usize {
        let common = self.kept(slot, tokens);
        let kept = ctx.truncate(&mut self.seqs[slot], common);
        self.seen[slot].truncate(kept);
        kept
    }

    /// The slot's request ended.
    pub fn end(&mut self, slot: usize) {
        self.ended[slot] = true;
    }

    /// Frees the KV kept for ended requests when `ctx`'s pool may lack room for `jobs`
    /// (their `rows` to catch up, their drafts, a partly filled block each): a unified
    /// pool lets one slot's kept KV take what another slot needs.
    pub fn make_room(&mut self, ctx: &mut Executor, jobs: &[DraftJob], rows: usize) {
        for job in jobs {
            self.ended[job.slot] = false;
        }
        let wanted = rows + jobs.iter().map(|j| j.n_max + kv::BLOCK_SIZE).sum::<usize>();
        if ctx.kv().free_blocks() * kv::BLOCK_SIZE >= wanted {
            return;
        }
        for slot in (0..self.seqs.len()).filter(|&s| self.ended[s]) {
            ctx.release(&mut self.seqs[slot]);
            self.seen[slot].clear();
        }
    }
}
