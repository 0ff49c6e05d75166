//! Vertex AI's custom-container contract, as llama-server keeps it when `AIP_MODE` is
//! `PREDICTION`: `POST {AIP_PREDICT_ROUTE}` (default `/predict`) takes
//! `{"instances": [{"@requestFormat": FORMAT, ...body}]}` and answers
//! `{"predictions": [answer, ...]}`, each instance sent to the route FORMAT names (a path, or
//! its camel-case alias: `chatCompletions` is `/v1/chat/completions`), never streamed;
//! `AIP_HEALTH_ROUTE` answers as `/health`.

use axum::body::{Body, Bytes};
use axum::extract::rejection::BytesRejection;
use axum::extract::Request;
use axum::http::{header, Method};
use axum::{Extension, Json, Router};
use serde_json::{json, Value};
use tower::ServiceExt;

use crate::error::ApiError;
use crate::{body, KeyNamespace};

/// Most instances in one request (llama-server's limit).
const MAX_INSTANCES: usize = 128;

/// The routes an instance may name.
pub const ROUTES: &[&str] = &[
    "/v1/chat/completions",
    "/chat/completions",
    "/v1/completions",
    "/completions",
    "/completion",
    "/infill",
    "/v1/messages",
    "/v1/messages/count_tokens",
    "/v1/responses",
    "/v1/embeddings",
    "/embeddings",
    "/embedding",
    "/rerank",
    "/tokenize",
    "/detokenize",
    "/apply-template",
    "/chat/completions/input_tokens",
];

/// Where the contract is served, from the environment; `None` unless `AIP_MODE` is
/// `PREDICTION`.
#[derive(Debug, Clone)]
pub struct Gcp {
    pub predict: String,
    pub health: Option<String>,
}

impl Gcp {
    pub fn from_env(env: impl Fn(&str) -> Option<String>) -> Option<Gcp> {
        if env("AIP_MODE").as_deref() != Some("PREDICTION") {
            return None;
        }
        let route = |name: &str| {
            env(name)
                .filter(|v| !v.is_empty())
                .map(|v| match v.starts_with('/') {
                    true => v,
                    false => format!("/{v}"),
                })
        };
        Some(Gcp {
            predict: route("AIP_PREDICT_ROUTE").unwrap_or_else(|| "/predict".into()),
            health: route("AIP_HEALTH_ROUTE"),
        })
    }
}

/// llama-server's alias of a path: `/v1/chat/completions` → `chatCompletions`.
fn alias(path: &str) -> String {
    let p = path.strip_prefix("/v1").unwrap_or(path);
    let mut out = String::new();
    let mut cap = false;
    for c in p.trim_start_matches('/').chars() {
        if matches!(c, '/' | '-' | '_') {
            cap = true;
        } else {
            out.push(if cap { c.to_ascii_uppercase() } else { c });
            cap = false;
        }
    }
    out
}

/// The route an instance's `@requestFormat` names (the first route with that alias).
fn route_of(format: &str) -> Option<&'static str> {
    ROUTES
        .iter()
        .copied()
        .find(|r| *r == format || alias(r) == format)
}

/// One instance's answer, or its error as `{"error": ...}`.
async fn predict_one(routes: Router, key: Option<KeyNamespace>, instance: Value) -> Value {
    let fail = |e: ApiError| e.body();
    let Value::Object(mut payload) = instance else {
        return fail(ApiError::bad_request("each instance must be a JSON object"));
    };
    let Some(Value::String(format)) = payload.remove("@requestFormat") else {
        return fail(ApiError::bad_request(
            "each instance must include a string @requestFormat",
        ));
    };
    let Some(path) = route_of(&format) else {
        return fail(ApiError::bad_request(format!(
            "no handler registered for @requestFormat: {format}"
        )));
    };
    if payload.contains_key("stream") {
        payload.insert("stream".into(), Value::Bool(false));
    }
    let mut req = Request::builder()
        .method(Method::POST)
        .uri(path)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(Value::Object(payload).to_string()))
        .expect("a request of a known route");
    if let Some(k) = key {
        req.extensions_mut().insert(k);
    }
    let resp = match routes.oneshot(req).await {
        Ok(r) => r,
        Err(never) => match never {},
    };
    match axum::body::to_bytes(resp.into_body(), usize::MAX).await {
        Ok(b) => serde_json::from_slice(&b).unwrap_or_else(|_| json!(String::from_utf8_lossy(&b))),
        Err(e) => fail(ApiError::internal(format!("reading the answer: {e}"))),
    }
}

/// `POST {AIP_PREDICT_ROUTE}`: every instance answered by its route, at once.
pub(crate) async fn predict(
    Extension(routes): Extension<Router>,
    key: Option<Extension<KeyNamespace>>,
    b: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, ApiError> {
    let bytes = body(b)?;
    let body: Value = crate::validate::parse(&bytes)?;
    let Some(Value::Array(instances)) = body.get("instances") else {
        return Err(ApiError::invalid(
            "instances",
            "request body must include an array field named instances",
        ));
    };
    if instances.len() > MAX_INSTANCES {
        return Err(ApiError::invalid(
            "instances",
            format!("instances array exceeds maximum size of {MAX_INSTANCES}"),
        ));
    }
    let key = key.map(|Extension(k)| k);
    let answers = instances
        .iter()
        .map(|i| predict_one(routes.clone(), key, i.clone()));
    let predictions = futures_util::future::join_all(answers).await;
    Ok(Json(json!({"predictions": predictions})))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aliases_are_llama_servers() {
        assert_eq!(alias("/v1/chat/completions"), "chatCompletions");
        assert_eq!(alias("/apply-template"), "applyTemplate");
        assert_eq!(route_of("chatCompletions"), Some("/v1/chat/completions"));
        assert_eq!(route_of("/completion"), Some("/completion"));
        assert_eq!(
            route_of("messagesCountTokens"),
            Some("/v1/messages/count_tokens")
        );
        assert_eq!(route_of("nope"), None);
    }
}
