//! The bodies of a Responses answer: the `response` object, or its stream of events
//! (`response.created`, `response.in_progress`, per output item `output_item.added`, its
//! parts and deltas and their `done`s, `output_item.done`, then `response.completed` or
//! `response.incomplete`), numbered by `sequence_number`. Reasoning becomes a `reasoning`
//! item, text a `message` item, each tool call a `function_call` item.

use engine::{FinishReason, Summary};
use serde_json::{json, Map, Value};

use crate::error::ApiError;
use crate::format::timings;
use crate::generate::{EventReply, SseData};
use crate::telemetry::Telemetry;
use crate::tools::ToolCall;
use crate::transform::{Chain, Out};

/// The kind of the item a stream has open.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Reasoning,
    Message,
}

/// The open item: its kind, id and text so far.
struct Open {
    kind: Kind,
    id: String,
    text: String,
}

/// What is told a finished response.
type OnDone = Box<dyn FnOnce(&Value) + Send>;

/// One answer's bodies.
pub struct ResponseReply {
    id: String,
    created_at: u64,
    model: String,
    /// The request's fields a response repeats (instructions, tools, ...).
    echo: Map<String, Value>,
    chain: Chain,
    /// Items finished so far, in order.
    items: Vec<Value>,
    open: Option<Open>,
    seq: u64,
    /// Told the finished response (to store it).
    on_done: Option<OnDone>,
    /// llama-server's `prompt_progress` and running timings, when asked.
    telemetry: Telemetry,
}

fn function_call(c: &ToolCall, arguments: &str, status: &str) -> Value {
    json!({
        "type": "function_call", "id": format!("fc_{}", c.id), "call_id": c.id, "name": c.name,
        "arguments": arguments, "status": status,
    })
}

fn part(kind: Kind, text: &str) -> Value {
    match kind {
        Kind::Message => {
            json!({"type": "output_text", "text": text, "annotations": [], "logprobs": []})
        }
        Kind::Reasoning => json!({"type": "reasoning_text", "text": text}),
    }
}

fn item(kind: Kind, id: &str, text: Option<&str>) -> Value {
    let (status, content) = match text {
        None => ("in_progress", json!([])),
        Some(t) => ("completed", json!([part(kind, t)])),
    };
    match kind {
        Kind::Message => json!({
            "type": "message", "id": id, "status": status, "role": "assistant", "content": content,
        }),
        Kind::Reasoning => json!({
            "type": "reasoning", "id": id, "status": status, "summary": [], "content": content,
        }),
    }
}

/// The error event of a stream that failed.
fn error_event(e: &ApiError) -> Value {
    json!({"type": "error", "code": e.kind, "message": e.message, "param": e.param})
}

impl ResponseReply {
    pub fn new(task: u64, model: String, echo: Map<String, Value>, chain: Chain) -> Self {
        let created_at = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        ResponseReply {
            id: format!("resp_{task:016x}"),
            created_at,
            model,
            echo,
            chain,
            items: Vec::new(),
            open: None,
            seq: 0,
            on_done: None,
            telemetry: Telemetry::default(),
        }
    }

    /// Reports the prompt's reading (`return_progress`) and the timings so far in every
    /// event (`timings_per_token`), as llama-server's Responses streams do.
    pub fn with_telemetry(mut self, progress: bool, per_token: bool) -> Self {
        self.telemetry = Telemetry::new(progress, per_token);
        self
    }

    /// `on_done` is told the finished response.
    pub fn when_done(mut self, on_done: impl FnOnce(&Value) + Send + 'static) -> Self {
        self.on_done = Some(Box::new(on_done));
        self
    }

    fn done(&mut self, response: &Value) {
        if let Some(f) = self.on_done.take() {
            f(response);
        }
    }

    /// The response object: `status`, its output, and usage when it has ended.
    fn response(&self, status: &str, s: Option<&Summary>) -> Value {
        let mut r = json!({
            "id": self.id, "object": "response", "created_at": self.created_at, "status": status,
            "model": self.model, "output": self.items, "error": null, "incomplete_details": null,
            "previous_response_id": null, "store": false, "truncation": "disabled",
            "parallel_tool_calls": true, "tool_choice": "auto", "tools": [],
            "text": {"format": {"type": "text"}}, "metadata": {},
        });
        for (k, v) in &self.echo {
            r[k] = v.clone();
        }
        if let Some(s) = s {
            if matches!(
                s.finish,
                FinishReason::MaxTokens | FinishReason::ContextFull
            ) {
                r["status"] = json!("incomplete");
                r["incomplete_details"] = json!({"reason": "max_output_tokens"});
            }
            r["usage"] = json!({
                "input_tokens": s.prompt_n,
                "input_tokens_details": {"cached_tokens": s.cache_n},
                "output_tokens": s.predicted_n,
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": s.prompt_n + s.predicted_n,
            });
        }
        r
    }

    fn next_id(&self, prefix: &str) -> String {
        format!("{prefix}_{}_{}", &self.id[5..], self.items.len())
    }

    fn event(&mut self, kind: &'static str, mut data: Value) -> SseData {
        data["type"] = json!(kind);
        data["sequence_number"] = json!(self.seq);
        self.seq += 1;
        (kind, data)
    }

