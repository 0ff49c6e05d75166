//! The router's own routes, and the proxy that hands every other request to its model's
//! server (the body and the answer streamed as they come; the answer's status, headers and
//! errors are the model server's own).

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::{Query, Request, State};
use axum::http::{header, HeaderMap, HeaderName, HeaderValue, Method};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use futures_util::StreamExt;
use http_body_util::{BodyStream, Full};
use serde::Deserialize;
use serde_json::{json, Value};

use super::instance::send;
use super::{Entry, Fleet, FleetSettings};
use crate::error::{ApiError, Error};
use crate::state::{AppState, ServerConfig, Shared};

fn fleet(s: &Shared) -> &Arc<Fleet> {
    s.fleet.get().expect("a router's state holds its fleet")
}

/// Serves `settings`' models behind `config`'s address, key and limits until SIGINT or
/// SIGTERM; then stops every model's server.
pub fn run(config: ServerConfig, settings: FleetSettings) -> Result<(), Error> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let f = Arc::new(Fleet::new(settings).map_err(Error::Config)?);
        let (listeners, local) = crate::bind(&config).await?;
        let limits = config.limits;
        let state = Arc::new(AppState::new(config));
        let _ = state.fleet.set(f.clone());
        let names: Vec<String> = f.entries().into_iter().map(|e| e.name).collect();
        eprintln!(
            "tandem serve: listening on {local} (router of {} models: {}; at most {} loaded)",
            names.len(),
            names.join(", "),
            f.max()
        );
        let app = crate::layered(routes().with_state(state.clone()), state);
        let served = crate::conn::serve(listeners, app, limits, crate::shutdown_signal()).await;
        f.shutdown().await;
        Ok(served?)
    })
}

fn routes() -> Router<Shared> {
    Router::new()
        .route("/health", get(health))
        .route("/v1/health", get(health))
        .route("/ready", get(health))
        .route("/v1/ready", get(health))
        .route("/models", get(models))
        .route("/v1/models", get(models))
        .route("/models/{id}", get(model))
        .route("/v1/models/{id}", get(model))
        .route("/models/load", post(load))
        .route("/models/unload", post(unload))
        .route("/props", get(props))
        .route("/api/tags", get(tags))
        .route("/api/ps", get(ps))
        .route("/api/version", get(version))
        .route("/", get(crate::webui::index))
        .route("/webui/{name}", get(crate::webui::asset))
        .fallback(forward)
}

async fn health() -> Json<Value> {
    Json(json!({"status": "ok"}))
}

fn listed(f: &Fleet, e: &Entry) -> Value {
    let (value, failure) = f.status(&e.name);
    let mut status = json!({"value": value, "args": e.args});
    if let Some(why) = failure {
        status["failure"] = json!(why);
    }
    json!({"id": e.name, "object": "model", "owned_by": "tandem", "status": status})
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct ListQuery {
    reload: Option<String>,
    model: Option<String>,
}

async fn models(
    State(s): State<Shared>,
    Query(q): Query<ListQuery>,
) -> Result<Json<Value>, ApiError> {
    let f = fleet(&s);
    if q.reload.as_deref().is_some_and(|r| r != "0") {
        f.reload().map_err(ApiError::internal)?;
    }
    let data: Vec<Value> = f.entries().iter().map(|e| listed(f, e)).collect();
    Ok(Json(json!({"object": "list", "data": data})))
}

async fn model(
    State(s): State<Shared>,
    axum::extract::Path(id): axum::extract::Path<String>,
) -> Result<Json<Value>, ApiError> {
    let f = fleet(&s);
    let e = f.resolve(&id)?;
    Ok(Json(listed(f, &e)))
}

#[derive(Deserialize)]
struct Named {
    model: Option<String>,
}

fn named(b: &Bytes) -> Result<String, ApiError> {
    let n: Named = crate::validate::parse(b)?;
    n.model
        .filter(|m| !m.is_empty())
        .ok_or_else(|| ApiError::invalid("model", "model is required"))
}

/// `/models/load`: starts loading the model (its status says when it is loaded).
async fn load(State(s): State<Shared>, b: Bytes) -> Result<Json<Value>, ApiError> {
    let f = fleet(&s);
    let e = f.resolve(&named(&b)?)?;
    let fl = f.clone();
    tokio::spawn(async move { fl.start(&e).await });
    Ok(Json(json!({"success": true})))
}

async fn unload(State(s): State<Shared>, b: Bytes) -> Result<Json<Value>, ApiError> {
    let f = fleet(&s);
    let e = f.resolve(&named(&b)?)?;
    match f.unload(&e.name).await {
        true => Ok(Json(json!({"success": true}))),
        false => Err(ApiError::invalid(
            "model",
            format!("model '{}' is not loaded", e.name),
        )),
    }
}

/// `/props`: a model's with `?model=`, else the router's own.
async fn props(State(s): State<Shared>, req: Request) -> Response {
    let f = fleet(&s);
    if url_param(req.uri(), "model").is_some() {
        return forward(State(s.clone()), req).await;
    }
    Json(json!({
        "role": "router",
        "max_instances": f.max(),
        "models_autoload": f.autoload(),
        "loaded": f.loaded(),
        "build_info": crate::format::fingerprint(),
    }))
    .into_response()
}

async fn tags(State(s): State<Shared>) -> Json<Value> {
    let models: Vec<Value> = fleet(&s)
        .entries()
        .iter()
        .map(|e| {
            let name = format!("{}:latest", e.name);
            let size = std::fs::metadata(&e.path).map(|m| m.len()).unwrap_or(0);
            json!({"name": name, "model": name, "size": size,
                   "details": {"format": "gguf"}})
        })
        .collect();
    Json(json!({"models": models}))
}

async fn ps(State(s): State<Shared>) -> Json<Value> {
    let models: Vec<Value> = fleet(&s)
        .loaded()
        .iter()
        .map(|n| {
            let name = format!("{n}:latest");
            json!({"name": name, "model": name})
        })
        .collect();
    Json(json!({"models": models}))
}

async fn version() -> Json<Value> {
    Json(json!({"version": crate::ollama::OLLAMA_VERSION}))
}

/// The query parameter `name` of `uri`, percent-decoded.
fn url_param(uri: &axum::http::Uri, name: &str) -> Option<String> {
    let pairs = Query::<Vec<(String, String)>>::try_from_uri(uri).ok()?.0;
    pairs.into_iter().find(|(k, _)| k == name).map(|(_, v)| v)
}

/// The model a request names: `model` in a JSON body, else `in_query` (`?model=`), else the
/// only model loaded or the only one there is.
fn model_of(f: &Fleet, in_query: Option<String>, body: &Bytes) -> Result<Entry, ApiError> {
    #[derive(Deserialize)]
    struct M {
        model: Option<Value>,
    }
    let in_body = serde_json::from_slice::<M>(body)
        .ok()
        .and_then(|m| m.model)
        .and_then(|v| v.as_str().map(str::to_string));
    let asked = in_body.or(in_query);
    if let Some(name) = asked {
        return f.resolve(&name);
    }
    let entries = f.entries();
    let loaded = f.loaded();
    let only = match (entries.len(), loaded.len()) {
        (1, _) => Some(entries[0].name.clone()),
        (_, 1) => Some(loaded[0].clone()),
        _ => None,
    };
    match only {
        Some(n) => f.resolve(&n),
        None => Err(ApiError::invalid(
            "model",
            "model is required: this server routes requests to several models by name (GET /models lists them)",
        )),
    }
}

/// Headers that are not the connection's own (RFC 9110 §7.6.1: `Connection`, the ones it
/// names, and the hop-by-hop ones).
fn end_to_end(h: &HeaderMap) -> impl Iterator<Item = (&HeaderName, &HeaderValue)> {
    const HOP: [&str; 8] = [
        "connection",
        "keep-alive",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "proxy-authenticate",
    ];
    let named: Vec<String> = h
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|n| n.trim().to_ascii_lowercase())
        .collect();
    h.iter().filter(move |(k, _)| {
        let k = k.as_str();
        !HOP.contains(&k) && !named.iter().any(|n| n == k)
    })
}

