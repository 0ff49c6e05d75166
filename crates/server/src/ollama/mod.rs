//! Ollama's API on the same port: `/api/chat` and `/api/generate` (streamed as lines of JSON
//! unless `stream: false`), `/api/embed` and `/api/embeddings`, `/api/tags`, `/api/show`,
//! `/api/ps`, `/api/pull`, `/api/version`. Requests become the llama-server requests the
//! other routes run ([`request`]), so templates, tools, JSON schemas and sampling are the
//! same; answers and errors (`{"error": "..."}`) go out in Ollama's shapes ([`reply`]).
//!
//! `keep_alive` sets how long the engine stays loaded after the request, as Ollama's does:
//! the engine sleeps after that idle time (`0`: at once; negative: never; not given: the
//! server's `--sleep-idle-seconds`). A chat without messages or a generate without a prompt
//! only loads the model (or unloads it, with `keep_alive: 0`). `/api/create`, `/api/copy`,
//! `/api/delete`, `/api/push` and blob uploads are refused: the served models are the ones
//! the server was started with.

mod models;
mod reply;
mod request;

use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Json, Router};
use futures_util::stream::{self, StreamExt};
use serde::Deserialize;
use serde_json::{json, Value};

use crate::embeddings::TooLong;
use crate::error::ApiError;
use crate::format::chat_chain;
use crate::generate::{collect, enqueue, items};
use crate::state::{Ready, Shared};
use crate::transform::Chain;
use crate::validate::{parse, Route, ValidGen};
use crate::{body, off_runtime, ready, KeyNamespace};
use models::{check_model, Named};
pub use models::{Card, Pulled, Puller, OLLAMA_VERSION};
use reply::{Kind, Lines};
use request::{
    chat_messages, common_body, keep_alive, num_ctx, raw_request, renamed, with_images, ChatBody,
    GenerateBody,
};

/// Ollama's routes.
pub fn routes() -> Router<Shared> {
    Router::new()
        .route("/api/chat", post(chat))
        .route("/api/generate", post(generate))
        .route("/api/embed", post(embed))
        .route("/api/embeddings", post(embeddings))
        .route("/api/tags", get(tags))
        .route("/api/show", post(show))
        .route("/api/ps", get(ps))
        .route("/api/pull", post(pull))
        .route("/api/version", get(version))
        .route("/api/create", post(fixed_models))
        .route("/api/copy", post(fixed_models))
        .route("/api/delete", axum::routing::delete(fixed_models))
        .route("/api/push", post(fixed_models))
        .route("/api/blobs/{digest}", post(fixed_models).head(fixed_models))
}

/// An error in Ollama's shape, with its status (and Retry-After).
fn answer_error(e: ApiError) -> Response {
    let mut r = (e.status, Json(reply::error_body(&e))).into_response();
    if let Some(s) = e.retry_after {
        r.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(s));
    }
    r
}

/// A request's `keep_alive`, validated: `None` when not given, else the idle time after
/// which the engine sleeps (`Some(None)`: never).
type KeepAlive = Option<Option<Duration>>;

fn keep_alive_of(v: &Option<Value>) -> Result<KeepAlive, ApiError> {
    v.as_ref()
        .filter(|v| !v.is_null())
        .map(keep_alive)
        .transpose()
}

/// What a chat or generate body asks for.
enum Asked {
    /// Only to load the model, or to unload it.
    Load { unload: bool },
    Run {
        valid: Box<ValidGen>,
        /// Reasoning is split out of the text.
        split: bool,
        /// Generate: the prompt's tokens, returned as `context` with the answer's.
        context: Option<Vec<u32>>,
    },
}

/// A body read: what it asks, with its model name, stream flag and `keep_alive`.
struct Prepared {
    asked: Asked,
    model: String,
    stream: bool,
    keep_alive: KeepAlive,
}

/// `asked`, with the model, stream flag (Ollama streams by default) and `keep_alive` of `c`.
fn prepared(c: &request::Common, keep_alive: KeepAlive, asked: Asked) -> Prepared {
    Prepared {
        asked,
        model: c.model.clone().unwrap_or_default(),
        stream: c.stream.unwrap_or(true),
        keep_alive,
    }
}

/// A request that only loads the model, or unloads it with `keep_alive: 0`.
fn load_only(keep_alive: KeepAlive) -> Asked {
    Asked::Load {
        unload: keep_alive == Some(Some(Duration::ZERO)),
    }
}

