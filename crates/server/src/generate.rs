//! The generation routes: `/v1/chat/completions`, `/v1/completions`, `/completion`.
//!
//! A validated request goes to the engine; its events come back on a channel that this
//! side owns. Dropping that channel is the cancellation: when a client goes away, axum
//! drops the handler (or the SSE body), the channel closes, and the engine frees the slot.

use std::collections::VecDeque;
use std::convert::Infallible;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::response::sse::{Event as SseEvent, Sse};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use engine::{Event, EventStream, TokenLogprob};
use futures_util::stream::{self, Stream};
use serde_json::Value;

use crate::error::ApiError;
use crate::format::Reply;
use crate::state::Shared;
use crate::tools::CallParser;
use crate::validate::{parse, RawRequest, Route, ValidGen};
use crate::{body, namespace_of, off_runtime, ready, KeyNamespace};

pub async fn chat(
    State(s): State<Shared>,
    key: Option<Extension<KeyNamespace>>,
    b: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    run(s, key, b, Route::Chat).await
}

pub async fn completions(
    State(s): State<Shared>,
    key: Option<Extension<KeyNamespace>>,
    b: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    run(s, key, b, Route::Completions).await
}

pub async fn native(
    State(s): State<Shared>,
    key: Option<Extension<KeyNamespace>>,
    b: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    run(s, key, b, Route::Native).await
}

async fn run(
    s: Shared,
    key: Option<Extension<KeyNamespace>>,
    b: Result<Bytes, BytesRejection>,
    route: Route,
) -> Result<Response, ApiError> {
    let bytes = body(b)?;
    let mut v: ValidGen = off_runtime(&s, bytes.len(), move |ready| {
        let raw: RawRequest = parse(&bytes)?;
        raw.validate(route, ready)
    })
    .await?;
    if let Some(Extension(KeyNamespace(k))) = key {
        v.req.cache_namespace = namespace_of((k, v.req.cache_namespace));
    }
    let ready = ready(&s)?;
    let (task, events) = ready.engine.submit(v.req)?;
    let calls = v.tools.as_ref().map(|spec| {
        CallParser::new(
            ready.tool_format,
            &spec.tools,
            crate::validate::rand_seed() ^ task,
        )
    });
    let reply = Reply::new(route, task, ready, v.include_usage, v.prompt_text, calls);
    let asked = v.logprobs.is_some();
    if v.stream {
        Ok(sse(reply, events, asked).into_response())
    } else {
        whole(reply, events, asked).await
    }
}

/// Waits for the end of the request and answers in one body.
async fn whole(
    mut reply: Reply,
    mut events: EventStream,
    asked: bool,
) -> Result<Response, ApiError> {
    let (mut text, mut tokens, mut lps) = (String::new(), Vec::new(), Vec::<TokenLogprob>::new());
    while let Some(ev) = events.recv().await {
        match ev {
            Event::Delta {
                text: t,
                tokens: ids,
                logprobs,
            } => {
                text.push_str(&t);
                tokens.extend(ids);
                lps.extend(logprobs);
            }
            Event::Done(summary) => {
                return Ok(Json(reply.complete(text, tokens, &lps, asked, &summary)).into_response())
            }
            Event::Rejected(m) => return Err(ApiError::bad_request(m)),
            Event::Failed(m) => return Err(ApiError::internal(m)),
            Event::Unavailable(m) => return Err(ApiError::box_down(m)),
        }
    }
    Err(ApiError::internal("the engine stopped"))
}

struct StreamState {
    events: EventStream,
    reply: Reply,
    asked: bool,
    out: VecDeque<SseEvent>,
    finished: bool,
}

fn data(v: &Value) -> SseEvent {
    SseEvent::default().data(v.to_string())
}

/// Streams the answer as server-sent events; OpenAI routes end with `data: [DONE]`.
fn sse(
    reply: Reply,
    events: EventStream,
    asked: bool,
) -> Sse<impl Stream<Item = Result<SseEvent, Infallible>>> {
    let out = reply.opening().iter().map(data).collect();
    let state = StreamState {
        events,
        reply,
        asked,
        out,
        finished: false,
    };
    Sse::new(stream::unfold(state, |mut st| async move {
        loop {
            if let Some(e) = st.out.pop_front() {
                return Some((Ok(e), st));
            }
            if st.finished {
                return None;
            }
            match st.events.recv().await {
                Some(Event::Delta {
                    text,
                    tokens,
                    logprobs,
                }) => {
                    if let Some(v) = st.reply.delta(&text, &tokens, &logprobs, st.asked) {
                        st.out.push_back(data(&v));
                    }
                }
                Some(Event::Done(summary)) => {
                    st.out.extend(st.reply.closing(&summary).iter().map(data));
                    if st.reply.route != Route::Native {
                        st.out.push_back(SseEvent::default().data("[DONE]"));
                    }
                    st.finished = true;
                }
                Some(Event::Rejected(m)) => {
                    st.out.push_back(data(&ApiError::bad_request(m).body()));
                    st.finished = true;
                }
                Some(Event::Failed(m)) => {
                    st.out.push_back(data(&ApiError::internal(m).body()));
                    st.finished = true;
                }
                Some(Event::Unavailable(m)) => {
                    st.out.push_back(data(&ApiError::box_down(m).body()));
                    st.finished = true;
                }
                None => {
                    st.out
                        .push_back(data(&ApiError::internal("the engine stopped").body()));
                    st.finished = true;
                }
            }
        }
    }))
}
