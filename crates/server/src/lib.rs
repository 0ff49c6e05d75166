//! The HTTP server: OpenAI-compatible and llama-server-compatible routes over the engine.
//!
//! The listener is bound first and answers `/health` with 503 while the model loads; the
//! engine thread is started once the memory plan has been checked. Every route but
//! `/health` (and `/metrics` with `--metrics-public`) needs the API key when one is set;
//! CORS headers are sent only for the origins `--cors-origins` allows (`cors`).

mod anthropic;
mod chat;
mod choices;
mod conn;
mod constrain;
pub mod cors;
mod embeddings;
mod error;
mod fields;
pub mod fleet;
mod format;
#[doc(hidden)]
pub mod fuzz;
pub mod gcp;
mod generate;
mod image_fetch;
mod infill;
mod info;
mod live;
pub mod lora;
pub mod memory;
pub mod ollama;
mod prompts;
mod reasoning;
mod rerank;
mod responses;
mod slots;
mod state;
mod telemetry;
pub mod tools;
mod transform;
mod validate;
mod vision;
mod webui;

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{header, Method, StatusCode};
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::routing::{get, post};
use axum::Router;

pub use conn::Limits;
pub use error::{ApiError, Error};
pub use state::{Defaults, Drafter, Reasoning, ServerConfig, SpecSettings, SplitSettings};

use state::Shared;
pub use state::{load, AppState, Ready};
pub use validate::Route;

/// Parses and validates `body` for `route` exactly as a request's body would be, without
/// queueing it: the fuzz targets' entry point. `Err` is the 4xx a client would get.
pub fn check_request(ready: &Ready, route: Route, body: &[u8]) -> Result<(), ApiError> {
    let raw: validate::RawRequest = validate::parse(&Bytes::copy_from_slice(body))?;
    raw.validate(route, ready).map(|_| ())
}

/// Routes reachable without the API key.
const PUBLIC: &[&str] = &["/health", "/v1/health", "/ready", "/v1/ready"];

/// The loaded state, or 503 while loading.
fn ready(s: &AppState) -> Result<&Ready, ApiError> {
    s.ready
        .get()
        .ok_or_else(|| ApiError::unavailable("Loading model", 1))
}

/// Runs `prepare` (the parsing, templating, tokenizing of a body of `bytes`: work that
/// grows with the prompt) on the blocking pool, in its lane of [`state::Lanes`], so that the
/// runtime's threads stay free for `/health`, streams and other requests meanwhile.
async fn off_runtime<T, F>(s: &Shared, bytes: usize, prepare: F) -> Result<T, ApiError>
where
    T: Send + 'static,
    F: FnOnce(&Ready) -> Result<T, ApiError> + Send + 'static,
{
    ready(s)?;
    let _turn = s
        .preparing
        .of(bytes)
        .acquire()
        .await
        .map_err(|_| ApiError::internal("the server is shutting down"))?;
    let shared = s.clone();
    tokio::task::spawn_blocking(move || prepare(ready(&shared)?))
        .await
        .map_err(|e| ApiError::internal(format!("preparing the request failed: {e}")))?
}

/// The request body, already read whole and within `--body-limit` by [`conn::read_body`].
fn body(b: Result<Bytes, BytesRejection>) -> Result<Bytes, ApiError> {
    b.map_err(|e| ApiError::bad_request(e.body_text()))
}

/// The prefix-cache namespace of the API key a request came with: prompts cached for one key
/// are never reused, nor seen through `cached_tokens` or timing, by another.
#[derive(Debug, Clone, Copy)]
pub(crate) struct KeyNamespace(pub u64);

/// A namespace id for `parts` (never the shared namespace's 0).
pub(crate) fn namespace_of<T: std::hash::Hash>(parts: T) -> u64 {
    use std::hash::Hasher;
    let mut h = std::collections::hash_map::DefaultHasher::new();
    parts.hash(&mut h);
    h.finish().max(1)
}