/// Caps every choice's answer so that prompt and answer fit `num_ctx` (Ollama's window).
fn fit(valid: &mut ValidGen, num_ctx: Option<usize>, ready: &Ready) -> Result<(), ApiError> {
    let Some(n) = num_ctx else { return Ok(()) };
    let slot = ready.engine.config().slot_ctx();
    if n > slot {
        return Err(ApiError::invalid(
            "options.num_ctx",
            format!("options.num_ctx {n} is more than this server's slots hold ({slot} tokens); start tandem serve with a larger --ctx-size or fewer --parallel slots"),
        ));
    }
    for c in &mut valid.choices {
        let p = c.prompt.len();
        if p >= n {
            return Err(ApiError::exceeds_context("options.num_ctx", p, n));
        }
        c.max_tokens = Some(c.max_tokens.map_or(n - p, |m| m.min(n - p)));
    }
    Ok(())
}

fn prepare_chat(bytes: &Bytes, ready: &Ready) -> Result<Prepared, ApiError> {
    let req: ChatBody = parse(bytes)?;
    let c = &req.common;
    check_model(ready, c.model.as_deref())?;
    let keep_alive = keep_alive_of(&c.keep_alive)?;
    let messages = req.messages.unwrap_or_default();
    if messages.is_empty() {
        return Ok(prepared(c, keep_alive, load_only(keep_alive)));
    }
    if ready.vision.is_none() {
        if let Some(i) = messages
            .iter()
            .position(|m| m.images.as_ref().is_some_and(|v| !v.is_empty()))
        {
            let at = format!("messages[{i}].images");
            return Err(ApiError::invalid(
                &at,
                format!("{at}: this server has no vision tower loaded (start it with --mmproj), so it reads no images"),
            ));
        }
    }
    let mut body = common_body(c)?;
    let window = num_ctx(c.options.as_ref())?;
    body.insert("messages".into(), Value::Array(chat_messages(messages)?));
    let offered = req
        .tools
        .filter(|t| t.as_array().is_none_or(|a| !a.is_empty()) && !t.is_null());
    if let Some(tools) = offered {
        body.insert("tools".into(), tools);
    }
    let mut valid = raw_request(body)?
        .validate(Route::Chat, ready)
        .map_err(renamed)?;
    fit(&mut valid, window, ready)?;
    let asked = Asked::Run {
        valid: Box::new(valid),
        split: true,
        context: None,
    };
    Ok(prepared(c, keep_alive, asked))
}

fn prepare_generate(bytes: &Bytes, ready: &Ready) -> Result<Prepared, ApiError> {
    let req: GenerateBody = parse(bytes)?;
    let c = &req.common;
    check_model(ready, c.model.as_deref())?;
    req.refuse_unsupported()?;
    let keep_alive = keep_alive_of(&c.keep_alive)?;
    let prompt = req.prompt.clone().unwrap_or_default();
    let suffix = req.suffix.clone().unwrap_or_default();
    let context = req.context.clone().unwrap_or_default();
    if prompt.is_empty() && suffix.is_empty() && context.is_empty() {
        return Ok(prepared(c, keep_alive, load_only(keep_alive)));
    }
    let mut body = common_body(c)?;
    let window = num_ctx(c.options.as_ref())?;
    let raw = req.raw == Some(true);
    if raw && req.system.as_deref().is_some_and(|s| !s.is_empty()) {
        return Err(ApiError::invalid(
            "system",
            "system is not used with raw: true (the prompt is sent as it is)",
        ));
    }
    let (mut valid, split) = if !suffix.is_empty() {
        if !context.is_empty() {
            return Err(ApiError::invalid(
                "context",
                "context cannot be continued with a suffix (fill-in-the-middle starts its own prompt)",
            ));
        }
        body.insert("input_prefix".into(), json!(prompt));
        body.insert("input_suffix".into(), json!(suffix));
        let bytes = Bytes::from(Value::Object(body).to_string());
        (
            crate::infill::prepare(&bytes, ready).map_err(renamed)?,
            false,
        )
    } else {
        let mut messages = Vec::new();
        if let Some(system) = req.system.as_deref().filter(|s| !s.is_empty()) {
            messages.push(json!({"role": "system", "content": system}));
        }
        let content = match req.images.clone().filter(|v| !v.is_empty()) {
            Some(_) if ready.vision.is_none() => {
                return Err(ApiError::invalid(
                    "images",
                    "images: this server has no vision tower loaded (start it with --mmproj), so it reads no images",
                ))
            }
            Some(images) => with_images("images", json!(prompt), images)?,
            None => json!(prompt),
        };
        messages.push(json!({"role": "user", "content": content}));
        let route = match (raw, context.is_empty()) {
            (false, true) => {
                body.insert("messages".into(), Value::Array(messages));
                Route::Chat
            }
            (false, false) => {
                let mut chat = body.clone();
                chat.insert("messages".into(), Value::Array(messages));
                let text = raw_request(chat)?.chat_prompt(ready).map_err(renamed)?;
                let mut pieces: Vec<Value> = context.iter().map(|&t| json!(t)).collect();
                pieces.push(json!(text));
                body.insert("prompt".into(), Value::Array(pieces));
                Route::Native
            }
            (true, true) => {
                body.insert("prompt".into(), json!(prompt));
                Route::Native
            }
            (true, false) => {
                let mut pieces: Vec<Value> = context.iter().map(|&t| json!(t)).collect();
                pieces.push(json!(prompt));
                body.insert("prompt".into(), Value::Array(pieces));
                Route::Native
            }
        };
        let valid = raw_request(body)?.validate(route, ready).map_err(renamed)?;
        (valid, !raw)
    };
    fit(&mut valid, window, ready)?;
    let context = Some(valid.choices[0].prompt.clone());
    let asked = Asked::Run {
        valid: Box::new(valid),
        split,
        context,
    };
    Ok(prepared(c, keep_alive, asked))
}

