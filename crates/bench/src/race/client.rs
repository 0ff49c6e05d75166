//! One streamed request to an OpenAI-compatible server, timed on a monotonic clock.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use serde::Serialize;
use serde_json::{json, Value};

/// Which OpenAI route the race asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Api {
    /// `/v1/chat/completions`, the prompt as one user message.
    Chat,
    /// `/v1/completions`, the prompt as is.
    Completion,
}

/// How a request ended. Only `Ok` counts toward speeds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    Ok,
    /// No HTTP response: connection refused or reset, timeout.
    Transport,
    /// A status other than 200.
    Http,
    /// A 5xx whose body speaks of memory or a compute error (llama.cpp's "Compute error."
    /// for an out-of-memory batch).
    Memory,
    /// An error object inside the stream.
    StreamError,
    /// The stream ended without a finish_reason.
    Truncated,
    /// The client closed the connection on purpose (`Ask::drop_after`).
    Dropped,
}

/// What the harness asks of one request.
#[derive(Debug, Clone)]
pub struct Ask {
    pub base_url: String,
    pub api: Api,
    pub model: Option<String>,
    pub prompt: String,
    pub max_tokens: usize,
    pub ignore_eos: bool,
    pub timeout_s: u64,
    /// Sent as `Authorization: Bearer KEY`.
    pub api_key: Option<String>,
    /// Close the connection after this many output events, as a client that goes away.
    pub drop_after: Option<usize>,
    /// Counted up once when the first output event arrives, or when the exchange ends
    /// without one.
    pub started: Option<Arc<AtomicUsize>>,
}

/// `request` with `Authorization: Bearer key` when there is a key.
pub fn authorized(request: minreq::Request, key: Option<&str>) -> minreq::Request {
    match key {
        Some(k) => request.with_header("Authorization", format!("Bearer {k}")),
        None => request,
    }
}

/// One request as it happened. Times are seconds from the moment the request was sent.
#[derive(Debug, Clone, Serialize)]
pub struct Exchange {
    pub outcome: Outcome,
    /// HTTP status; 0 when none came.
    pub status: i32,
    pub error: Option<String>,
    /// The first event carrying output text.
    pub t_first: Option<f64>,
    /// The last event carrying output text.
    pub t_last: Option<f64>,
    /// The end of the response.
    pub t_end: f64,
    /// Gaps between consecutive output events, seconds.
    pub gaps: Vec<f64>,
    /// Output events (an event may carry several tokens, e.g. accepted drafts).
    pub events: usize,
    pub finish_reason: Option<String>,
    pub prompt_tokens: Option<u64>,
    pub completion_tokens: Option<u64>,
    pub cached_tokens: Option<u64>,
    /// The server's own prompt speed (llama.cpp-style `timings.prompt_per_second`).
    pub server_prompt_tok_s: Option<f64>,
    pub draft_n: Option<u64>,
    pub draft_accepted: Option<u64>,
    pub text: String,
}

impl Exchange {
    fn failed(outcome: Outcome, status: i32, error: String, t_end: f64) -> Exchange {
        Exchange {
            outcome,
            status,
            error: Some(error),
            t_first: None,
            t_last: None,
            t_end,
            gaps: Vec::new(),
            events: 0,
            finish_reason: None,
            prompt_tokens: None,
            completion_tokens: None,
            cached_tokens: None,
            server_prompt_tok_s: None,
            draft_n: None,
            draft_accepted: None,
            text: String::new(),
        }
    }

    /// Output tokens: the server's usage count, or the output events when it gave none.
    pub fn n_out(&self) -> u64 {
        self.completion_tokens.unwrap_or(self.events as u64)
    }
}

/// Whether an error body reports running out of memory or a failed compute.
pub fn speaks_of_memory(body: &str) -> bool {
    let b = body.to_ascii_lowercase();
    ["memory", "compute error", "alloc"]
        .iter()
        .any(|w| b.contains(w))
}