async fn auth(State(s): State<Shared>, mut req: Request, next: Next) -> Result<Response, ApiError> {
    let path = req.uri().path();
    let gcp_health = s.config.gcp.as_ref().and_then(|g| g.health.as_deref());
    let reading = matches!(*req.method(), Method::GET | Method::HEAD);
    let public = PUBLIC.contains(&path)
        || (reading && webui::is_ui_path(path))
        || gcp_health == Some(path)
        || (s.config.metrics_public && path == "/metrics");
    if s.config.api_keys.is_empty() || public {
        return Ok(next.run(req).await);
    }
    let h = req.headers();
    // RFC 6750: the scheme is matched without regard to case.
    let bearer = h
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, key)| key);
    let x_key = h.get("x-api-key").and_then(|v| v.to_str().ok());
    let given = bearer.or(x_key).map(str::trim);
    if let Some(key) = given.filter(|k| key_matches(&s.config.api_keys, k)) {
        let ns = KeyNamespace(namespace_of(("api-key", key)));
        req.extensions_mut().insert(ns);
        Ok(next.run(req).await)
    } else {
        Err(ApiError::unauthorized())
    }
}

/// Whether `given` is one of `keys`, compared in constant time (every key is compared,
/// and each comparison takes the same time wherever the bytes differ).
fn key_matches(keys: &[String], given: &str) -> bool {
    use subtle::ConstantTimeEq;
    let hit = keys.iter().fold(subtle::Choice::from(0), |acc, k| {
        acc | k.as_bytes().ct_eq(given.as_bytes())
    });
    hit.into()
}

/// Routes that only read the server's state: they never wake a sleeping engine.
const STATUS: &[&str] = &[
    "/health",
    "/v1/health",
    "/ready",
    "/v1/ready",
    "/props",
    "/models",
    "/v1/models",
    "/metrics",
    "/slots",
    "/engine/events",
];

/// Any other request wakes a sleeping engine before it is handled (`--sleep-idle-seconds`,
/// Ollama's `keep_alive`): a client is at work, and the engine is ready by the time its
/// next request comes.
async fn activity(State(s): State<Shared>, req: Request, next: Next) -> Response {
    let path = req.uri().path();
    // Ollama's routes wake the engine themselves, when they need it: `keep_alive: 0` must
    // not load a sleeping model only to unload it.
    let status =
        STATUS.contains(&path) || path.starts_with("/v1/models/") || path.starts_with("/api/");
    if !status && req.method() != axum::http::Method::GET {
        if let Some(r) = s.ready.get() {
            let _ = r.engine.wake();
        }
    }
    next.run(req).await
}

/// The host of a Host header: `[::1]:8080` → `[::1]`, `localhost:8080` → `localhost`.
fn host_of(header: &str) -> &str {
    match header.strip_prefix('[') {
        Some(rest) => rest.find(']').map_or(header, |end| &header[..end + 2]),
        None => header.split(':').next().unwrap_or(header),
    }
}

/// Refuses (403) a request whose Host is not an allowed one, before anything else runs.
async fn hosts(State(s): State<Shared>, req: Request, next: Next) -> Result<Response, ApiError> {
    if let Some(allowed) = &s.config.allowed_hosts {
        let host = req
            .headers()
            .get(header::HOST)
            .and_then(|v| v.to_str().ok())
            .map(host_of)
            .unwrap_or("");
        if !allowed.iter().any(|a| a.eq_ignore_ascii_case(host)) {
            return Err(ApiError::forbidden_host(host));
        }
    }
    Ok(next.run(req).await)
}

