//! Anthropic's Messages API: `/v1/messages` (whole or streamed) and
//! `/v1/messages/count_tokens`. A request is read into the chat request the OpenAI route
//! runs ([`request`]), so templates, tools, constraints and sampling are the same; the
//! answer goes out in Anthropic's shapes ([`reply`]), errors too. Keys come in `x-api-key`
//! (or `Authorization: Bearer`), as on every route.

mod reply;
mod request;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde_json::json;

use crate::error::ApiError;
use crate::format::chat_chain;
use crate::generate::{answer, submit};
use crate::state::Shared;
use crate::validate::{parse, Route};
use crate::{body, off_runtime, ready, KeyNamespace};
use reply::{error_body, MessageReply};
use request::{renamed, MessagesRequest};

/// An error in Anthropic's shape, with its status (and Retry-After).
fn answer_error(e: ApiError) -> Response {
    let mut r = (e.status, Json(error_body(&e))).into_response();
    if let Some(s) = e.retry_after {
        r.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(s));
    }
    r
}

pub async fn messages(
    State(s): State<Shared>,
    key: Option<Extension<KeyNamespace>>,
    b: Result<Bytes, BytesRejection>,
) -> Response {
    run(s, key, b).await.unwrap_or_else(answer_error)
}

pub async fn count_tokens(State(s): State<Shared>, b: Result<Bytes, BytesRejection>) -> Response {
    let counted = async {
        let bytes = body(b)?;
        off_runtime(&s, bytes.len(), move |ready| {
            let req: MessagesRequest = parse(&bytes)?;
            let raw = req.into_chat(true)?;
            let n = raw.chat_prompt_tokens(ready).map_err(renamed)?;
            Ok(Json(json!({"input_tokens": n})).into_response())
        })
        .await
    };
    counted.await.unwrap_or_else(answer_error)
}

async fn run(
    s: Shared,
    key: Option<Extension<KeyNamespace>>,
    b: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let mut sub = submit(&s, key, b, |bytes, ready| {
        let req: MessagesRequest = parse(bytes)?;
        let raw = req.into_chat(false)?;
        Ok((raw.validate(Route::Chat, ready).map_err(renamed)?, ()))
    })
    .await?;
    let ready = ready(&s)?;
    let (events, calls) = sub.only();
    let chain = chat_chain(ready, &sub.answer, calls);
    let reply = MessageReply::new(sub.task, ready.model_id.clone(), sub.n_prompts[0], chain);
    answer(reply, sub.answer.stream, events).await
}
