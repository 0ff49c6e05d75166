//! Errors: the crate's own (start-up) and the OpenAI-style error bodies of the HTTP API.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::json;

/// Why the server could not start or stopped.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: String,
        source: std::io::Error,
    },
    #[error(transparent)]
    Model(#[from] model::Error),
    #[error(transparent)]
    Text(#[from] text::Error),
    #[error(transparent)]
    Engine(#[from] engine::Error),
    #[error("the memory plan ({plan}) exceeds the {limit_mib:.1} MiB {source_of_limit}; {hint}")]
    OverMemory {
        plan: engine::MemoryPlan,
        limit_mib: f64,
        source_of_limit: String,
        hint: &'static str,
    },
    #[error("the draft model {path} cannot draft for this model: {why}")]
    DraftVocab { path: String, why: String },
    #[error("{0}")]
    Config(String),
    #[error("server: {0}")]
    Io(#[from] std::io::Error),
    #[error("split: {0}")]
    Split(#[from] split::Error),
}

/// Seconds a client is told to wait when a split model's box is down.
const BOX_RETRY_AFTER_S: u32 = 5;

/// An error answered to a client: `{"error":{"message","type","param","code"}}`.
#[derive(Debug, Clone)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
    pub kind: &'static str,
    /// The request field at fault.
    pub param: Option<String>,
    pub retry_after: Option<u32>,
    /// `(n_prompt_tokens, n_ctx)` of a prompt that does not fit, reported as llama-server does.
    pub context: Option<(usize, usize)>,
}

impl ApiError {
    /// 400: an invalid field.
    pub fn invalid(param: impl Into<String>, message: impl Into<String>) -> Self {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            message: message.into(),
            kind: "invalid_request_error",
            param: Some(param.into()).filter(|p: &String| !p.is_empty()),
            retry_after: None,
            context: None,
        }
    }

    /// 400 not about one field (bad JSON, a template failure).
    pub fn bad_request(message: impl Into<String>) -> Self {
        ApiError {
            param: None,
            ..Self::invalid("", message)
        }
    }

    /// 403 for a request whose Host header names a host this server does not answer (a
    /// page on another site reaching a loopback server through DNS rebinding).
    pub fn forbidden_host(host: &str) -> Self {
        ApiError {
            status: StatusCode::FORBIDDEN,
            message: format!("host '{host}' is not one this server answers (see --allowed-hosts)"),
            kind: "permission_error",
            param: None,
            retry_after: None,
            context: None,
        }
    }

    pub fn forbidden(message: impl Into<String>) -> Self {
        ApiError {
            status: StatusCode::FORBIDDEN,
            message: message.into(),
            kind: "permission_error",
            param: None,
            retry_after: None,
            context: None,
        }
    }

    pub fn unauthorized() -> Self {
        ApiError {
            status: StatusCode::UNAUTHORIZED,
            message: "Invalid API Key".into(),
            kind: "authentication_error",
            param: None,
            retry_after: None,
            context: None,
        }
    }

    pub fn too_large(limit: usize) -> Self {
        ApiError {
            status: StatusCode::PAYLOAD_TOO_LARGE,
            message: format!("the request body exceeds the limit of {limit} bytes"),
            kind: "invalid_request_error",
            param: None,
            retry_after: None,
            context: None,
        }
    }

    /// 404: no such route or object.
    pub fn not_found(message: impl Into<String>) -> Self {
        ApiError {
            status: StatusCode::NOT_FOUND,
            message: message.into(),
            kind: "not_found_error",
            param: None,
            retry_after: None,
            context: None,
        }
    }

    /// 405: the route exists, the method does not.
    pub fn method_not_allowed() -> Self {
        ApiError {
            status: StatusCode::METHOD_NOT_ALLOWED,
            message: "this route does not take this method".into(),
            kind: "invalid_request_error",
            param: None,
            retry_after: None,
            context: None,
        }
    }

    /// 408 for a body that did not arrive whole within the body deadline.
    pub fn body_timeout(limit: std::time::Duration) -> Self {
        ApiError {
            status: StatusCode::REQUEST_TIMEOUT,
            message: format!(
                "the request body did not arrive within {} s (--timeout-body)",
                limit.as_secs_f64()
            ),
            kind: "invalid_request_error",
            param: None,
            retry_after: None,
            context: None,
        }
    }

    /// 503 for a split model whose box is down: retry once it may be back.
    pub fn box_down(message: impl Into<String>) -> Self {
        Self::unavailable(message, BOX_RETRY_AFTER_S)
    }

    pub fn unavailable(message: impl Into<String>, retry_after: u32) -> Self {
        ApiError {
            status: StatusCode::SERVICE_UNAVAILABLE,
            message: message.into(),
            kind: "unavailable_error",
            param: None,
            retry_after: Some(retry_after),
            context: None,
        }
    }

    pub fn not_supported(message: impl Into<String>) -> Self {
        ApiError {
            status: StatusCode::NOT_IMPLEMENTED,
            message: message.into(),
            kind: "not_supported_error",
            param: None,
            retry_after: None,
            context: None,
        }
    }

    pub fn internal(message: impl Into<String>) -> Self {
        ApiError {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            message: message.into(),
            kind: "server_error",
            param: None,
            retry_after: None,
            context: None,
        }
    }

    /// 400 for a prompt that leaves no room in a slot for one generated token (llama-server's
    /// `exceed_context_size_error`, with its sizes).
    pub fn exceeds_context(field: &str, n_prompt_tokens: usize, n_ctx: usize) -> Self {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            message: format!(
                "the prompt ({n_prompt_tokens} tokens) exceeds the context of a slot ({n_ctx} positions, with one for the answer)"
            ),
            kind: "exceed_context_size_error",
            param: Some(field.into()),
            retry_after: None,
            context: Some((n_prompt_tokens, n_ctx)),
        }
    }

    /// The JSON body (also sent as an SSE event when a stream fails).
    pub fn body(&self) -> serde_json::Value {
        let mut error = json!({
            "message": self.message,
            "type": self.kind,
            "param": self.param,
            "code": self.status.as_u16(),
        });
        if let Some((n_prompt_tokens, n_ctx)) = self.context {
            error["n_prompt_tokens"] = json!(n_prompt_tokens);
            error["n_ctx"] = json!(n_ctx);
        }
        json!({ "error": error })
    }
}

impl From<engine::Error> for ApiError {
    fn from(e: engine::Error) -> Self {
        match e {
            engine::Error::QueueFull { .. } => ApiError::unavailable(e.to_string(), 1),
            engine::Error::Unavailable(m) => ApiError::box_down(m),
            e => ApiError::internal(e.to_string()),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut r = (self.status, axum::Json(self.body())).into_response();
        if let Some(s) = self.retry_after {
            r.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(s));
        }
        r
    }
}
