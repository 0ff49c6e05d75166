//! The bodies of a Messages answer: the whole `message` object, or the stream of events
//! (`message_start`, then per content block `content_block_start`, its deltas and
//! `content_block_stop`, then `message_delta` with the stop reason and usage, and
//! `message_stop`). Reasoning becomes `thinking` blocks, text `text` blocks, tool calls
//! `tool_use` blocks with their input as an object.

use engine::{FinishReason, Summary};
use serde_json::{json, Value};

use crate::error::ApiError;
use crate::generate::{EventReply, SseData};
use crate::tools::ToolCall;
use crate::transform::{Chain, Out};

/// The kind of the content block a stream has open.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Open {
    Thinking,
    Text,
}

/// One answer's bodies.
pub struct MessageReply {
    id: String,
    model: String,
    /// The prompt's tokens, for `message_start` (the cached part is known at the end).
    n_prompt: usize,
    chain: Chain,
    /// Blocks started so far; the open one, if any, is the last.
    blocks: usize,
    open: Option<Open>,
}

fn input(call: &ToolCall) -> Value {
    serde_json::from_str::<Value>(&call.arguments)
        .ok()
        .filter(Value::is_object)
        .unwrap_or_else(|| json!({}))
}

fn tool_use(call: &ToolCall, input: Value) -> Value {
    json!({"type": "tool_use", "id": call.id, "name": call.name, "input": input})
}

/// Anthropic's error body for `e`, its type chosen by status.
pub fn error_body(e: &ApiError) -> Value {
    let kind = match e.status.as_u16() {
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        503 => "overloaded_error",
        s if s >= 500 => "api_error",
        _ => "invalid_request_error",
    };
    json!({"type": "error", "error": {"type": kind, "message": e.message}})
}

impl MessageReply {
    pub fn new(task: u64, model: String, n_prompt: usize, chain: Chain) -> Self {
        MessageReply {
            id: format!("msg_{task:016x}"),
            model,
            n_prompt,
            chain,
            blocks: 0,
            open: None,
        }
    }

    fn stop_reason(&self, s: &Summary) -> (&'static str, Value) {
        match &s.finish {
            _ if self.chain.n_calls > 0 => ("tool_use", Value::Null),
            FinishReason::Eos => ("end_turn", Value::Null),
            FinishReason::StopWord(w) => ("stop_sequence", json!(w)),
            FinishReason::MaxTokens | FinishReason::ContextFull => ("max_tokens", Value::Null),
        }
    }

    fn usage(s: &Summary) -> Value {
        json!({
            "input_tokens": s.prompt_n - s.cache_n,
            "cache_read_input_tokens": s.cache_n,
            "cache_creation_input_tokens": 0,
            "output_tokens": s.predicted_n,
        })
    }

    fn close(&mut self, events: &mut Vec<SseData>) {
        if self.open.take().is_some() {
            let index = self.blocks - 1;
            events.push((
                "content_block_stop",
                json!({"type": "content_block_stop", "index": index}),
            ));
        }
    }

    /// Opens a block of `kind` unless one is open; its index.
    fn ensure(&mut self, kind: Open, events: &mut Vec<SseData>) -> usize {
        if self.open != Some(kind) {
            self.close(events);
            let block = match kind {
                Open::Thinking => json!({"type": "thinking", "thinking": "", "signature": ""}),
                Open::Text => json!({"type": "text", "text": ""}),
            };
            events.push((
                "content_block_start",
                json!({"type": "content_block_start", "index": self.blocks, "content_block": block}),
            ));
            self.blocks += 1;
            self.open = Some(kind);
        }
        self.blocks - 1
    }

    fn events(&mut self, out: Out) -> Vec<SseData> {
        let mut events = Vec::new();
        let delta = |index: usize, d: Value| {
            (
                "content_block_delta",
                json!({"type": "content_block_delta", "index": index, "delta": d}),
            )
        };
        if !out.reasoning.is_empty() {
            let i = self.ensure(Open::Thinking, &mut events);
            events.push(delta(
                i,
                json!({"type": "thinking_delta", "thinking": out.reasoning}),
            ));
        }
        if !out.content.is_empty() {
            let i = self.ensure(Open::Text, &mut events);
            events.push(delta(i, json!({"type": "text_delta", "text": out.content})));
        }
        for call in &out.calls {
            self.close(&mut events);
            let i = self.blocks;
            self.blocks += 1;
            events.push((
                "content_block_start",
                json!({"type": "content_block_start", "index": i, "content_block": tool_use(call, json!({}))}),
            ));
            let partial = input(call).to_string();
            events.push(delta(
                i,
                json!({"type": "input_json_delta", "partial_json": partial}),
            ));
            events.push((
                "content_block_stop",
                json!({"type": "content_block_stop", "index": i}),
            ));
        }
        events
    }
}

impl EventReply for MessageReply {
    fn complete(&mut self, text: &str, s: &Summary) -> Value {
        let out = self.chain.whole(text);
        let mut content = Vec::new();
        if !out.reasoning.is_empty() {
            content.push(json!({"type": "thinking", "thinking": out.reasoning, "signature": ""}));
        }
        if !out.content.is_empty() {
            content.push(json!({"type": "text", "text": out.content}));
        }
        content.extend(out.calls.iter().map(|c| tool_use(c, input(c))));
        let (stop_reason, stop_sequence) = self.stop_reason(s);
        json!({
            "id": self.id,
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": content,
            "stop_reason": stop_reason,
            "stop_sequence": stop_sequence,
            "usage": Self::usage(s),
        })
    }

    fn opening(&mut self) -> Vec<SseData> {
        let message = json!({
            "id": self.id, "type": "message", "role": "assistant", "model": self.model,
            "content": [], "stop_reason": null, "stop_sequence": null,
            "usage": {"input_tokens": self.n_prompt, "output_tokens": 0},
        });
        vec![
            (
                "message_start",
                json!({"type": "message_start", "message": message}),
            ),
            ("ping", json!({"type": "ping"})),
        ]
    }

    fn delta(&mut self, text: &str, _: usize) -> Vec<SseData> {
        let out = self.chain.push(text);
        self.events(out)
    }

    fn closing(&mut self, s: &Summary) -> Vec<SseData> {
        let rest = self.chain.finish();
        let mut events = self.events(rest);
        self.close(&mut events);
        let (stop_reason, stop_sequence) = self.stop_reason(s);
        events.push((
            "message_delta",
            json!({
                "type": "message_delta",
                "delta": {"stop_reason": stop_reason, "stop_sequence": stop_sequence},
                "usage": Self::usage(s),
            }),
        ));
        events.push(("message_stop", json!({"type": "message_stop"})));
        events
    }

    fn failed(&mut self, e: &ApiError) -> SseData {
        ("error", error_body(e))
    }
}
