//! Routes that do not generate: health, models, props, slots, metrics, tokenize,
//! detokenize, apply-template.

use std::fmt::Write;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::error::ApiError;
use crate::state::{AppState, Shared};
use crate::validate::{parse, RawRequest};
use crate::{body, off_runtime, ready};

pub async fn health(State(s): State<Shared>) -> Result<Json<Value>, ApiError> {
    ready(&s)?;
    Ok(Json(json!({"status": "ok"})))
}

/// 200 when every stage is there: the model is loaded and, split, its box connected
/// (/health only says the process is alive and loaded).
pub async fn ready_route(State(s): State<Shared>) -> Result<Json<Value>, ApiError> {
    let r = ready(&s)?;
    match r.engine.front_state() {
        engine::FrontState::Up => Ok(Json(json!({"status": "ok"}))),
        state => Err(ApiError::box_down(format!(
            "the box of this split model is not there ({state:?})"
        ))),
    }
}

/// The served model as OpenAI's model object.
fn model_object(s: &AppState, r: &crate::Ready) -> Value {
    json!({
        "id": r.model_id,
        "aliases": r.aliases,
        "tags": s.config.tags,
        "object": "model",
        "created": s.created,
        "owned_by": "tandem",
        "meta": {
            "n_vocab": r.n_vocab,
            "n_ctx_train": r.n_ctx_train,
            "n_params": r.n_params,
            "size": r.model_bytes,
        },
    })
}

pub async fn models(State(s): State<Shared>) -> Result<Json<Value>, ApiError> {
    let r = ready(&s)?;
    Ok(Json(
        json!({"object": "list", "data": [model_object(&s, r)]}),
    ))
}

/// `/v1/models/{id}`: the served model by any of its names, or 404 naming the id asked for.
pub async fn model(
    State(s): State<Shared>,
    axum::extract::Path(id): axum::extract::Path<String>,
) -> Result<Json<Value>, ApiError> {
    let r = ready(&s)?;
    if !r.aliases.contains(&id) {
        return Err(ApiError::not_found(format!(
            "the model '{id}' does not exist (this server serves '{}')",
            r.aliases.join("', '")
        )));
    }
    Ok(Json(model_object(&s, r)))
}

pub async fn props(State(s): State<Shared>) -> Result<Json<Value>, ApiError> {
    let r = ready(&s)?;
    let sleeping = r.engine.snapshot().await?.sleeping;
    let c = r.engine.config();
    let d = &r.defaults;
    Ok(Json(json!({
        "default_generation_settings": {
            "n_ctx": c.slot_ctx(),
            "params": {
                "temperature": d.sampling.temperature,
                "top_k": d.sampling.top_k,
                "top_p": d.sampling.top_p,
                "min_p": d.sampling.min_p,
                "n_predict": d.n_predict.map_or(-1, |n| n as i64),
                "seed": d.seed.unwrap_or(-1),
            },
        },
        "total_slots": c.n_parallel,
        "is_sleeping": sleeping,
        "model_path": s.config.model_path,
        "model_alias": r.model_id,
        "chat_template": r.template_source,
        "modalities": {"vision": r.vision.is_some(), "audio": false},
        "build_info": crate::format::fingerprint(),
        "memory_plan": {
            "weights": r.plan.weights,
            "kv": r.plan.kv,
            "scratch": r.plan.scratch,
            "total": r.plan.total(),
        },
    })))
}

pub async fn slots(State(s): State<Shared>) -> Result<Json<Value>, ApiError> {
    if !s.config.slots {
        return Err(ApiError::not_supported(
            "This server does not support slots endpoint (start it without --no-slots)",
        ));
    }
    let r = ready(&s)?;
    let snap = r.engine.snapshot().await?;
    let n_ctx = r.engine.config().slot_ctx();
    let slots: Vec<Value> = snap
        .slots
        .iter()
        .map(|sl| {
            json!({
                "id": sl.id,
                "id_task": sl.task.map_or(-1, |t| t as i64),
                "n_ctx": n_ctx,
                "is_processing": sl.task.is_some(),
                "n_prompt_tokens": sl.n_prompt,
                "n_cached": sl.n_cached,
                "n_decoded": sl.n_decoded,
                "n_past": sl.n_past,
            })
        })
        .collect();
    Ok(Json(Value::Array(slots)))
}

