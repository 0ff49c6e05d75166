//! OpenAI's Responses API: `/v1/responses`, whole or streamed. A request is read into the
//! chat request the chat route runs ([`request`]), so templates, tools, constraints and
//! sampling are the same; the answer goes out as a `response` object or its events
//! ([`reply`]). Nothing is stored.

mod reply;
mod request;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::response::Response;
use axum::Extension;

use crate::error::ApiError;
use crate::format::chat_chain;
use crate::generate::{answer, submit};
use crate::state::Shared;
use crate::validate::{parse, Route};
use crate::{ready, KeyNamespace};
use reply::ResponseReply;
use request::{renamed, ResponsesRequest};

pub async fn responses(
    State(s): State<Shared>,
    key: Option<Extension<KeyNamespace>>,
    b: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let mut sub = submit(&s, key, b, |bytes, ready| {
        let req: ResponsesRequest = parse(bytes)?;
        let echo = req.echo();
        let raw = req.into_chat()?;
        Ok((raw.validate(Route::Chat, ready).map_err(renamed)?, echo))
    })
    .await?;
    let ready = ready(&s)?;
    let (events, calls) = sub.only();
    let chain = chat_chain(ready, &sub.answer, calls);
    let reply = ResponseReply::new(sub.task, ready.model_id.clone(), sub.extra, chain);
    answer(reply, sub.answer.stream, events).await
}
