//! Prompt lookup: the tokens that followed an earlier occurrence of the sequence's tail.

use super::{Draft, DraftJob, Proposer};

/// Proposes, for a sequence ending in the n-gram `g` (n from `max_n` down to `min_n`),
/// the tokens that followed the latest earlier occurrence of `g` in the same sequence
/// (prompt and output so far). Nothing is carried across requests. Deterministic: every
/// token has a one-hot distribution.
///
/// Example: tokens `[5 6 7 9 5 6]` with n = 2 find `[5 6]` at 0 and propose `[7 9 5 6]`
/// (up to `n_max`).
#[derive(Debug, Clone)]
pub struct Ngram {
    pub min_n: usize,
    pub max_n: usize,
}

impl Default for Ngram {
    fn default() -> Self {
        Ngram { min_n: 2, max_n: 4 }
    }
}

impl Ngram {
    fn lookup<'t>(&self, t: &'t [u32], n_max: usize) -> &'t [u32] {
        let len = t.len();
        for n in (self.min_n.max(1)..=self.max_n).rev() {
            if len <= n {
                continue;
            }
            let tail = &t[len - n..];
            if let Some(s) = (0..len - n).rev().find(|&s| &t[s..s + n] == tail) {
                return &t[s + n..(s + n + n_max).min(len)];
            }
        }
        &[]
    }
}

impl Proposer for Ngram {
    fn name(&self) -> &str {
        "ngram"
    }

    fn propose(
        &mut self,
        jobs: &[DraftJob],
        out: &mut [Draft],
        _log: &mut super::DraftLog,
    ) -> crate::Result<()> {
        for (job, d) in jobs.iter().zip(out) {
            let found = self.lookup(job.tokens, job.n_max);
            d.tokens.extend_from_slice(found);
            d.confidence.resize(found.len(), 1.0);
        }
        Ok(())
    }

    fn release(&mut self, _slot: usize) {}

    fn offers(&self, _slot: usize, tokens: &[u32], n_max: usize) -> usize {
        self.lookup(tokens, n_max).len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proposes_what_followed_the_latest_match() {
        let g = Ngram::default();
        assert_eq!(g.lookup(&[5, 6, 7, 9, 5, 6], 8), &[7, 9, 5, 6]);
        assert_eq!(g.lookup(&[5, 6, 7, 9, 5, 6], 2), &[7, 9]);
        assert_eq!(g.lookup(&[1, 2, 3, 1, 2, 4, 1, 2], 1), &[4]);
        assert_eq!(g.lookup(&[1, 2, 3, 4], 4), &[] as &[u32]);
        assert_eq!(g.lookup(&[3, 1, 2, 8, 0, 1, 2, 3, 1, 2], 3), &[8, 0, 1]);
        assert_eq!(g.offers(0, &[5, 6, 7, 9, 5, 6], 3), 3);
        assert_eq!(g.offers(0, &[1, 2, 3, 4], 4), 0);
    }
}