fn body(ask: &Ask) -> (String, Value) {
    let mut v = match ask.api {
        Api::Chat => json!({"messages": [{"role": "user", "content": ask.prompt}]}),
        Api::Completion => json!({"prompt": ask.prompt}),
    };
    v["max_tokens"] = json!(ask.max_tokens);
    v["temperature"] = json!(0.0);
    v["seed"] = json!(0);
    v["stream"] = json!(true);
    v["stream_options"] = json!({"include_usage": true});
    if let Some(m) = &ask.model {
        v["model"] = json!(m);
    }
    if ask.ignore_eos {
        v["ignore_eos"] = json!(true);
    }
    let path = match ask.api {
        Api::Chat => "/v1/chat/completions",
        Api::Completion => "/v1/completions",
    };
    (format!("{}{path}", ask.base_url), v)
}

/// Sends `ask` with `stream: true` and reads its server-sent events as they come.
pub fn exchange(ask: &Ask) -> Exchange {
    let ex = exchange_events(ask);
    if let (Some(n), None) = (&ask.started, ex.t_first) {
        n.fetch_add(1, Ordering::AcqRel);
    }
    ex
}

fn exchange_events(ask: &Ask) -> Exchange {
    let t0 = Instant::now();
    let since = || t0.elapsed().as_secs_f64();
    let (url, body) = body(ask);
    let request = minreq::post(url)
        .with_header("Content-Type", "application/json")
        .with_body(body.to_string())
        .with_timeout(ask.timeout_s);
    let request = authorized(request, ask.api_key.as_deref());
    let response = match request.send_lazy() {
        Ok(r) => r,
        Err(e) => return Exchange::failed(Outcome::Transport, 0, e.to_string(), since()),
    };
    let status = response.status_code;
    if status != 200 {
        let mut bytes = Vec::new();
        for b in response {
            match b {
                Ok((b, _)) => bytes.push(b),
                Err(_) => break,
            }
        }
        let text = String::from_utf8_lossy(&bytes).into_owned();
        let outcome = if status >= 500 && speaks_of_memory(&text) {
            Outcome::Memory
        } else {
            Outcome::Http
        };
        return Exchange::failed(outcome, status, text, since());
    }
    let mut ex = Exchange::failed(Outcome::Truncated, status, String::new(), 0.0);
    ex.error = None;
    let mut line = Vec::new();
    let mut transport_error = None;
    for b in response {
        match b {
            Ok((b'\n', _)) => {
                let now = since();
                let before = ex.t_first;
                event(&mut ex, &String::from_utf8_lossy(&line), now);
                line.clear();
                if let (Some(n), None, Some(_)) = (&ask.started, before, ex.t_first) {
                    n.fetch_add(1, Ordering::AcqRel);
                }
                if ex.outcome == Outcome::StreamError {
                    break;
                }
                if ask.drop_after.is_some_and(|n| ex.events >= n) && ex.finish_reason.is_none() {
                    ex.outcome = Outcome::Dropped;
                    ex.t_end = since();
                    return ex;
                }
            }
            Ok((b, _)) => line.push(b),
            Err(e) => {
                transport_error = Some(e.to_string());
                break;
            }
        }
    }
    if !line.is_empty() {
        event(&mut ex, &String::from_utf8_lossy(&line), since());
    }
    ex.t_end = since();
    if ex.outcome == Outcome::StreamError {
        return ex;
    }
    match (&ex.finish_reason, transport_error) {
        (Some(_), _) => ex.outcome = Outcome::Ok,
        (None, Some(e)) => {
            ex.outcome = Outcome::Transport;
            ex.error = Some(e);
        }
        (None, None) => {
            ex.outcome = Outcome::Truncated;
            ex.error = Some("the stream ended without a finish_reason".into());
        }
    }
    ex
}

