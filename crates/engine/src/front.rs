//! The blocks before the engine's model stage, when they run elsewhere: a split model's
//! box holds the embeddings and blocks `0..L` and the engine runs `L..n` and the head.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use device::Row;
use kv::SeqKv;

use crate::{Enter, Executor, Out};

/// The first stage of a split model, driven by the engine step by step. Sessions are the
/// engine's task ids; a session's rows come together, in ascending positions that follow
/// what the front holds for it. `drafts_from` names, per session whose rows end in drafts,
/// the position of the first ([`kv::SeqKv::uncertain_from`]): a later `truncate` may cut
/// them back, so a recurrent state keeps its checkpoint there.
pub trait Front: Send {
    /// Writes the boundary states of `rows` (`(session, pos, token)`) into `hidden`
    /// (`[rows, n_embd]`), the rows of `images` (indices into `rows`) entering as their
    /// embeddings, or says why it could not (a front that reads no images says so).
    fn forward(
        &mut self,
        rows: &[(u64, usize, u32)],
        drafts_from: &[(u64, usize)],
        images: &[crate::Placed<'_>],
        hidden: &mut [f32],
    ) -> Result<(), String>;
    /// Has the front start on `rows` now, ahead of the `forward` of the same rows, so that
    /// it computes them while the engine finishes another step.
    fn submit(
        &mut self,
        rows: &[(u64, usize, u32)],
        drafts_from: &[(u64, usize)],
    ) -> Result<(), String>;
    /// `session` keeps exactly positions `0..len` (the rest were rejected drafts): what its
    /// memory cannot keep (a state short of its checkpoint) the front computes again
    /// ([`FrontSeq::truncate`]). An error leaves the session's positions unknown.
    fn truncate(&mut self, session: u64, len: usize) -> Result<(), String>;
    /// `session` is over; what the front holds for it is freed.
    fn release(&mut self, session: u64) -> Result<(), String>;
    /// Connects again after a failure; the front then holds no session, and every live one
    /// is replayed before the step is retried.
    fn reconnect(&mut self) -> Result<(), String>;
    /// Recomputes rows computed before (a session's committed positions, after a
    /// reconnect), checking each row's boundary state against the one recorded the first
    /// time: a difference is an error, never a silently different continuation.
    fn replay(&mut self, rows: &[(u64, usize, u32)]) -> Result<(), String>;
    /// How long the engine keeps trying to reconnect before it gives the requests up.
    fn grace(&self) -> Duration;
    /// Whether the slots take turns in two cohorts, one computed here while the front
    /// computes the other's next step (else every slot steps in one batch).
    fn pipelined(&self) -> bool;
    /// Starts computing `tokens` as positions `from..` of `session` ahead of the steps
    /// (a prompt): `forward` then takes those rows' states as they arrive.
    fn stream(&mut self, session: u64, from: usize, tokens: &[u32]) -> Result<(), String>;
    /// Whether `session` has streamed rows not yet taken.
    fn streams(&self, session: u64) -> bool;
    /// Checks that the front is there (while the engine is idle).
    fn heartbeat(&mut self) -> Result<(), String>;
    /// The front's compute intervals since the last call, on this side's clock.
    fn take_busy(&mut self) -> Vec<(Instant, Instant)>;
    /// What crossed the link so far.
    fn stats(&self) -> FrontStats;
}

/// A sequence of a first stage (a [`crate::LocalFront`]'s, a split box's): its KV and the
/// tokens of its positions, from which it computes again what a truncation could not keep,
/// so that it holds the very positions the engine holds.
#[derive(Debug, Default)]
pub struct FrontSeq {
    pub kv: SeqKv,
    /// The token of each position entered (at least `kv.len()` of them).
    tokens: Vec<u32>,
    /// Some rows entered as an image's embeddings: they cannot be computed again.
    pub pictured: bool,
}

impl FrontSeq {
    /// Before a forward of the rows `(pos, token)` of this sequence (following what it
    /// holds), whose drafts start at `drafts_from`.
    pub fn enter(&mut self, rows: impl Iterator<Item = (usize, u32)>, drafts_from: Option<usize>) {
        for (pos, token) in rows {
            self.tokens.truncate(pos);
            self.tokens.push(token);
        }
        if let Some(d) = drafts_from {
            self.kv.uncertain_from(d);
        }
    }

