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
use engine::{Event, EventStream, Summary, TokenLogprob};
use futures_util::stream::{self, Stream};
use serde_json::Value;

use crate::error::ApiError;
use crate::format::Reply;
use crate::state::Ready;
use crate::state::Shared;
use crate::tools::CallParser;
use crate::validate::{parse, AnswerSpec, RawRequest, Route, ValidGen};
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

/// llama-server's `/infill`: a `/completion` of the FIM prompt ([`crate::infill`]).
pub async fn infill(
    State(s): State<Shared>,
    key: Option<Extension<KeyNamespace>>,
    b: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    answer_with(s, key, b, Route::Native, crate::infill::prepare).await
}

/// A request queued: its task, its events, how its answer is given, the parser of its
/// tool calls when it offered tools, and what else its route took from the body.
pub(crate) struct Submitted<X = ()> {
    /// The first choice's task.
    pub task: u64,
    /// Tokens in each choice's prompt.
    pub n_prompts: Vec<usize>,
    /// Per choice: its events, and the parser of its tool calls.
    pub events: Vec<EventStream>,
    pub calls: Vec<Option<CallParser>>,
    pub answer: AnswerSpec,
    pub extra: X,
}

impl<X> Submitted<X> {
    /// The only choice of a route that gives one: its events and tool-call parser.
    pub fn only(&mut self) -> (EventStream, Option<CallParser>) {
        (self.events.remove(0), self.calls.remove(0))
    }
}

/// Validates a body with `prepare` off the runtime, and queues it (its prompts cached in the
/// namespace of its API key).
pub(crate) async fn submit<F, X>(
    s: &Shared,
    key: Option<Extension<KeyNamespace>>,
    b: Result<Bytes, BytesRejection>,
    prepare: F,
) -> Result<Submitted<X>, ApiError>
where
    F: FnOnce(&Bytes, &Ready) -> Result<(ValidGen, X), ApiError> + Send + 'static,
    X: Send + 'static,
{
    let bytes = body(b)?;
    let (v, extra) = off_runtime(s, bytes.len(), move |ready| prepare(&bytes, ready)).await?;
    enqueue(s, key, v, extra).await
}

/// Queues a validated request, its prompts cached in the namespace of its API key.
pub(crate) async fn enqueue<X>(
    s: &Shared,
    key: Option<Extension<KeyNamespace>>,
    mut v: ValidGen,
    extra: X,
) -> Result<Submitted<X>, ApiError> {
    if let Some(Extension(KeyNamespace(k))) = key {
        for c in &mut v.choices {
            c.cache_namespace = namespace_of((k, c.cache_namespace));
        }
    }
    let ready = ready(s)?;
    let n_prompts: Vec<usize> = v.choices.iter().map(|c| c.prompt.len()).collect();
    let (task, events) = crate::choices::queue(&ready.engine, v.choices, v.answer.n).await?;
    let calls = (0..events.len() as u64)
        .map(|i| {
            v.answer.tools.as_ref().map(|spec| {
                CallParser::new(
                    ready.tool_format,
                    &spec.tools,
                    crate::validate::rand_seed() ^ task ^ (i << 48),
                )
            })
        })
        .collect();
    Ok(Submitted {
        task,
        n_prompts,
        events,
        calls,
        answer: v.answer,
        extra,
    })
}

async fn run(
    s: Shared,
    key: Option<Extension<KeyNamespace>>,
    b: Result<Bytes, BytesRejection>,
    route: Route,
) -> Result<Response, ApiError> {
    let prepare =
        move |bytes: &Bytes, ready: &Ready| parse::<RawRequest>(bytes)?.validate(route, ready);
    answer_with(s, key, b, route, prepare).await
}

/// Validates a body of `route` with `prepare`, queues it, and answers in the route's shape.
async fn answer_with<F>(
    s: Shared,
    key: Option<Extension<KeyNamespace>>,
    b: Result<Bytes, BytesRejection>,
    route: Route,
    prepare: F,
) -> Result<Response, ApiError>
where
    F: FnOnce(&Bytes, &Ready) -> Result<ValidGen, ApiError> + Send + 'static,
{
    let mut sub = submit(&s, key, b, move |bytes, ready| {
        Ok((prepare(bytes, ready)?, ()))
    })
    .await?;
    let (asked, stream, n) = (
        sub.answer.logprobs.is_some(),
        sub.answer.stream,
        sub.answer.n,
    );
    let ready = ready(&s)?;
    if sub.events.len() == 1 {
        let (events, calls) = sub.only();
        let mut reply = Reply::new(route, sub.task, ready, sub.answer, calls);
        reply.n_prompt = sub.n_prompts[0];
        return match stream {
            true => Ok(sse(
                OpenAiStream {
                    reply,
                    asked,
                    among: None,
                },
                events,
            )
            .into_response()),
            false => whole(reply, events, asked).await,
        };
    }
    let replies: Vec<Reply> = std::mem::take(&mut sub.calls)
        .into_iter()
        .enumerate()
        .map(|(i, calls)| {
            let mut r = Reply::new(route, sub.task, ready, sub.answer.clone(), calls);
            r.index = i;
            r.n_prompt = sub.n_prompts[i];
            r
        })
        .collect();
    match stream {
        true => Ok(crate::choices::streamed(replies, sub.events, asked, n).into_response()),
        false => crate::choices::whole(replies, sub.events, asked, n).await,
    }
}

