//! Several choices in one answer (`n`, and prompt lists on `/v1/completions`). Each choice
//! is an engine request with its own seed stream (the request's seed plus the choice's
//! number within its prompt). The choices of a prompt after the first are queued once the
//! first has computed the prompt (its first event), so that they hold its KV blocks
//! ([`kv::KvPool::share`]) instead of computing it again.
//!
//! The answer has OpenAI's choices in order (index = prompt × n + choice) and their usage
//! summed (the prompt tokens of each prompt counted once); streamed, the choices' chunks
//! interleave as they come, and one usage chunk and one `[DONE]` end the stream. On
//! `/completion` (several prompts) the answer is the array of each prompt's answer, and a
//! stream interleaves their chunks, each with its `index`.

use std::convert::Infallible;
use std::sync::{Arc, Mutex};

use axum::response::sse::{Event as SseEvent, Sse};
use axum::response::{IntoResponse, Response};
use axum::Json;
use engine::{EngineHandle, Event, EventStream, GenRequest, Summary};
use futures_util::stream::{self, Stream, StreamExt};
use serde_json::Value;

use crate::error::ApiError;
use crate::format::{usage, Reply};
use crate::generate::{collect, sse_events, OpenAiStream};
use crate::validate::Route;

/// The summaries of the choices that ended, by choice.
pub(crate) type Ended = Arc<Mutex<Vec<(usize, Summary)>>>;

/// Forwards `from` after `first` into a stream of its own; dropping that one drops `from`
/// (which cancels the request).
fn resume(mut from: EventStream, first: Vec<Event>) -> EventStream {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    for ev in first {
        let _ = tx.send(ev);
    }
    tokio::spawn(async move {
        loop {
            tokio::select! {
                ev = from.recv() => match ev.map(|ev| tx.send(ev)) {
                    Some(Ok(())) => {}
                    _ => break,
                },
                _ = tx.closed() => break,
            }
        }
    });
    rx
}

/// Queues `reqs` (`n` choices per prompt, in order): the first task and every choice's
/// events.
pub(crate) async fn queue(
    engine: &EngineHandle,
    reqs: Vec<GenRequest>,
    n: usize,
) -> Result<(u64, Vec<EventStream>), ApiError> {
    let mut reqs: Vec<Option<GenRequest>> = reqs.into_iter().map(Some).collect();
    let mut events: Vec<Option<EventStream>> = (0..reqs.len()).map(|_| None).collect();
    let mut first_task = None;
    for i in (0..reqs.len()).step_by(n) {
        let (task, rx) = engine.submit(reqs[i].take().expect("queued once"))?;
        first_task.get_or_insert(task);
        events[i] = Some(rx);
    }
    if n > 1 {
        for i in (0..reqs.len()).step_by(n) {
            let mut rx = events[i].take().expect("queued above");
            let mut first = Vec::new();
            while let Some(ev) = rx.recv().await {
                let read = !matches!(ev, Event::Progress(_));
                first.push(ev);
                if read {
                    break;
                }
            }
            events[i] = Some(resume(rx, first));
        }
    }
    for (req, ev) in reqs.iter_mut().zip(events.iter_mut()) {
        if let Some(req) = req.take() {
            *ev = Some(engine.submit(req)?.1);
        }
    }
    let events = events.into_iter().map(|e| e.expect("queued")).collect();
    Ok((first_task.expect("at least one choice"), events))
}

/// The usage of choices ending with `summaries`, `n` per prompt: each prompt's tokens once.
fn total(summaries: &[Summary], n: usize) -> Summary {
    let mut t = summaries[0].clone();
    t.prompt_n = summaries.iter().step_by(n).map(|s| s.prompt_n).sum();
    t.cache_n = summaries.iter().map(|s| s.cache_n).sum();
    t.predicted_n = summaries.iter().map(|s| s.predicted_n).sum();
    t
}

/// Waits for every choice and answers in one body.
pub(crate) async fn whole(
    mut replies: Vec<Reply>,
    events: Vec<EventStream>,
    asked: bool,
    n: usize,
) -> Result<Response, ApiError> {
    let done = futures_util::future::try_join_all(events.into_iter().map(collect)).await?;
    let summaries: Vec<Summary> = done.iter().map(|d| d.3.clone()).collect();
    let native = replies[0].route == Route::Native;
    let mut bodies = replies
        .iter_mut()
        .zip(done)
        .map(|(r, (text, tokens, lps, s))| r.complete(text, tokens, &lps, asked, &s));
    if native {
        return Ok(Json(Value::Array(bodies.collect())).into_response());
    }
    let mut body = bodies.next().expect("at least one choice");
    let mut choices = vec![body["choices"][0].take()];
    choices.extend(bodies.map(|mut b| b["choices"][0].take()));
    body["choices"] = Value::Array(choices);
    body["usage"] = usage(&total(&summaries, n));
    Ok(Json(body).into_response())
}

/// Streams every choice's chunks as they come, then the usage (when asked) and `[DONE]`.
pub(crate) fn streamed(
    replies: Vec<Reply>,
    events: Vec<EventStream>,
    asked: bool,
    n: usize,
) -> Sse<impl Stream<Item = Result<SseEvent, Infallible>>> {
    let among: Ended = Arc::default();
    let native = replies[0].route == Route::Native;
    let include_usage = replies[0].include_usage;
    let mut last = replies[0].usage_chunk(Value::Null);
    let streams: Vec<_> = replies
        .into_iter()
        .zip(events)
        .map(|(mut reply, ev)| {
            reply.include_usage = false;
            let answer = OpenAiStream {
                reply,
                asked,
                among: Some(among.clone()),
            };
            Box::pin(sse_events(answer, ev))
        })
        .collect();
    let ending = stream::once(async move {
        let mut got = among.lock().unwrap_or_else(|e| e.into_inner()).clone();
        got.sort_by_key(|g| g.0);
        let got: Vec<Summary> = got.into_iter().map(|g| g.1).collect();
        let mut out = Vec::new();
        if native {
            return stream::iter(out);
        }
        if include_usage && !got.is_empty() {
            last["usage"] = usage(&total(&got, n));
            out.push(Ok(SseEvent::default().data(last.to_string())));
        }
        out.push(Ok(SseEvent::default().data("[DONE]")));
        stream::iter(out)
    })
    .flatten();
    Sse::new(stream::select_all(streams).chain(ending))
}
