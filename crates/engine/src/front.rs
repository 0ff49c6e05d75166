//! The blocks before the engine's model stage, when they run elsewhere: a split model's
//! box holds the embeddings and blocks `0..L` and the engine runs `L..n` and the head.

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