/// `POST /props`: llama-server changes nothing there either (it answers success with
/// `--props`); here changing the server's properties at run time is refused, as
/// llama-server does without `--props`.
pub async fn change_props() -> ApiError {
    ApiError::not_supported(
        "changing the server's properties at run time is not supported; restart it with other flags",
    )
}

/// Prometheus text: llama.cpp's metric names and vLLM's speculative-decoding counters.
pub async fn metrics(State(s): State<Shared>) -> Result<Response, ApiError> {
    if !s.config.metrics {
        return Err(ApiError::not_supported(
            "This server does not support metrics endpoint (start it with --metrics)",
        ));
    }
    let r = ready(&s)?;
    let snap = r.engine.snapshot().await?;
    let c = &snap.counters;
    let busy = snap.slots.iter().filter(|s| s.task.is_some()).count();
    let rate = |n: f64, secs: f64| if secs > 0.0 { n / secs } else { 0.0 };
    let now = [
        c.tokens.prompt_tokens_total as f64,
        c.tokens.prompt_seconds_total,
        c.tokens.tokens_predicted_total as f64,
        c.tokens.predicted_seconds_total,
    ];
    let before = std::mem::replace(
        &mut *s.scraped.lock().unwrap_or_else(|e| e.into_inner()),
        now,
    );
    let window = |i: usize| now[i] - before[i];
    let used = snap.kv_blocks_total - snap.kv_blocks_free - snap.kv_blocks_cached;
    let kv_tokens: usize = snap.slots.iter().map(|s| s.n_past).sum();
    let metrics: [(&str, &str, &str, f64); 20] = [
        (
            "llamacpp:prompt_tokens_total",
            "counter",
            "Number of prompt tokens processed.",
            c.tokens.prompt_tokens_total as f64,
        ),
        (
            "llamacpp:prompt_tokens_cached_total",
            "counter",
            "Number of prompt tokens reused from the cache (not processed).",
            c.tokens.cached_tokens_total as f64,
        ),
        (
            "llamacpp:prompt_seconds_total",
            "counter",
            "Prompt process time",
            c.tokens.prompt_seconds_total,
        ),
        (
            "llamacpp:tokens_predicted_total",
            "counter",
            "Number of generation tokens processed.",
            c.tokens.tokens_predicted_total as f64,
        ),
        (
            "llamacpp:tokens_predicted_seconds_total",
            "counter",
            "Predict process time",
            c.tokens.predicted_seconds_total,
        ),
        (
            "llamacpp:n_decode_total",
            "counter",
            "Total number of llama_decode() calls",
            c.tokens.n_decode_total as f64,
        ),
        (
            "llamacpp:n_tokens_max",
            "counter",
            "Largest observed n_tokens.",
            c.tokens.n_tokens_max as f64,
        ),
        (
            "llamacpp:spec_decode_num_drafts_total",
            "counter",
            "Number of speculative decoding drafts.",
            c.spec.spec_drafts_total as f64,
        ),
        (
            "llamacpp:spec_decode_num_draft_tokens_total",
            "counter",
            "Number of draft tokens.",
            c.spec.spec_draft_tokens_total as f64,
        ),
        (
            "llamacpp:spec_decode_num_accepted_tokens_total",
            "counter",
            "Number of accepted draft tokens.",
            c.spec.spec_accepted_tokens_total as f64,
        ),
        (
            "llamacpp:n_busy_slots_per_decode",
            "gauge",
            "Average number of busy slots per llama_decode() call",
            if c.tokens.n_decode_total > 0 {
                c.tokens.n_busy_slots_total as f64 / c.tokens.n_decode_total as f64
            } else {
                0.0
            },
        ),
        (
            "llamacpp:prompt_tokens_seconds",
            "gauge",
            "Prompt throughput in tokens/s since the last scrape.",
            rate(window(0), window(1)),
        ),
        (
            "llamacpp:predicted_tokens_seconds",
            "gauge",
            "Generation throughput in tokens/s since the last scrape.",
            rate(window(2), window(3)),
        ),
        (
            "llamacpp:kv_cache_usage_ratio",
            "gauge",
            "KV-cache usage. 1 means 100 percent usage.",
            used as f64 / snap.kv_blocks_total.max(1) as f64,
        ),
        (
            "llamacpp:kv_cache_tokens",
            "gauge",
            "KV-cache tokens.",
            kv_tokens as f64,
        ),
        (
            "llamacpp:requests_processing",
            "gauge",
            "Number of requests processing.",
            busy as f64,
        ),
        (
            "llamacpp:requests_deferred",
            "gauge",
            "Number of requests deferred.",
            snap.n_queued as f64,
        ),
        (
            "vllm:spec_decode_num_drafts",
            "counter",
            "Number of spec decoding drafts.",
            c.spec.spec_drafts_total as f64,
        ),
        (
            "vllm:spec_decode_num_draft_tokens",
            "counter",
            "Number of draft tokens.",
            c.spec.spec_draft_tokens_total as f64,
        ),
        (
            "vllm:spec_decode_num_accepted_tokens",
            "counter",
            "Number of accepted tokens.",
            c.spec.spec_accepted_tokens_total as f64,
        ),
    ];
    let policy = [
        (
            "tandem:spec_paused_slots",
            "gauge",
            "Slots whose drafter is paused now (depth 0, behind the sequence).",
            c.spec.spec_paused_slots as f64,
        ),
        (
            "tandem:spec_paused_slot_steps_total",
            "counter",
            "Slot-steps at depth 0 with the drafter paused.",
            c.spec.spec_paused_slot_steps_total as f64,
        ),
        (
            "tandem:spec_rejected_rows_total",
            "counter",
            "Draft rows the target computed and dropped (a rejected draft token and those after it).",
            c.spec.spec_rejected_rows_total as f64,
        ),
        (
            "tandem:spec_catch_up_tokens_total",
            "counter",
            "Tokens drafters computed that they had missed (beyond the one each drafting slot drafts from).",
            c.spec.spec_catch_up_tokens_total as f64,
        ),
        (
            "tandem:spec_catch_up_seconds_total",
            "counter",
            "Seconds of the draft forwards that caught up on missed tokens.",
            c.spec.spec_catch_up_seconds_total,
        ),
        (
            "tandem:spec_step_predicted_seconds_total",
            "counter",
            "Seconds the speculation policy predicted for the steps it chose depths for.",
            c.spec.spec_step_predicted_seconds_total,
        ),
        (
            "tandem:spec_step_measured_seconds_total",
            "counter",
            "Seconds those steps took.",
            c.spec.spec_step_measured_seconds_total,
        ),
    ];
    let mut out = String::new();
    for (name, kind, help, v) in metrics.into_iter().chain(policy) {
        let _ = writeln!(
            out,
            "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {v}"
        );
    }
    let _ = writeln!(
        out,
        "# HELP vllm:spec_decode_num_accepted_tokens_per_pos Accepted tokens per draft position.\n# TYPE vllm:spec_decode_num_accepted_tokens_per_pos counter"
    );
    for (pos, n) in c.spec.spec_accepted_per_pos.iter().enumerate() {
        let _ = writeln!(
            out,
            "vllm:spec_decode_num_accepted_tokens_per_pos{{position=\"{pos}\"}} {n}"
        );
    }
    let _ = writeln!(
        out,
        "# HELP tandem:spec_depth_chosen_total Slot-steps for which the policy chose each draft depth.\n# TYPE tandem:spec_depth_chosen_total counter"
    );
    for (depth, n) in c.spec.spec_depth_chosen.iter().enumerate() {
        let _ = writeln!(
            out,
            "tandem:spec_depth_chosen_total{{depth=\"{depth}\"}} {n}"
        );
    }
    let _ = writeln!(
        out,
        "# HELP tandem:step_seconds_total Seconds of the engine's steps: drafting, and the forwards' shared among prompt, decode and draft-verifying rows by count; sample: of the forwards' seconds, choosing tokens from logits.\n# TYPE tandem:step_seconds_total counter"
    );
    for (part, v) in c.steps.parts() {
        let _ = writeln!(out, "tandem:step_seconds_total{{part=\"{part}\"}} {v}");
    }
    if let Some(costs) = &snap.spec_costs {
        let mut gauge = |name: &str, help: &str, label: &str, values: &[f64], scale: f64| {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge");
            for (i, v) in values.iter().enumerate() {
                let _ = writeln!(out, "{name}{{{label}=\"{}\"}} {}", i + 1, v * scale);
            }
        };
        gauge(
            "tandem:spec_target_forward_seconds",
            "What the speculation policy takes a target forward of this many rows to cost.",
            "rows",
            &costs.target_ms,
            1e-3,
        );
        gauge(
            "tandem:spec_draft_step_seconds",
            "What the speculation policy takes a draft step over this many slots to cost.",
            "slots",
            &costs.draft_ms,
            1e-3,
        );
        gauge(
            "tandem:spec_acceptance",
            "Expected acceptance at each draft position (1-based), over all slots.",
            "position",
            &costs.acceptance,
            1.0,
        );
    }
    let _ = writeln!(
        out,
        "# HELP tandem:prefix_cache_hit_tokens_total Prompt tokens reused from the prefix cache.\n# TYPE tandem:prefix_cache_hit_tokens_total counter\ntandem:prefix_cache_hit_tokens_total {}",
        c.tokens.cached_tokens_total
    );
    let _ = writeln!(
        out,
        "# HELP tandem:request_unknown_fields_total Request fields no API documents, ignored.\n# TYPE tandem:request_unknown_fields_total counter\ntandem:request_unknown_fields_total {}",
        crate::fields::unknown_total()
    );
    let _ = writeln!(
        out,
        "# HELP tandem:preemptions_total Requests whose KV was taken back for older ones.\n# TYPE tandem:preemptions_total counter\ntandem:preemptions_total {}",
        c.requests.preemptions_total
    );
    let _ = writeln!(
        out,
        "# HELP tandem:context_shifts_total Times an answer filled its slot and dropped tokens to go on (--context-shift).\n# TYPE tandem:context_shifts_total counter\ntandem:context_shifts_total {}",
        c.requests.context_shifts_total
    );
    if let Some(f) = &snap.front {
        let link = (f.bytes_sent + f.bytes_received) as f64;
        let per_token = if c.tokens.tokens_predicted_total > 0 {
            link / c.tokens.tokens_predicted_total as f64
        } else {
            0.0
        };
        let split: [(&str, &str, &str, f64); 11] = [
            (
                "box_requests_total",
                "counter",
                "Split: forward requests and prompt chunks the box answered.",
                f.requests as f64,
            ),
            (
                "box_rows_total",
                "counter",
                "Split: rows the box computed.",
                f.rows as f64,
            ),
            (
                "box_bytes_sent_total",
                "counter",
                "Split: bytes sent to the box.",
                f.bytes_sent as f64,
            ),
            (
                "box_bytes_received_total",
                "counter",
                "Split: bytes received from the box.",
                f.bytes_received as f64,
            ),
            (
                "box_bytes_per_token",
                "gauge",
                "Split: link bytes per generated (accepted) token.",
                per_token,
            ),
            (
                "box_wait_seconds_total",
                "counter",
                "Split: seconds waited for the box's states (its compute and the link).",
                f.wait_seconds,
            ),
            (
                "box_compute_seconds_total",
                "counter",
                "Split: seconds the box reports computing.",
                f.compute_seconds,
            ),
            (
                "head_compute_seconds_total",
                "counter",
                "Split: seconds of this stage's own work in steps.",
                c.split.head_compute_seconds_total,
            ),
            (
                "split_both_busy_seconds_total",
                "counter",
                "Split: seconds during which the box and this stage computed at once.",
                c.split.both_busy_seconds_total,
            ),
            (
                "box_reconnects_total",
                "counter",
                "Split: connections to the box made again after it was lost.",
                c.split.box_reconnects_total as f64,
            ),
            (
                "box_replayed_rows_total",
                "counter",
                "Split: rows computed again on the box to rebuild its sessions.",
                c.split.box_replayed_rows_total as f64,
            ),
        ];
        for (name, kind, help, v) in split {
            let _ = writeln!(
                out,
                "# HELP tandem:{name} {help}\n# TYPE tandem:{name} {kind}\ntandem:{name} {v}"
            );
        }
    }
    let _ = writeln!(
        out,
        "# HELP tandem:requests_failed_total Requests stopped by the server: the model computed NaN or infinite numbers, or a split model's box stayed down.\n# TYPE tandem:requests_failed_total counter\ntandem:requests_failed_total {}",
        c.requests.requests_failed
    );
    let start = s.created.to_string();
    let headers = [
        (
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4".to_string(),
        ),
        (
            header::HeaderName::from_static("process-start-time-unix"),
            start,
        ),
    ];
    Ok((headers, out).into_response())
}

