//! The bodies of Ollama's answers: one JSON object, or a stream of them, one per line
//! (`application/x-ndjson`). Each piece carries `model`, `created_at` and `done: false`;
//! the last has `done: true`, `done_reason` (`stop`, `length`, or `load`/`unload` for a
//! request that only loads or unloads the model) and the timings in nanoseconds. Chat
//! answers put the text in `message.content`, reasoning in `message.thinking`, tool calls in
//! `message.tool_calls` with their arguments as an object; generate answers put it in
//! `response` and `thinking`, and end with `context`: the prompt's and answer's tokens.

use std::time::{Instant, SystemTime};

use axum::body::Bytes;
use engine::{FinishReason, Summary, TokenLogprob};
use serde_json::{json, Map, Value};

use crate::error::ApiError;
use crate::generate::Streamed;
use crate::transform::{Chain, Out};

/// Which route's shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Chat,
    Generate,
}

/// `t` as RFC 3339 in UTC with nanoseconds, as Ollama writes times.
pub fn rfc3339(t: SystemTime) -> String {
    let d = t.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
    format!(
        "{}.{:09}Z",
        text::strftime("%Y-%m-%dT%H:%M:%S", d.as_secs()),
        d.subsec_nanos()
    )
}

/// Ollama's error body.
pub fn error_body(e: &ApiError) -> Value {
    json!({"error": e.message})
}

/// One answer's lines.
pub struct Lines {
    kind: Kind,
    model: String,
    chain: Chain,
    started: Instant,
    /// Generate: the prompt's tokens, then the answer's as they come (the last line's
    /// `context`).
    context: Option<Vec<u32>>,
}

fn ns(ms: f64) -> u64 {
    (ms * 1e6).max(0.0) as u64
}

impl Lines {
    pub fn new(kind: Kind, model: String, chain: Chain, context: Option<Vec<u32>>) -> Self {
        Lines {
            kind,
            model,
            chain,
            started: Instant::now(),
            context,
        }
    }

    /// The fields every line starts with.
    fn head(&self) -> Map<String, Value> {
        let mut m = Map::new();
        m.insert("model".into(), json!(self.model));
        m.insert("created_at".into(), json!(rfc3339(SystemTime::now())));
        m
    }

    /// A line of `out`, the next piece of the answer.
    fn piece(&self, out: Out, done: bool) -> Map<String, Value> {
        let mut m = self.head();
        match self.kind {
            Kind::Chat => {
                let mut msg = Map::new();
                msg.insert("role".into(), json!("assistant"));
                msg.insert("content".into(), json!(out.content));
                if !out.reasoning.is_empty() {
                    msg.insert("thinking".into(), json!(out.reasoning));
                }
                if !out.calls.is_empty() {
                    let calls: Vec<Value> = out
                        .calls
                        .iter()
                        .map(|c| {
                            let args = serde_json::from_str::<Value>(&c.arguments)
                                .ok()
                                .filter(Value::is_object)
                                .unwrap_or_else(|| json!({}));
                            json!({"id": c.id, "function": {"index": c.index, "name": c.name, "arguments": args}})
                        })
                        .collect();
                    msg.insert("tool_calls".into(), Value::Array(calls));
                }
                m.insert("message".into(), Value::Object(msg));
            }
            Kind::Generate => {
                m.insert("response".into(), json!(out.content));
                if !out.reasoning.is_empty() {
                    m.insert("thinking".into(), json!(out.reasoning));
                }
            }
        }
        m.insert("done".into(), json!(done));
        m
    }

    /// The last line: `out` (what the chain still held) with the summary's figures.
    fn last(&mut self, out: Out, s: &Summary) -> Value {
        let mut m = self.piece(out, true);
        let reason = match s.finish {
            FinishReason::Eos | FinishReason::StopWord(_) => "stop",
            FinishReason::MaxTokens | FinishReason::ContextFull => "length",
        };
        let figures = json!({
            "done_reason": reason,
            "total_duration": self.started.elapsed().as_nanos() as u64,
            "load_duration": 0,
            "prompt_eval_count": s.prompt_n,
            "prompt_eval_duration": ns(s.prompt_ms),
            "eval_count": s.predicted_n,
            "eval_duration": ns(s.predicted_ms),
        });
        m.extend(figures.as_object().cloned().unwrap_or_default());
        if let Some(ctx) = self.context.take() {
            m.insert("context".into(), json!(ctx));
        }
        Value::Object(m)
    }

