//! A drafter for tests: it proposes from a known token sequence, wrong where told.

use super::{Draft, DraftJob, Proposer};

/// Proposes the continuation of the first of `scripts` (whole expected sequences: prompt
/// then output) that the sequence is a prefix of, and nothing when there is none. Every
/// `wrong_every`-th position (counted from the start of the sequence; 0: never), and every
/// position before `wrong_until`, is proposed as a different token, so that verification
/// must reject there and roll back.
///
/// It keeps, as a draft model does, what it would have computed for each slot (the
/// sequence it was given and its drafts but the last): the tokens past the common prefix
/// of that and the sequence are what it is [`Proposer::behind`] on (catching up is free
/// here), so that the policy pauses and resumes it as it would a draft model.
#[derive(Debug, Clone)]
pub struct Scripted {
    scripts: Vec<Vec<u32>>,
    wrong_every: usize,
    wrong_until: usize,
    seen: Vec<Vec<u32>>,
}

impl Scripted {
    pub fn new(scripts: Vec<Vec<u32>>, wrong_every: usize, wrong_until: usize) -> Scripted {
        Scripted {
            scripts,
            wrong_every,
            wrong_until,
            seen: Vec::new(),
        }
    }
}

impl Proposer for Scripted {
    fn name(&self) -> &str {
        "scripted"
    }

    fn propose(
        &mut self,
        jobs: &[DraftJob],
        out: &mut [Draft],
        _log: &mut super::DraftLog,
    ) -> crate::Result<()> {
        for (job, d) in jobs.iter().zip(out) {
            let len = job.tokens.len();
            if let Some(script) = self.scripts.iter().find(|s| s.starts_with(job.tokens)) {
                for (pos, &t) in script.iter().enumerate().take(len + job.n_max).skip(len) {
                    let wrong = pos < self.wrong_until
                        || self.wrong_every > 0 && pos % self.wrong_every == 0;
                    d.tokens.push(if wrong { t ^ 1 } else { t });
                    d.confidence.push(1.0);
                }
            }
            if self.seen.len() <= job.slot {
                self.seen.resize(job.slot + 1, Vec::new());
            }
            let computed = d.tokens.len().saturating_sub(1);
            self.seen[job.slot] = [job.tokens, &d.tokens[..computed]].concat();
        }
        Ok(())
    }

    fn release(&mut self, slot: usize) {
        if let Some(s) = self.seen.get_mut(slot) {
            s.clear();
        }
    }

    fn behind(&self, slot: usize, tokens: &[u32]) -> usize {
        let seen = self.seen.get(slot).map_or(&[][..], Vec::as_slice);
        let kept = seen.iter().zip(tokens).take_while(|(a, b)| a == b).count();
        tokens.len() - kept.min(tokens.len().saturating_sub(1))
    }
}
