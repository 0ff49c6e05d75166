//! OpenAI's Responses API: `/v1/responses`, whole or streamed, and stored responses. A
//! request is read into the chat request the chat route runs ([`request`]), so templates,
//! tools, constraints and sampling are the same; the answer goes out as a `response` object
//! or its events ([`reply`]). Responses are stored unless `store: false` ([`store`]):
//! `previous_response_id` continues one, `GET` and `DELETE /v1/responses/{id}` read and
//! forget one.

mod reply;
mod request;
pub mod store;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::response::Response;
use axum::{Extension, Json};
use serde_json::{json, Value};

use crate::error::ApiError;
use crate::format::chat_chain;
use crate::generate::{answer, submit};
use crate::state::Shared;
use crate::validate::{parse, Route};
use crate::{namespace_of, ready, KeyNamespace};
use reply::ResponseReply;
use request::{renamed, ResponsesRequest};

/// The namespace of the API key a request came with.
fn namespace(key: &Option<Extension<KeyNamespace>>) -> u64 {
    key.as_ref()
        .map_or(kv::SHARED, |Extension(KeyNamespace(k))| {
            namespace_of((*k, kv::SHARED))
        })
}

/// The stored items `req` continues (`previous_response_id`), or a 400 naming it.
fn previous(s: &Shared, ns: u64, req: &ResponsesRequest) -> Result<Vec<Value>, ApiError> {
    match &req.previous_response_id {
        None => Ok(Vec::new()),
        Some(id) => s.responses.items(ns, id).ok_or_else(|| {
            ApiError::invalid(
                "previous_response_id",
                format!("previous_response_id '{id}' is not a response stored here"),
            )
        }),
    }
}

/// llama-server's `/v1/responses/input_tokens`: the tokens the request's prompt would take.
pub async fn input_tokens(
    State(s): State<Shared>,
    key: Option<Extension<KeyNamespace>>,
    b: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, ApiError> {
    let ns = namespace(&key);
    let bytes = crate::body(b)?;
    let shared = s.clone();
    let n = crate::off_runtime(&s, bytes.len(), move |ready| {
        let req: ResponsesRequest = parse(&bytes)?;
        let previous = previous(&shared, ns, &req)?;
        let (raw, _) = req.into_chat(previous)?;
        raw.chat_prompt_tokens(ready).map_err(renamed)
    })
    .await?;
    Ok(Json(json!({"input_tokens": n})))
}

pub async fn responses(
    State(s): State<Shared>,
    key: Option<Extension<KeyNamespace>>,
    b: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let ns = namespace(&key);
    let shared = s.clone();
    let mut sub = submit(&s, key, b, move |bytes, ready| {
        let req: ResponsesRequest = parse(bytes)?;
        let previous = previous(&shared, ns, &req)?;
        let (keep, echo) = (req.store != Some(false), req.echo());
        let (raw, items) = req.into_chat(previous)?;
        let valid = raw.validate(Route::Chat, ready).map_err(renamed)?;
        Ok((valid, (echo, keep.then_some(items))))
    })
    .await?;
    let ready = ready(&s)?;
    let (events, calls) = sub.only();
    let chain = chat_chain(ready, &sub.answer, calls);
    let (echo, keep) = std::mem::take(&mut sub.extra);
    let mut reply = ResponseReply::new(sub.task, ready.model_id.clone(), echo, chain)
        .with_telemetry(sub.answer.progress, sub.answer.timings_per_token);
    if let Some(items) = keep {
        let store = s.clone();
        reply = reply.when_done(move |r| store.responses.keep(ns, items, r.clone()));
    }
    answer(reply, sub.answer.stream, events).await
}

/// `GET /v1/responses/{id}`.
pub async fn get(
    State(s): State<Shared>,
    key: Option<Extension<KeyNamespace>>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    s.responses
        .get(namespace(&key), &id)
        .map(Json)
        .ok_or_else(|| ApiError::not_found(format!("no response '{id}' is stored here")))
}

/// `DELETE /v1/responses/{id}`.
pub async fn delete(
    State(s): State<Shared>,
    key: Option<Extension<KeyNamespace>>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    match s.responses.delete(namespace(&key), &id) {
        true => Ok(Json(
            json!({"id": id, "object": "response.deleted", "deleted": true}),
        )),
        false => Err(ApiError::not_found(format!(
            "no response '{id}' is stored here"
        ))),
    }
}