/// Applies a request's `keep_alive` (not given: the server's `--sleep-idle-seconds`).
fn keep(s: &Shared, ready: &Ready, asked: KeepAlive) -> Result<(), ApiError> {
    if s.config.split.is_some() {
        return match asked {
            None => Ok(()),
            Some(_) => Err(ApiError::invalid(
                "keep_alive",
                "keep_alive: the front of a split model stays loaded",
            )),
        };
    }
    ready
        .engine
        .sleep_after(asked.unwrap_or(s.config.sleep_idle))
        .map_err(ApiError::from)
}

async fn run(
    s: Shared,
    key: Option<Extension<KeyNamespace>>,
    b: Result<Bytes, BytesRejection>,
    kind: Kind,
) -> Result<Response, ApiError> {
    let bytes = body(b)?;
    let p = off_runtime(&s, bytes.len(), move |ready| match kind {
        Kind::Chat => prepare_chat(&bytes, ready),
        Kind::Generate => prepare_generate(&bytes, ready),
    })
    .await?;
    let ready = ready(&s)?;
    let (valid, split, context) = match p.asked {
        Asked::Load { unload } => {
            keep(&s, ready, p.keep_alive)?;
            if !unload {
                ready.engine.wake()?;
                // Answered once the engine is awake.
                ready.engine.snapshot().await?;
            }
            let lines = Lines::new(kind, p.model, Chain::new(None, None), None);
            return Ok(Json(lines.loaded(unload)).into_response());
        }
        Asked::Run {
            valid,
            split,
            context,
        } => (valid, split, context),
    };
    // Queued first: a keep_alive of 0 then unloads after this request, not before it.
    let mut sub = enqueue(&s, key, *valid, ()).await?;
    keep(&s, ready, p.keep_alive)?;
    let (events, calls) = sub.only();
    let chain = match split {
        true => chat_chain(ready, &sub.answer, calls),
        false => Chain::new(None, calls),
    };
    let mut lines = Lines::new(kind, p.model, chain, context);
    if p.stream {
        let mut r = Body::from_stream(items(lines, events)).into_response();
        r.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/x-ndjson"),
        );
        return Ok(r);
    }
    let (text, tokens, _, summary) = collect(events).await?;
    Ok(Json(lines.whole(&text, &tokens, &summary)).into_response())
}

async fn chat(
    State(s): State<Shared>,
    key: Option<Extension<KeyNamespace>>,
    b: Result<Bytes, BytesRejection>,
) -> Response {
    run(s, key, b, Kind::Chat)
        .await
        .unwrap_or_else(answer_error)
}

