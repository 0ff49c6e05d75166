//! llama-server's stream telemetry: `prompt_progress` reports as the prompt is read
//! (`return_progress`) and the timings so far in every chunk (`timings_per_token`).

use std::time::Instant;

use engine::{FinishReason, Progress, Summary};
use serde_json::{json, Value};

use crate::format::timings;

/// What a streamed answer reports beside its text, and what it has seen to report it.
#[derive(Debug, Default)]
pub struct Telemetry {
    /// `prompt_progress` reports.
    progress: bool,
    /// The timings so far in every chunk.
    per_token: bool,
    /// The prompt's reading as last reported, and when reading began (ms since the request
    /// entered its slot).
    read: Option<(Progress, f64)>,
    /// When the first generated token came, and the tokens generated since.
    first_token: Option<Instant>,
    n_predicted: usize,
}

impl Telemetry {
    pub fn new(progress: bool, per_token: bool) -> Telemetry {
        Telemetry {
            progress,
            per_token,
            ..Telemetry::default()
        }
    }

    /// Takes a report of the prompt's reading; its `prompt_progress` object when the request
    /// asked for them.
    pub fn on_progress(&mut self, p: &Progress) -> Option<Value> {
        let began = self.read.map_or(p.time_ms, |(_, b)| b);
        self.read = Some((*p, began));
        self.progress.then(|| {
            json!({"total": p.total, "cache": p.cache, "processed": p.processed, "time_ms": p.time_ms})
        })
    }

    /// Counts `n` generated tokens.
    pub fn on_tokens(&mut self, n: usize) {
        if n > 0 {
            self.first_token.get_or_insert_with(Instant::now);
        }
        self.n_predicted += n;
    }

    /// The timings so far, when the request asked for them in every chunk: the prompt's
    /// reading from its reports (its time counted from the first), the generation's from the
    /// tokens counted.
    pub fn timings(&self) -> Option<Value> {
        if !self.per_token {
            return None;
        }
        let (prompt_n, prompt_ms, cache_n) = match &self.read {
            Some((p, began)) => (p.processed, p.time_ms - began, p.cache),
            None => (0, 0.0, 0),
        };
        let predicted_ms = self
            .first_token
            .map_or(0.0, |t| t.elapsed().as_secs_f64() * 1e3);
        Some(timings(&Summary {
            slot: 0,
            finish: FinishReason::MaxTokens,
            prompt_n,
            cache_n,
            predicted_n: self.n_predicted,
            prompt_ms,
            predicted_ms,
            draft_n: 0,
            draft_n_accepted: 0,
            grammar_ms: 0.0,
            truncated: false,
        }))
    }
}