/// A generation request answered with an embedding: a bug of this server.
fn not_text() -> ApiError {
    ApiError::internal("the engine answered an embedding where text was asked")
}

/// Waits for the end of a request: its text, tokens and log-probabilities, and summary.
pub(crate) async fn collect(
    mut events: EventStream,
) -> Result<(String, Vec<u32>, Vec<TokenLogprob>, Summary), ApiError> {
    let (mut text, mut tokens, mut lps) = (String::new(), Vec::new(), Vec::<TokenLogprob>::new());
    while let Some(ev) = events.recv().await {
        match ev {
            Event::Delta {
                text: t,
                tokens: ids,
                logprobs,
                ..
            } => {
                text.push_str(&t);
                tokens.extend(ids);
                lps.extend(logprobs);
            }
            Event::Done(summary) => return Ok((text, tokens, lps, summary)),
            Event::Progress(_) => {}
            Event::Rejected(m) => return Err(ApiError::bad_request(m)),
            Event::Failed(m) => return Err(ApiError::internal(m)),
            Event::Unavailable(m) => return Err(ApiError::box_down(m)),
            Event::Embedding(_) => return Err(not_text()),
        }
    }
    Err(ApiError::internal("the engine stopped"))
}

/// Waits for the end of the request and answers in one body.
async fn whole(mut reply: Reply, events: EventStream, asked: bool) -> Result<Response, ApiError> {
    let (text, tokens, lps, summary) = collect(events).await?;
    Ok(Json(reply.complete(text, tokens, &lps, asked, &summary)).into_response())
}

/// The items of an answer as it is streamed, in some API's shape: server-sent events
/// (`T` = [`SseEvent`]) or, for Ollama's API, lines of JSON.
pub(crate) trait Streamed<T = SseEvent>: Send + 'static {
    /// What the stream starts with.
    fn opening(&mut self) -> Vec<T>;
    /// The items of the next piece of the answer.
    fn delta(&mut self, slot: usize, text: &str, tokens: &[u32], lps: &[TokenLogprob]) -> Vec<T>;
    /// The items that end the stream.
    fn closing(&mut self, s: &Summary) -> Vec<T>;
    /// The item that ends a stream that failed.
    fn failed(&mut self, e: ApiError) -> T;
    /// The items of a report of the prompt's reading (none unless the API has them).
    fn progress(&mut self, _: &engine::Progress) -> Vec<T> {
        Vec::new()
    }
}

fn data(v: &Value) -> SseEvent {
    SseEvent::default().data(v.to_string())
}

/// OpenAI's and llama.cpp's streams: `data:` lines, the OpenAI routes ending with `[DONE]`.
/// One choice among several leaves the end to [`crate::choices`], and tells it its summary.
pub(crate) struct OpenAiStream {
    pub reply: Reply,
    pub asked: bool,
    pub among: Option<crate::choices::Ended>,
}

impl Streamed for OpenAiStream {
    fn opening(&mut self) -> Vec<SseEvent> {
        self.reply.opening().iter().map(data).collect()
    }

    fn delta(
        &mut self,
        slot: usize,
        text: &str,
        tokens: &[u32],
        lps: &[TokenLogprob],
    ) -> Vec<SseEvent> {
        self.reply
            .delta(slot, text, tokens, lps, self.asked)
            .iter()
            .map(data)
            .collect()
    }

    fn closing(&mut self, s: &Summary) -> Vec<SseEvent> {
        let mut out: Vec<SseEvent> = self.reply.closing(s).iter().map(data).collect();
        match &self.among {
            Some(all) => all
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push((self.reply.index, s.clone())),
            None if self.reply.route != Route::Native => {
                out.push(SseEvent::default().data("[DONE]"))
            }
            None => {}
        }
        out
    }

    fn failed(&mut self, e: ApiError) -> SseEvent {
        data(&e.body())
    }