async fn generate(
    State(s): State<Shared>,
    key: Option<Extension<KeyNamespace>>,
    b: Result<Bytes, BytesRejection>,
) -> Response {
    run(s, key, b, Kind::Generate)
        .await
        .unwrap_or_else(answer_error)
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct EmbedBody {
    model: Option<String>,
    keep_alive: Option<Value>,
    input: Option<Value>,
    prompt: Option<Value>,
    dimensions: Option<Value>,
    truncate: Option<bool>,
}

/// An embedding request read: the OpenAI-shaped body it becomes, how a long input is
/// taken, its model's name and `keep_alive`.
struct EmbedAsked {
    body: Bytes,
    too_long: TooLong,
    model: String,
    keep_alive: KeepAlive,
}

/// Each input's vector (pooled, L2-normalized) and the prompt tokens in all, and the model
/// named; `legacy`: `/api/embeddings`' one `prompt`. An input longer than a slot is cut to
/// its first tokens unless `truncate: false` (then a 400), as Ollama's.
async fn vectors(
    s: &Shared,
    key: Option<Extension<KeyNamespace>>,
    b: Result<Bytes, BytesRejection>,
    legacy: bool,
) -> Result<(Vec<Vec<f32>>, usize, String), ApiError> {
    let bytes = body(b)?;
    let asked = off_runtime(s, bytes.len(), move |ready| {
        let e: EmbedBody = parse(&bytes)?;
        check_model(ready, e.model.as_deref())?;
        let (name, input) = match legacy {
            true => ("prompt", e.prompt),
            false => ("input", e.input),
        };
        let input = input
            .filter(|v| !v.is_null())
            .ok_or_else(|| ApiError::invalid(name, format!("{name} is required")))?;
        // The legacy route's vector is the model's as pooled, not normalized (Ollama's).
        let mut b = match legacy {
            true => json!({"input": input, "embd_normalize": -1}),
            false => json!({"input": input}),
        };
        if let Some(d) = e.dimensions.filter(|d| !d.is_null()) {
            b["dimensions"] = d;
        }
        Ok(EmbedAsked {
            body: Bytes::from(b.to_string()),
            too_long: match e.truncate {
                Some(false) => TooLong::Refuse,
                _ => TooLong::Truncate,
            },
            model: e.model.unwrap_or_default(),
            keep_alive: keep_alive_of(&e.keep_alive)?,
        })
    })
    .await?;
    let (v, n) = crate::embeddings::pooled_inputs(s, key, Ok(asked.body), asked.too_long).await?;
    keep(s, ready(s)?, asked.keep_alive)?;
    Ok((v, n, asked.model))
}

async fn embed(
    State(s): State<Shared>,
    key: Option<Extension<KeyNamespace>>,
    b: Result<Bytes, BytesRejection>,
) -> Response {
    let t0 = std::time::Instant::now();
    let answered = async {
        let (v, n, model) = vectors(&s, key, b, false).await?;
        Ok::<_, ApiError>(Json(json!({
            "model": model,
            "embeddings": v,
            "total_duration": t0.elapsed().as_nanos() as u64,
            "load_duration": 0,
            "prompt_eval_count": n,
        })))
    };
    answered
        .await
        .map_or_else(answer_error, IntoResponse::into_response)
}

async fn embeddings(
    State(s): State<Shared>,
    key: Option<Extension<KeyNamespace>>,
    b: Result<Bytes, BytesRejection>,
) -> Response {
    let answered = async {
        let (mut v, _, _) = vectors(&s, key, b, true).await?;
        Ok::<_, ApiError>(Json(json!({"embedding": v.swap_remove(0)})))
    };
    answered
        .await
        .map_or_else(answer_error, IntoResponse::into_response)
}

/// The served model's card (arrays past a few items left out), read from its file off the
/// runtime once: the file does not change while it is served.
async fn card(s: &Shared) -> Result<&models::Card, ApiError> {
    if let Some(c) = s.ollama_card.get() {
        return Ok(c);
    }
    let shared = s.clone();
    let c = tokio::task::spawn_blocking(move || models::card(&shared, ready(&shared)?, false))
        .await
        .map_err(|e| ApiError::internal(format!("reading the model's card failed: {e}")))??;
    Ok(s.ollama_card.get_or_init(|| c))
}

async fn tags(State(s): State<Shared>) -> Response {
    let answered = async {
        let card = card(&s).await?;
        let r = ready(&s)?;
        Ok::<_, ApiError>(Json(json!({"models": [models::tag(r, card)]})))
    };
    answered
        .await
        .map_or_else(answer_error, IntoResponse::into_response)
}

async fn ps(State(s): State<Shared>) -> Response {
    let answered = async {
        let r = ready(&s)?;
        let snap = r.engine.snapshot().await?;
        if snap.sleeping {
            return Ok(Json(json!({"models": []})));
        }
        let card = card(&s).await?;
        Ok::<_, ApiError>(Json(
            json!({"models": [models::running(r, card, snap.sleeps_in)]}),
        ))
    };
    answered
        .await
        .map_or_else(answer_error, IntoResponse::into_response)
}

async fn show(State(s): State<Shared>, b: Result<Bytes, BytesRejection>) -> Response {
    let answered = async {
        let bytes = body(b)?;
        let n: Named = parse(&bytes)?;
        check_model(ready(&s)?, Some(n.model()?))?;
        let shown = match n.verbose == Some(true) {
            false => models::show(&s, ready(&s)?, card(&s).await?),
            true => {
                let shared = s.clone();
                tokio::task::spawn_blocking(move || {
                    let r = ready(&shared)?;
                    Ok::<_, ApiError>(models::show(&shared, r, &models::card(&shared, r, true)?))
                })
                .await
                .map_err(|e| {
                    ApiError::internal(format!("reading the model's card failed: {e}"))
                })??
            }
        };
        Ok::<_, ApiError>(Json(shown))
    };
    answered
        .await
        .map_or_else(answer_error, IntoResponse::into_response)
}

async fn version() -> Json<Value> {
    Json(json!({"version": OLLAMA_VERSION}))
}

async fn fixed_models() -> Response {
    answer_error(ApiError::not_supported(
        "tandem serves the models it was started with: creating, copying, deleting and pushing models is not available",
    ))
}

fn status_line(v: Value) -> Bytes {
    Bytes::from(format!("{v}\n"))
}

/// `/api/pull`: the served model is there already; a model tandem knows is fetched into its
/// cache (`tandem pull`), for a server started with it. Streamed, the progress is shown
/// as Ollama's client reads it: the manifest, the file's digest and size, success.
async fn pull(State(s): State<Shared>, b: Result<Bytes, BytesRejection>) -> Response {
    let answered = async {
        let bytes = body(b)?;
        let n: Named = parse(&bytes)?;
        let name = n.model()?.to_string();
        if n.insecure == Some(true) {
            return Err(ApiError::invalid(
                "insecure",
                "insecure: tandem fetches over HTTPS only",
            ));
        }
        let served = ready(&s).is_ok_and(|r| models::names_served(r, &name));
        let puller = s.config.pull;
        let bare = name.strip_suffix(":latest").unwrap_or(&name).to_string();
        let fetch = async move {
            if served {
                return Ok(None);
            }
            let Some(puller) = puller else {
                return Err(ApiError::not_supported(
                    "this server cannot fetch models; run tandem pull",
                ));
            };
            let asked = bare.clone();
            match tokio::task::spawn_blocking(move || puller(&asked)).await {
                Ok(Ok(Some(p))) => Ok(Some(p)),
                Ok(Ok(None)) => Err(ApiError::not_found(format!(
                    "pull model manifest: \"{bare}\" is not a model tandem knows"
                ))),
                Ok(Err(m)) => Err(ApiError::internal(m)),
                Err(e) => Err(ApiError::internal(format!("pulling failed: {e}"))),
            }
        };
        if n.stream == Some(false) {
            fetch.await?;
            return Ok(Json(json!({"status": "success"})).into_response());
        }
        let rest = stream::once(fetch).flat_map(|got| {
            let lines: Vec<Value> = match got {
                Err(e) => vec![reply::error_body(&e)],
                Ok(p) => {
                    let mut v = Vec::new();
                    if let Some(p) = p {
                        v.push(json!({"status": format!("pulling {}", &p.sha256[..12]),
                            "digest": format!("sha256:{}", p.sha256),
                            "total": p.size, "completed": p.size}));
                    }
                    v.extend([
                        json!({"status": "verifying sha256 digest"}),
                        json!({"status": "writing manifest"}),
                        json!({"status": "success"}),
                    ]);
                    v
                }
            };
            stream::iter(
                lines
                    .into_iter()
                    .map(|v| Ok::<_, std::convert::Infallible>(status_line(v))),
            )
        });
        let first = stream::iter([Ok(status_line(json!({"status": "pulling manifest"})))]);
        let mut r = Body::from_stream(first.chain(rest)).into_response();
        r.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/x-ndjson"),
        );
        Ok(r)
    };
    answered.await.unwrap_or_else(answer_error)
}