/// A body sent with a `Content-Type` must be JSON (a missing header is taken as JSON).
async fn json_only(req: Request, next: Next) -> Result<Response, ApiError> {
    let ctype = req
        .headers()
        .get(header::CONTENT_TYPE)
        .map(|v| v.to_str().unwrap_or("?"));
    let mime = ctype.map(|c| {
        c.split(';')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase()
    });
    match mime {
        Some(m) if req.method() == axum::http::Method::POST && m != "application/json" => {
            Err(ApiError {
                status: StatusCode::UNSUPPORTED_MEDIA_TYPE,
                message: format!("Content-Type must be application/json, not '{m}'"),
                kind: "invalid_request_error",
                param: Some("Content-Type".into()),
                retry_after: None,
                context: None,
            })
        }
        _ => Ok(next.run(req).await),
    }
}

async fn not_found() -> ApiError {
    ApiError::not_found("File Not Found")
}

/// llama-server's web-UI proxy and server-side tools, which tandem does not run: 403 as
/// llama-server answers them when they are off.
async fn not_enabled() -> ApiError {
    ApiError::forbidden("this endpoint is not enabled on this server")
}

async fn method_not_allowed() -> ApiError {
    ApiError::method_not_allowed()
}

/// The router over `state`: its routes (with Vertex AI's predict route over them when
/// `--gcp` settings are on) behind the body, key, CORS and host layers.
pub fn router(state: Shared) -> Router {
    let routes = routes().with_state(state.clone());
    let app = match &state.config.gcp {
        None => routes,
        Some(g) => {
            let mut app = Router::new().route(
                &g.predict,
                post(gcp::predict).layer(axum::Extension(routes.clone())),
            );
            if let Some(h) = &g.health {
                app = app.route(h, get(info::health));
            }
            app.with_state(state.clone()).fallback_service(routes)
        }
    };
    layered(app, state)
}

/// `app` behind the body, key, CORS and host layers of `state`'s settings.
pub(crate) fn layered(app: Router, state: Shared) -> Router {
    app.layer(middleware::from_fn_with_state(state.clone(), activity))
        .layer(middleware::from_fn(json_only))
        .layer(middleware::from_fn_with_state(
            state.clone(),
            conn::read_body,
        ))
        .layer(middleware::from_fn_with_state(state.clone(), auth))
        .layer(middleware::from_fn_with_state(state.clone(), cors::layer))
        .layer(middleware::from_fn_with_state(state.clone(), hosts))
        // conn::read_body enforces --body-limit (413) before any extractor runs.
        .layer(DefaultBodyLimit::disable())
}

/// Every route's handler.
fn routes() -> Router<Shared> {
    Router::new()
        .route("/health", get(info::health))
        .route("/v1/health", get(info::health))
        .route("/ready", get(info::ready_route))
        .route("/v1/ready", get(info::ready_route))
        .route("/models", get(info::models))
        .route("/v1/models", get(info::models))
        .route("/v1/models/{id}", get(info::model))
        .route("/models/{id}", get(info::model))
        .route("/props", get(info::props).post(info::change_props))
        .route("/slots", get(info::slots))
        .route("/lora-adapters", get(lora::list).post(lora::set))
        .route("/slots/{id}", post(slots::action))
        .route("/metrics", get(info::metrics))
        .route("/tokenize", post(info::tokenize))
        .route("/detokenize", post(info::detokenize))
        .route("/apply-template", post(info::apply_template))
        .route("/v1/chat/completions", post(generate::chat))
        .route("/chat/completions", post(generate::chat))
        .route(
            "/v1/chat/completions/input_tokens",
            post(info::chat_input_tokens),
        )
        .route(
            "/chat/completions/input_tokens",
            post(info::chat_input_tokens),
        )
        .route("/v1/completions", post(generate::completions))
        .route("/completions", post(generate::native))
        .route("/completion", post(generate::native))
        .route("/infill", post(generate::infill))
        .route("/v1/messages", post(anthropic::messages))
        .route("/v1/responses", post(responses::responses))
        .route("/responses", post(responses::responses))
        .route("/v1/responses/input_tokens", post(responses::input_tokens))
        .route("/responses/input_tokens", post(responses::input_tokens))
        .route(
            "/v1/responses/{id}",
            get(responses::get).delete(responses::delete),
        )
        .route("/v1/embeddings", post(embeddings::openai))
        .route("/embedding", post(embeddings::native))
        .route("/embeddings", post(embeddings::native))
        .route("/v1/messages/count_tokens", post(anthropic::count_tokens))
        .route("/rerank", post(rerank::rerank))
        .route("/reranking", post(rerank::rerank))
        .route("/v1/rerank", post(rerank::rerank))
        .route("/v1/reranking", post(rerank::rerank))
        .route("/cors-proxy", get(not_enabled).post(not_enabled))
        .route("/tools", get(not_enabled).post(not_enabled))
        .route("/", get(webui::index))
        .route("/webui/{name}", get(webui::asset))
        .route("/engine/events", get(live::events))
        .merge(ollama::routes())
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
}