/// Folds one line of the event stream into `ex`.
fn event(ex: &mut Exchange, line: &str, now: f64) {
    let Some(data) = line.trim_end_matches('\r').strip_prefix("data:") else {
        return;
    };
    let data = data.trim();
    if data == "[DONE]" || data.is_empty() {
        return;
    }
    let v: Value = match serde_json::from_str(data) {
        Ok(v) => v,
        Err(e) => {
            ex.outcome = Outcome::StreamError;
            ex.error = Some(format!("an event that is not JSON ({e}): {data}"));
            return;
        }
    };
    if let Some(err) = v.get("error").filter(|e| !e.is_null()) {
        ex.outcome = Outcome::StreamError;
        ex.error = Some(err.to_string());
        return;
    }
    let choice = &v["choices"][0];
    let piece: String = ["content", "reasoning_content"]
        .iter()
        .filter_map(|k| choice["delta"][*k].as_str())
        .chain(choice["text"].as_str())
        .collect();
    if !piece.is_empty() {
        if let Some(last) = ex.t_last {
            ex.gaps.push(now - last);
        }
        ex.t_first.get_or_insert(now);
        ex.t_last = Some(now);
        ex.events += 1;
        ex.text += &piece;
    }
    if let Some(f) = choice["finish_reason"].as_str() {
        ex.finish_reason = Some(f.to_string());
    }
    let u = &v["usage"];
    if let Some(n) = u["prompt_tokens"].as_u64() {
        ex.prompt_tokens = Some(n);
    }
    if let Some(n) = u["completion_tokens"].as_u64() {
        ex.completion_tokens = Some(n);
    }
    if let Some(n) = u["prompt_tokens_details"]["cached_tokens"].as_u64() {
        ex.cached_tokens = Some(n);
    }
    let t = &v["timings"];
    if let Some(x) = t["prompt_per_second"].as_f64() {
        ex.server_prompt_tok_s = Some(x);
    }
    if let Some(n) = t["draft_n"].as_u64() {
        ex.draft_n = Some(n);
    }
    if let Some(n) = t["draft_n_accepted"].as_u64() {
        ex.draft_accepted = Some(n);
    }
    if ex.cached_tokens.is_none() {
        ex.cached_tokens = t["cache_n"].as_u64();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_fold_into_an_exchange() {
        let mut ex = Exchange::failed(Outcome::Truncated, 200, String::new(), 0.0);
        event(
            &mut ex,
            r#"data: {"choices":[{"delta":{"role":"assistant"}}]}"#,
            0.5,
        );
        event(
            &mut ex,
            r#"data: {"choices":[{"delta":{"content":"Hel"}}]}"#,
            1.0,
        );
        event(
            &mut ex,
            r#"data: {"choices":[{"delta":{"content":"lo"}}]}"#,
            1.25,
        );
        event(
            &mut ex,
            r#"data: {"choices":[{"delta":{},"finish_reason":"length"}],"timings":{"prompt_per_second":100.0,"draft_n":4,"draft_n_accepted":3,"cache_n":2}}"#,
            1.3,
        );
        event(
            &mut ex,
            r#"data: {"choices":[],"usage":{"prompt_tokens":9,"completion_tokens":2}}"#,
            1.3,
        );
        event(&mut ex, "data: [DONE]", 1.3);
        assert_eq!(ex.text, "Hello");
        assert_eq!((ex.t_first, ex.t_last), (Some(1.0), Some(1.25)));
        assert_eq!(ex.gaps, vec![0.25]);
        assert_eq!(ex.finish_reason.as_deref(), Some("length"));
        assert_eq!((ex.prompt_tokens, ex.n_out()), (Some(9), 2));
        assert_eq!((ex.draft_n, ex.draft_accepted), (Some(4), Some(3)));
        assert_eq!(ex.cached_tokens, Some(2));
        assert_eq!(ex.server_prompt_tok_s, Some(100.0));
    }

    #[test]
    fn an_error_event_is_a_stream_error() {
        let mut ex = Exchange::failed(Outcome::Truncated, 200, String::new(), 0.0);
        event(&mut ex, r#"data: {"error":{"message":"slot lost"}}"#, 1.0);
        assert_eq!(ex.outcome, Outcome::StreamError);
        assert!(speaks_of_memory("Compute error."));
        assert!(!speaks_of_memory("'messages' is required"));
    }
}
