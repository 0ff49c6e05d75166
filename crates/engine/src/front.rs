//! The blocks before the engine's model stage, when they run elsewhere: a split model's
//! box holds the embeddings and blocks `0..L` and the engine runs `L..n` and the head.

use std::time::Duration;

use model::Model;

/// The first stage of a split model, driven by the engine step by step. Sessions are the
/// engine's task ids; a session's rows come together, in ascending positions that follow
/// what the front holds for it.
pub trait Front: Send {
    /// Writes the boundary states of `rows` (`(session, pos, token)`) into `hidden`
    /// (`[rows, n_embd]`), or says why it could not.
    fn forward(&mut self, rows: &[(u64, usize, u32)], hidden: &mut [f32]) -> Result<(), String>;
    /// `session` keeps positions `0..len` (the rest were rejected drafts).
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
    /// What crossed the link so far.
    fn stats(&self) -> FrontStats;
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

/// The hidden states entering the engine's stage for `rows`: from `front` when the model is
/// split, else the model's own embeddings.
pub(crate) fn enter(
    front: &mut Option<Box<dyn Front>>,
    model: &Model,
    rows: &[(u64, usize, u32)],
    hidden: &mut [f32],
) -> Result<(), String> {
    match front {
        Some(f) => f.forward(rows, hidden),
        None => {
            let tokens: Vec<u32> = rows.iter().map(|r| r.2).collect();
            model.embed(&tokens, hidden).map_err(|e| e.to_string())
        }
    }
}