#[derive(Deserialize)]
struct TokenizeReq {
    content: String,
    #[serde(default)]
    add_special: bool,
    #[serde(default = "yes")]
    parse_special: bool,
    #[serde(default)]
    with_pieces: bool,
}

fn yes() -> bool {
    true
}

pub async fn tokenize(
    State(s): State<Shared>,
    b: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, ApiError> {
    let bytes = body(b)?;
    let (with_pieces, ids) = off_runtime(&s, bytes.len(), move |r| {
        let q: TokenizeReq = parse(&bytes)?;
        let ids = r
            .tok
            .encode(&q.content, q.add_special, q.parse_special)
            .map_err(|e| ApiError::invalid("content", e.to_string()))?;
        Ok((q.with_pieces, ids))
    })
    .await?;
    let r = ready(&s)?;
    let tokens: Vec<Value> = if with_pieces {
        ids.iter()
            .map(|&id| {
                let b = r.tok.token_to_piece(id);
                let piece = match std::str::from_utf8(b) {
                    Ok(s) => json!(s),
                    Err(_) => json!(b),
                };
                json!({"id": id, "piece": piece})
            })
            .collect()
    } else {
        ids.iter().map(|&id| json!(id)).collect()
    };
    Ok(Json(json!({"tokens": tokens})))
}

#[derive(Deserialize)]
struct DetokenizeReq {
    tokens: Vec<u32>,
}

pub async fn detokenize(
    State(s): State<Shared>,
    b: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, ApiError> {
    let bytes = body(b)?;
    let r = ready(&s)?;
    let q: DetokenizeReq = parse(&bytes)?;
    if let Some((i, &bad)) = q
        .tokens
        .iter()
        .enumerate()
        .find(|(_, &t)| t as usize >= r.n_vocab)
    {
        return Err(ApiError::invalid(
            format!("tokens[{i}]"),
            format!("token id {bad} is outside the vocabulary of {}", r.n_vocab),
        ));
    }
    Ok(Json(json!({"content": r.tok.decode(&q.tokens)})))
}

pub async fn apply_template(
    State(s): State<Shared>,
    b: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, ApiError> {
    let bytes = body(b)?;
    let prompt = off_runtime(&s, bytes.len(), move |r| {
        parse::<RawRequest>(&bytes)?.chat_prompt(r)
    })
    .await?;
    Ok(Json(json!({"prompt": prompt})))
}

/// llama-server's `/chat/completions/input_tokens`: the tokens the chat's prompt would take.
pub async fn chat_input_tokens(
    State(s): State<Shared>,
    b: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, ApiError> {
    let bytes = body(b)?;
    let n = off_runtime(&s, bytes.len(), move |r| {
        parse::<RawRequest>(&bytes)?.chat_prompt_tokens(r)
    })
    .await?;
    Ok(Json(json!({"input_tokens": n})))
}