    fn progress(&mut self, p: &engine::Progress) -> Vec<SseEvent> {
        self.reply.progress(p).iter().map(data).collect()
    }
}

struct StreamState<A, T> {
    events: EventStream,
    answer: A,
    out: VecDeque<T>,
    finished: bool,
}

/// Streams the answer as server-sent events.
pub(crate) fn sse<A: Streamed>(
    answer: A,
    events: EventStream,
) -> Sse<impl Stream<Item = Result<SseEvent, Infallible>>> {
    Sse::new(sse_events(answer, events))
}

/// The server-sent events of an answer.
pub(crate) fn sse_events<A: Streamed>(
    answer: A,
    events: EventStream,
) -> impl Stream<Item = Result<SseEvent, Infallible>> {
    items(answer, events)
}

/// The items of an answer, as `answer` makes them from the engine's `events`.
pub(crate) fn items<T: Send + 'static, A: Streamed<T>>(
    mut answer: A,
    events: EventStream,
) -> impl Stream<Item = Result<T, Infallible>> {
    let out = answer.opening().into();
    let state = StreamState {
        events,
        answer,
        out,
        finished: false,
    };
    stream::unfold(state, |mut st| async move {
        loop {
            if let Some(e) = st.out.pop_front() {
                return Some((Ok(e), st));
            }
            if st.finished {
                return None;
            }
            let failed = match st.events.recv().await {
                Some(Event::Delta {
                    slot,
                    text,
                    tokens,
                    logprobs,
                }) => {
                    st.out
                        .extend(st.answer.delta(slot, &text, &tokens, &logprobs));
                    continue;
                }
                Some(Event::Progress(p)) => {
                    st.out.extend(st.answer.progress(&p));
                    continue;
                }
                Some(Event::Done(summary)) => {
                    st.out.extend(st.answer.closing(&summary));
                    st.finished = true;
                    continue;
                }
                Some(Event::Rejected(m)) => ApiError::bad_request(m),
                Some(Event::Failed(m)) => ApiError::internal(m),
                Some(Event::Unavailable(m)) => ApiError::box_down(m),
                Some(Event::Embedding(_)) => not_text(),
                None => ApiError::internal("the engine stopped"),
            };
            st.out.push_back(st.answer.failed(failed));
            st.finished = true;
        }
    })
}

/// An event of a stream of named events: its name and its JSON.
pub(crate) type SseData = (&'static str, Value);

/// An answer in an API whose streams are named events (Anthropic's Messages, OpenAI's
/// Responses).
pub(crate) trait EventReply: Send + 'static {
    /// The whole answer to `text`.
    fn complete(&mut self, text: &str, s: &Summary) -> Value;
    /// What a stream starts with.
    fn opening(&mut self) -> Vec<SseData>;
    /// The events of the next piece of the answer, `n_tokens` tokens.
    fn delta(&mut self, text: &str, n_tokens: usize) -> Vec<SseData>;
    /// The events that end the stream.
    fn closing(&mut self, s: &Summary) -> Vec<SseData>;
    /// The event that ends a stream that failed.
    fn failed(&mut self, e: &ApiError) -> SseData;
    /// The events of a report of the prompt's reading (none unless the API has them).
    fn progress(&mut self, _: &engine::Progress) -> Vec<SseData> {
        Vec::new()
    }
}

struct Named<R>(R);

fn named(v: Vec<SseData>) -> Vec<SseEvent> {
    v.into_iter().map(named_one).collect()
}

fn named_one((name, data): SseData) -> SseEvent {
    SseEvent::default().event(name).data(data.to_string())
}

impl<R: EventReply> Streamed for Named<R> {
    fn opening(&mut self) -> Vec<SseEvent> {
        named(self.0.opening())
    }

    fn delta(&mut self, _: usize, text: &str, tokens: &[u32], _: &[TokenLogprob]) -> Vec<SseEvent> {
        named(self.0.delta(text, tokens.len()))
    }

    fn progress(&mut self, p: &engine::Progress) -> Vec<SseEvent> {
        named(self.0.progress(p))
    }

    fn closing(&mut self, s: &Summary) -> Vec<SseEvent> {
        named(self.0.closing(s))
    }

    fn failed(&mut self, e: ApiError) -> SseEvent {
        named_one(self.0.failed(&e))
    }
}

/// Answers with `reply`: a stream of its events, or its whole answer at the end.
pub(crate) async fn answer<R: EventReply>(
    mut reply: R,
    stream: bool,
    events: EventStream,
) -> Result<Response, ApiError> {
    if stream {
        return Ok(sse(Named(reply), events).into_response());
    }
    let (text, _, _, summary) = collect(events).await?;
    Ok(Json(reply.complete(&text, &summary)).into_response())
}