    /// The whole answer to `text` (its tokens `tokens`) in one object.
    pub fn whole(&mut self, text: &str, tokens: &[u32], s: &Summary) -> Value {
        if let Some(ctx) = &mut self.context {
            ctx.extend_from_slice(tokens);
        }
        let out = self.chain.whole(text);
        self.last(out, s)
    }

    /// The answer of a request that only loads (`unload` false) or unloads the model.
    pub fn loaded(&self, unload: bool) -> Value {
        let mut m = self.piece(Out::default(), true);
        m.insert(
            "done_reason".into(),
            json!(if unload { "unload" } else { "load" }),
        );
        Value::Object(m)
    }
}

fn line(v: &Value) -> Bytes {
    let mut s = v.to_string();
    s.push('\n');
    Bytes::from(s)
}

impl Streamed<Bytes> for Lines {
    fn opening(&mut self) -> Vec<Bytes> {
        Vec::new()
    }

    fn delta(&mut self, _: usize, text: &str, tokens: &[u32], _: &[TokenLogprob]) -> Vec<Bytes> {
        if let Some(ctx) = &mut self.context {
            ctx.extend_from_slice(tokens);
        }
        let out = self.chain.push(text);
        match out.is_empty() {
            true => Vec::new(),
            false => vec![line(&Value::Object(self.piece(out, false)))],
        }
    }

    fn closing(&mut self, s: &Summary) -> Vec<Bytes> {
        let rest = self.chain.finish();
        vec![line(&self.last(rest, s))]
    }

    fn failed(&mut self, e: ApiError) -> Bytes {
        line(&error_body(&e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reasoning::Splitter;

    fn summary(finish: FinishReason) -> Summary {
        Summary {
            slot: 0,
            finish,
            prompt_n: 10,
            cache_n: 4,
            predicted_n: 3,
            prompt_ms: 2.0,
            predicted_ms: 5.0,
            draft_n: 0,
            draft_n_accepted: 0,
            grammar_ms: 0.0,
            truncated: false,
        }
    }

    #[test]
    fn times_are_rfc3339_with_nanoseconds() {
        let t = SystemTime::UNIX_EPOCH + std::time::Duration::new(1_700_000_000, 5);
        assert_eq!(rfc3339(t), "2023-11-14T22:13:20.000000005Z");
    }

    #[test]
    fn a_chat_stream_splits_thinking_and_ends_with_figures() {
        let chain = Chain::new(Some(Splitter::new(false)), None);
        let mut l = Lines::new(Kind::Chat, "m:latest".into(), chain, None);
        let mut lines = l.delta(0, "<think>hm</think>", &[1, 2], &[]);
        lines.extend(l.delta(0, "Hi", &[3], &[]));
        lines.extend(l.closing(&summary(FinishReason::MaxTokens)));
        let v: Vec<Value> = lines
            .iter()
            .map(|b| {
                assert!(b.ends_with(b"\n"));
                serde_json::from_slice(b).unwrap()
            })
            .collect();
        let thinking: String = v
            .iter()
            .filter_map(|x| x["message"]["thinking"].as_str())
            .collect();
        let content: String = v
            .iter()
            .filter_map(|x| x["message"]["content"].as_str())
            .collect();
        assert_eq!((thinking.as_str(), content.as_str()), ("hm", "Hi"));
        let last = v.last().unwrap();
        assert_eq!(last["done"], true);
        assert_eq!(last["done_reason"], "length");
        assert_eq!(last["prompt_eval_count"], 10);
        assert_eq!(last["eval_duration"], 5_000_000);
        assert!(v[..v.len() - 1].iter().all(|x| x["done"] == false));
    }

    #[test]
    fn a_generate_answer_ends_with_its_context() {
        let chain = Chain::new(None, None);
        let mut l = Lines::new(Kind::Generate, "m".into(), chain, Some(vec![7, 8]));
        let v = l.whole("ab", &[9, 10], &summary(FinishReason::Eos));
        assert_eq!(v["response"], "ab");
        assert_eq!(v["context"], json!([7, 8, 9, 10]));
        assert_eq!(v["done_reason"], "stop");
    }
}
