//! `/engine/events`: the engine's state as server-sent events, one `data:` object every
//! `interval_ms` (default 500, 100 to 10000), for the web UI's engine view. Each object:
//!
//! ```text
//! {"t": unix seconds, "sleeping": bool, "queued": n, "n_ctx": slot context,
//!  "slots": [{"id", "state": idle|prompt|generating, "n_prompt", "n_cached", "n_decoded",
//!             "n_past", "draft_n", "draft_accepted", "draft_depth"}],
//!  "kv": {"blocks_total", "blocks_free", "blocks_cached", "block_tokens"},
//!  "totals": {"prompt_tokens", "predicted_tokens", "cached_tokens", "requests_done",
//!             "prefill_s", "decode_s", "verify_s", "draft_s", "sample_s",
//!             "spec_draft_tokens", "spec_accepted_tokens"}}
//! ```
//!
//! Totals count since start; rates and the step-time split are their differences between
//! two events. It reads the engine's snapshot only, so it never wakes a sleeping engine.

use std::convert::Infallible;
use std::time::{Duration, SystemTime};

use axum::extract::{Query, State};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use engine::Snapshot;
use futures_util::stream::{self, Stream};
use serde::Deserialize;
use serde_json::{json, Value};

use crate::error::ApiError;
use crate::state::Shared;
use crate::{ready, Ready};

#[derive(Debug, Deserialize, Default)]
#[serde(default)]
pub struct Every {
    interval_ms: Option<u64>,
}

/// One event's object.
fn state(ready: &Ready, snap: &Snapshot) -> Value {
    let slots: Vec<Value> = snap
        .slots
        .iter()
        .map(|s| {
            let state = match (s.task, s.n_past < s.n_prompt) {
                (None, _) => "idle",
                (Some(_), true) => "prompt",
                (Some(_), false) => "generating",
            };
            json!({
                "id": s.id, "state": state, "n_prompt": s.n_prompt, "n_cached": s.n_cached,
                "n_decoded": s.n_decoded, "n_past": s.n_past, "draft_n": s.draft_n,
                "draft_accepted": s.draft_n_accepted, "draft_depth": s.draft_depth,
            })
        })
        .collect();
    let c = &snap.counters;
    let t = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs_f64();
    json!({
        "t": t,
        "sleeping": snap.sleeping,
        "queued": snap.n_queued,
        "n_ctx": ready.engine.config().slot_ctx(),
        "slots": slots,
        "kv": {
            "blocks_total": snap.kv_blocks_total,
            "blocks_free": snap.kv_blocks_free,
            "blocks_cached": snap.kv_blocks_cached,
            "block_tokens": kv::BLOCK_SIZE,
        },
        "totals": {
            "prompt_tokens": c.tokens.prompt_tokens_total,
            "predicted_tokens": c.tokens.tokens_predicted_total,
            "cached_tokens": c.tokens.cached_tokens_total,
            "requests_done": c.requests.requests_done,
            "prefill_s": c.steps.prefill_seconds_total,
            "decode_s": c.steps.decode_seconds_total,
            "verify_s": c.steps.verify_seconds_total,
            "draft_s": c.steps.draft_seconds_total,
            "sample_s": c.steps.sample_seconds_total,
            "spec_draft_tokens": c.spec.spec_draft_tokens_total,
            "spec_accepted_tokens": c.spec.spec_accepted_tokens_total,
        },
    })
}

/// The stream of the engine's state.
pub async fn events(
    State(s): State<Shared>,
    Query(every): Query<Every>,
) -> Result<Sse<impl Stream<Item = Result<SseEvent, Infallible>>>, ApiError> {
    ready(&s)?;
    let ms = every.interval_ms.unwrap_or(500);
    if !(100..=10_000).contains(&ms) {
        return Err(ApiError::invalid(
            "interval_ms",
            format!("interval_ms must be between 100 and 10000, got {ms}"),
        ));
    }
    let ticks = stream::unfold((s, true), move |(s, first)| async move {
        if !first {
            tokio::time::sleep(Duration::from_millis(ms)).await;
        }
        let r = ready(&s).ok()?;
        let snap = r.engine.snapshot().await.ok()?;
        let ev = SseEvent::default().data(state(r, &snap).to_string());
        Some((Ok(ev), (s, false)))
    });
    Ok(Sse::new(ticks).keep_alive(KeepAlive::default()))
}
