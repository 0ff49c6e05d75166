//! The edge without a model: 503 while loading, authentication, error bodies, 404.

use std::path::PathBuf;
use std::sync::Arc;

use axum::body::{to_bytes, Body};
use axum::http::{Request, StatusCode};
use engine::EngineConfig;
use gguf::GgmlType;
use serde_json::Value;
use server::{AppState, ServerConfig};
use tower::ServiceExt;

fn loading_server(api_keys: &[&str]) -> axum::Router {
    let engine = EngineConfig {
        n_ctx: 1024,
        n_parallel: 1,
        kv_unified: false,
        n_batch: 64,
        n_ubatch: 64,
        n_threads: 1,
        kv_type: GgmlType::F16,
        queue_limit: 4,
        device: engine::DeviceKind::Cpu,
        step_budget: engine::StepBudget::AUTO,
        swa_full: false,
        ctx_checkpoints: 8,
        cache_ram_mib: 0,
        cache_dir: None,
    };
    let config = ServerConfig {
        api_keys: api_keys.iter().map(|k| k.to_string()).collect(),
        body_limit: 1024,
        ..ServerConfig::new(PathBuf::from("model.gguf"), engine)
    };
    server::router(Arc::new(AppState::new(config)))
}

async fn call(
    app: &axum::Router,
    method: &str,
    path: &str,
    auth: Option<&str>,
    body: &str,
) -> (StatusCode, Value, Option<String>) {
    let mut req = Request::builder().method(method).uri(path);
    if let Some(a) = auth {
        req = req.header("authorization", a);
    }
    let resp = app
        .clone()
        .oneshot(req.body(Body::from(body.to_string())).unwrap())
        .await
        .unwrap();
    let status = resp.status();
    let retry = resp
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().to_string());
    let bytes = to_bytes(resp.into_body(), 1 << 20).await.unwrap();
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        retry,
    )
}

#[tokio::test]
async fn health_is_503_while_loading_and_public() {
    let app = loading_server(&["k"]);
    let (status, body, retry) = call(&app, "GET", "/health", None, "").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(body["error"]["message"], "Loading model");
    assert_eq!(body["error"]["code"], 503);
    assert_eq!(retry.as_deref(), Some("1"));
}

#[tokio::test]
async fn a_wrong_or_missing_key_is_401_before_anything_else() {
    let app = loading_server(&["k1", "k2"]);
    for auth in [None, Some("Bearer nope"), Some("k2")] {
        let (status, body, _) = call(&app, "POST", "/v1/chat/completions", auth, "{}").await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{auth:?}");
        assert_eq!(body["error"]["type"], "authentication_error");
    }
    let (status, _, _) = call(
        &app,
        "POST",
        "/v1/chat/completions",
        Some("Bearer k2"),
        "{}",
    )
    .await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
}

#[tokio::test]
async fn oversized_bodies_are_413_and_unknown_routes_404() {
    let app = loading_server(&[]);
    let big = format!("{{\"prompt\": \"{}\"}}", "x".repeat(2000));
    let (status, body, _) = call(&app, "POST", "/v1/completions", None, &big).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    assert!(body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("1024 bytes"));
    let (status, body, _) = call(&app, "GET", "/nope", None, "").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(body["error"]["type"], "not_found_error");
}