    /// Keeps positions `0..len` (all it holds when fewer): what [`Executor::truncate`]
    /// could not keep (a state short of its checkpoint, a window lost) is computed again
    /// from the recorded tokens, `n_ubatch` rows a forward; returns how many positions that
    /// was. An error (a pictured sequence to compute again, a failed forward) leaves it
    /// empty.
    pub fn truncate(&mut self, exec: &mut Executor, len: usize) -> crate::Result<usize> {
        let len = len.min(self.kv.len());
        let kept = exec.truncate(&mut self.kv, len);
        if kept < len && self.pictured {
            exec.release(&mut self.kv);
            return Err(crate::Error::Config(
                "a sequence with images cannot be computed again from its tokens".into(),
            ));
        }
        let ub = exec.n_ubatch();
        for from in (kept..len).step_by(ub) {
            let to = (from + ub).min(len);
            let rows: Vec<Row> = (from..to).map(|pos| Row { pos, seq: 0 }).collect();
            let tokens = Enter::Tokens(&self.tokens[from..to]);
            if let Err(e) = exec.forward(&mut [&mut self.kv], &rows, tokens, Out::Nothing) {
                exec.release(&mut self.kv);
                return Err(e);
            }
        }
        Ok(len - kept)
    }
}

/// Totals of a front's link since the engine started.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct FrontStats {
    /// Forward requests answered, and their rows.
    pub requests: u64,
    pub rows: u64,
    pub bytes_sent: u64,
    pub bytes_received: u64,
    /// Seconds the engine waited for forward replies (the box computing, plus the link).
    pub wait_seconds: f64,
    /// Seconds the box says it computed them for.
    pub compute_seconds: f64,
}

/// Where a split model's box stands, as the engine last saw it (an `AtomicU8` shared with
/// the handle).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum FrontState {
    /// Connected (or no box: the model is whole).
    Up = 0,
    /// Lost, and being reconnected within the grace window; requests wait.
    Recovering = 1,
    /// Lost past the grace window: requests get `Unavailable` until it is back.
    Down = 2,
}

impl FrontState {
    pub fn from_u8(v: u8) -> FrontState {
        match v {
            1 => FrontState::Recovering,
            2 => FrontState::Down,
            _ => FrontState::Up,
        }
    }
}

/// How long both stages computed at once: the engine's compute intervals against the
/// front's. Intervals of one side do not overlap each other, so each new interval is
/// intersected with the other side's recent ones and every overlap counts once.
#[derive(Debug, Default)]
pub(crate) struct Overlap {
    head: VecDeque<(Instant, Instant)>,
    front: VecDeque<(Instant, Instant)>,
    /// Seconds both were busy.
    pub both: f64,
}

/// Intervals of one side kept to meet the other side's later ones.
const KEPT: usize = 64;

impl Overlap {
    /// The engine computed from `a` to `b`.
    pub fn head(&mut self, a: Instant, b: Instant) {
        self.both += Self::meet(&self.front, a, b);
        Self::keep(&mut self.head, (a, b));
    }

    /// The front computed from `a` to `b` (clipped to start after its last interval: the
    /// front's times are estimates, and replies read together end together).
    pub fn front(&mut self, a: Instant, b: Instant) {
        let a = self.front.back().map_or(a, |&(_, end)| a.max(end));
        if a < b {
            self.both += Self::meet(&self.head, a, b);
            Self::keep(&mut self.front, (a, b));
        }
    }

    fn meet(others: &VecDeque<(Instant, Instant)>, a: Instant, b: Instant) -> f64 {
        others
            .iter()
            .map(|&(c, d)| d.min(b).saturating_duration_since(c.max(a)).as_secs_f64())
            .sum()
    }

    fn keep(list: &mut VecDeque<(Instant, Instant)>, i: (Instant, Instant)) {
        if list.len() == KEPT {
            list.pop_front();
        }
        list.push_back(i);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overlap_counts_each_shared_second_once() {
        let t = Instant::now();
        let at = |ms: u64| t + Duration::from_millis(ms);
        let mut o = Overlap::default();
        o.head(at(0), at(100));
        o.front(at(50), at(150));
        o.head(at(120), at(200));
        o.front(at(300), at(400));
        assert!((o.both - 0.080).abs() < 1e-9, "{}", o.both);
        // Two front intervals read together: the second starts where the first ended.
        o.head(at(500), at(600));
        o.front(at(560), at(600));
        o.front(at(560), at(600));
        o.front(at(590), at(650));
        assert!((o.both - 0.120).abs() < 1e-9, "{}", o.both);
    }
}