pub(crate) async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("installing a SIGTERM handler");
        tokio::select! {
            _ = ctrl_c => {},
            _ = term.recv() => {},
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}

/// Serves until SIGINT or SIGTERM. Binds first, then loads the model on a blocking thread;
/// a load or memory-plan failure stops the server with that error.
pub fn run(config: ServerConfig) -> Result<(), Error> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(serve(config))
}

/// Listeners on every address of `config.host`, and their URLs.
pub(crate) async fn bind(
    config: &ServerConfig,
) -> Result<(Vec<tokio::net::TcpListener>, String), Error> {
    let mut listeners: Vec<tokio::net::TcpListener> = Vec::new();
    for host in config.host.split(',').map(str::trim) {
        let host = match host.contains(':') && !host.starts_with('[') {
            true => format!("[{host}]"),
            false => host.to_string(),
        };
        // With port 0, every address takes the port the first one got.
        let port = match (config.port, listeners.first()) {
            (0, Some(l)) => l.local_addr()?.port(),
            (p, _) => p,
        };
        let addr = format!("{host}:{port}");
        let listener = tokio::net::TcpListener::bind(&addr)
            .await
            .map_err(|source| Error::Bind {
                addr: addr.clone(),
                source,
            })?;
        listeners.push(listener);
    }
    let local = listeners
        .iter()
        .map(|l| l.local_addr().map(|a| format!("http://{a}")))
        .collect::<Result<Vec<_>, _>>()?
        .join(", ");
    Ok((listeners, local))
}

async fn serve(config: ServerConfig) -> Result<(), Error> {
    let (listeners, local) = bind(&config).await?;
    let state = Arc::new(AppState::new(config));
    eprintln!(
        "tandem serve: listening on {local} (loading {})",
        state.config.model_path.display()
    );
    let loader = {
        let state = state.clone();
        tokio::task::spawn_blocking(move || {
            let r = state::load(&state.config)?;
            eprintln!(
                "tandem serve: model '{}' ready in {:.1} s",
                r.model_id,
                state.started.elapsed().as_secs_f64()
            );
            let _ = state.ready.set(r);
            Ok::<(), Error>(())
        })
    };
    let files = conn::raise_file_limit();
    let limits = state.config.limits;
    eprintln!(
        "connections: at most {}, {} s for a request's head (and a kept-alive connection's idle time), {} s for its body; open-file limit {files}",
        limits.max_connections,
        limits.header_timeout.as_secs_f64(),
        limits.body_timeout.as_secs_f64(),
    );
    let server = conn::serve(listeners, router(state.clone()), limits, shutdown_signal());
    let failed_load = async {
        match loader.await {
            Ok(Ok(())) => std::future::pending().await,
            Ok(Err(e)) => e,
            Err(join) => Error::Io(std::io::Error::other(join.to_string())),
        }
    };
    tokio::select! {
        r = server => {
            r?;
            // The engine answers between its steps, after giving the requests that ended
            // their KV (and the prompt caches' tiers their blocks): nothing owed is cut off.
            if let Some(ready) = state.ready.get() {
                let _ = ready.engine.snapshot().await;
            }
            Ok(())
        }
        e = failed_load => Err(e),
    }
}