fn bad_gateway(why: String) -> ApiError {
    ApiError {
        status: axum::http::StatusCode::BAD_GATEWAY,
        message: why,
        kind: "server_error",
        param: None,
        retry_after: None,
        context: None,
    }
}

/// Hands the request to its model's server and streams the answer back.
async fn forward(State(s): State<Shared>, req: Request) -> Response {
    let ollama = req.uri().path().starts_with("/api/");
    let answered = async {
        let f = fleet(&s).clone();
        let (parts, body) = req.into_parts();
        let bytes = axum::body::to_bytes(body, usize::MAX)
            .await
            .map_err(|e| ApiError::bad_request(e.to_string()))?;
        let query = url_param(&parts.uri, "model");
        let entry = match bytes.len() > crate::state::Lanes::SMALL {
            // A large body is read for its model off the runtime, as bodies are prepared.
            true => {
                let (fl, b) = (f.clone(), bytes.clone());
                tokio::task::spawn_blocking(move || model_of(&fl, query, &b))
                    .await
                    .map_err(|e| ApiError::internal(e.to_string()))??
            }
            false => model_of(&f, query, &bytes)?,
        };
        let lease = f.acquire(&entry, f.autoload()).await?;
        let path = parts
            .uri
            .path_and_query()
            .map_or("/", |p| p.as_str())
            .to_string();
        let mut out = hyper::Request::builder()
            .method(parts.method.clone())
            .uri(path);
        for (k, v) in end_to_end(&parts.headers) {
            if k != header::HOST && k != header::CONTENT_LENGTH {
                out = out.header(k, v);
            }
        }
        let out = out
            .header(header::HOST, "127.0.0.1")
            .body(Full::new(bytes))
            .map_err(|e| ApiError::internal(e.to_string()))?;
        let r = match send(lease.addr, out).await {
            Ok(r) => r,
            Err(_) if f.forget_if_dead(&lease) => {
                return Err(ApiError::unavailable(
                    format!(
                        "the server of model '{}' stopped; the next request loads it again",
                        entry.name
                    ),
                    1,
                ))
            }
            Err(e) => return Err(bad_gateway(e)),
        };
        let (head, incoming) = r.into_parts();
        // The lease lives as long as the answer's body does.
        let frames = BodyStream::new(incoming).filter_map(move |frame| {
            let _held = &lease;
            std::future::ready(match frame {
                Ok(f) => f.into_data().ok().map(Ok::<_, hyper::Error>),
                Err(e) => Some(Err(e)),
            })
        });
        let mut resp = Response::from_parts(head, Body::from_stream(frames));
        let kept: Vec<_> = end_to_end(resp.headers())
            .filter(|(k, _)| *k != header::CONTENT_LENGTH)
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let h = resp.headers_mut();
        h.clear();
        h.extend(kept);
        if parts.method == Method::HEAD {
            *resp.body_mut() = Body::empty();
        }
        Ok::<_, ApiError>(resp)
    };
    match answered.await {
        Ok(r) => r,
        Err(e) if ollama => {
            let mut r = (e.status, Json(json!({"error": e.message}))).into_response();
            if let Some(secs) = e.retry_after {
                r.headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from(secs));
            }
            r
        }
        Err(e) => e.into_response(),
    }
}
