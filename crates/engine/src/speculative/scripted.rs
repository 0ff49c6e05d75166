//! A drafter for tests: it proposes from a known token sequence, wrong where told.

use super::{Draft, DraftJob, Proposer};

/// Proposes the continuation of the first of `scripts` (whole expected sequences: prompt
/// then output) that the sequence is a prefix of, and nothing when there is none. Every `wrong_every`-th
/// position (counted from the start of the sequence; 0: never) is proposed as a different
/// token, so that verification must reject there and roll back.
#[derive(Debug, Clone)]
pub struct Scripted {
    pub scripts: Vec<Vec<u32>>,
    pub wrong_every: usize,
}

impl Proposer for Scripted {
    fn name(&self) -> &str {
        "scripted"
    }

    fn propose(
        &mut self,
        jobs: &[DraftJob],
        out: &mut [Draft],
        _steps: &mut Vec<(usize, std::time::Duration)>,
    ) -> crate::Result<()> {
        for (job, d) in jobs.iter().zip(out) {
            let len = job.tokens.len();
            let Some(script) = self.scripts.iter().find(|s| s.starts_with(job.tokens)) else {
                continue;
            };
            for (pos, &t) in script.iter().enumerate().take(len + job.n_max).skip(len) {
                let wrong = self.wrong_every > 0 && pos % self.wrong_every == 0;
                d.tokens.push(if wrong { t ^ 1 } else { t });
                d.confidence.push(1.0);
            }
        }
        Ok(())
    }

    fn release(&mut self, _slot: usize) {}
}