    fn close(&mut self, events: &mut Vec<SseData>) {
        let Some(open) = self.open.take() else { return };
        let at = json!({"item_id": open.id, "output_index": self.items.len(), "content_index": 0});
        let mut done = at.clone();
        done["text"] = json!(open.text);
        let text_done = match open.kind {
            Kind::Message => "response.output_text.done",
            Kind::Reasoning => "response.reasoning_text.done",
        };
        if open.kind == Kind::Message {
            done["logprobs"] = json!([]);
        }
        events.push(self.event(text_done, done));
        let mut part_done = at;
        part_done["part"] = part(open.kind, &open.text);
        events.push(self.event("response.content_part.done", part_done));
        let finished = item(open.kind, &open.id, Some(&open.text));
        let output_index = self.items.len();
        events.push(self.event(
            "response.output_item.done",
            json!({"output_index": output_index, "item": finished}),
        ));
        self.items.push(finished);
    }

    /// Appends `text` to an open item of `kind`, opening one (and closing another) first.
    fn write(&mut self, kind: Kind, text: &str, events: &mut Vec<SseData>) {
        if self.open.as_ref().map(|o| o.kind) != Some(kind) {
            self.close(events);
            let id = self.next_id(if kind == Kind::Message { "msg" } else { "rs" });
            let output_index = self.items.len();
            events.push(self.event(
                "response.output_item.added",
                json!({"output_index": output_index, "item": item(kind, &id, None)}),
            ));
            events.push(self.event(
                "response.content_part.added",
                json!({"item_id": id, "output_index": output_index, "content_index": 0, "part": part(kind, "")}),
            ));
            self.open = Some(Open {
                kind,
                id,
                text: String::new(),
            });
        }
        let open = self.open.as_mut().expect("opened above");
        open.text.push_str(text);
        let mut delta = json!({
            "item_id": open.id, "output_index": self.items.len(), "content_index": 0, "delta": text,
        });
        let name = match kind {
            Kind::Message => {
                delta["logprobs"] = json!([]);
                "response.output_text.delta"
            }
            Kind::Reasoning => "response.reasoning_text.delta",
        };
        events.push(self.event(name, delta));
    }

    fn events(&mut self, out: Out) -> Vec<SseData> {
        let mut events = Vec::new();
        if !out.reasoning.is_empty() {
            self.write(Kind::Reasoning, &out.reasoning, &mut events);
        }
        if !out.content.is_empty() {
            self.write(Kind::Message, &out.content, &mut events);
        }
        for c in &out.calls {
            self.close(&mut events);
            let output_index = self.items.len();
            let item_id = format!("fc_{}", c.id);
            let added =
                json!({"output_index": output_index, "item": function_call(c, "", "in_progress")});
            events.push(self.event("response.output_item.added", added));
            let at = json!({"item_id": item_id, "output_index": output_index});
            let mut delta = at.clone();
            delta["delta"] = json!(c.arguments);
            events.push(self.event("response.function_call_arguments.delta", delta));
            let mut done = at;
            done["arguments"] = json!(c.arguments);
            events.push(self.event("response.function_call_arguments.done", done));
            let finished = function_call(c, &c.arguments, "completed");
            events.push(self.event(
                "response.output_item.done",
                json!({"output_index": output_index, "item": finished}),
            ));
            self.items.push(finished);
        }
        events
    }
}

impl EventReply for ResponseReply {
    fn complete(&mut self, text: &str, s: &Summary) -> Value {
        let out = self.chain.whole(text);
        if !out.reasoning.is_empty() {
            let id = self.next_id("rs");
            self.items
                .push(item(Kind::Reasoning, &id, Some(&out.reasoning)));
        }
        if !out.content.is_empty() {
            let id = self.next_id("msg");
            self.items
                .push(item(Kind::Message, &id, Some(&out.content)));
        }
        for c in &out.calls {
            self.items.push(function_call(c, &c.arguments, "completed"));
        }
        let r = self.response("completed", Some(s));
        self.done(&r);
        r
    }

    fn opening(&mut self) -> Vec<SseData> {
        let r = self.response("in_progress", None);
        vec![
            self.event("response.created", json!({"response": r})),
            self.event("response.in_progress", json!({"response": r})),
        ]
    }

    fn delta(&mut self, text: &str, n_tokens: usize) -> Vec<SseData> {
        self.telemetry.on_tokens(n_tokens);
        let out = self.chain.push(text);
        let mut events = self.events(out);
        if let Some(t) = self.telemetry.timings() {
            for (_, data) in &mut events {
                data["timings"] = t.clone();
            }
        }
        events
    }

    fn progress(&mut self, p: &engine::Progress) -> Vec<SseData> {
        let Some(report) = self.telemetry.on_progress(p) else {
            return Vec::new();
        };
        let r = self.response("in_progress", None);
        let mut data = json!({"response": r, "prompt_progress": report});
        if let Some(t) = self.telemetry.timings() {
            data["timings"] = t;
        }
        vec![self.event("response.in_progress", data)]
    }

    fn closing(&mut self, s: &Summary) -> Vec<SseData> {
        let rest = self.chain.finish();
        let mut events = self.events(rest);
        self.close(&mut events);
        let r = self.response("completed", Some(s));
        self.done(&r);
        let kind = match r["status"].as_str() {
            Some("incomplete") => "response.incomplete",
            _ => "response.completed",
        };
        events.push(self.event(kind, json!({"response": r, "timings": timings(s)})));
        events
    }

    fn failed(&mut self, e: &ApiError) -> SseData {
        self.event("error", error_event(e))
    }
}
