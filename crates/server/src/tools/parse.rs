//! Tool calls parsed out of an answer as it streams: text deltas in, [`Piece`]s out.
//!
//! Text that may still become a call is held back until it is decided: the start of a
//! marker at the end of a delta, a marked call until it is complete, and, for the formats
//! whose call is the whole answer (Llama 3.x bare JSON, Generic), an answer that starts with
//! `{` until its JSON value is complete. A call that does not parse comes back as text;
//! nothing is lost. Whitespace between text and a call is dropped; an answer without calls
//! comes back byte for byte (but for Generic's `{"response": "..."}`, which is unwrapped).
//!
//! ```text
//! Hermes:
//! push("Let me check.\n<tool_")            -> [Text("Let me check.")]     holding "\n", "<tool_"
//! push("call>\n{\"name\": \"f\", ")          -> []                          inside a call
//! push("\"arguments\": {}}\n</tool_call>")  -> [Call{0, "call_…", "f", "{}"}]
//! push("\n")                                -> []                          after a call
//! finish()                                  -> []
//!
//! Llama3, and Hermes without its tags (the answer is the call when it names an offered
//! tool, here f):
//! push("{\"name\": \"f\",")                  -> []                          holding: may be a call
//! push(" \"parameters\": {\"x\": 1}}")       -> [Call{0, "call_…", "f", "{\"x\":1}"}]
//!
//! Hermes, a call in a fenced block at the start of the answer (as llama.cpp takes it):
//! push("```json\n{\"name\": \"f\", \"arguments\": {}}\n```") -> [Call{0, "call_…", "f", "{}"}]
//!
//! Hermes, a call that does not parse:
//! push("<tool_call>{oops}</tool_call>")     -> [Text("<tool_call>{oops}</tool_call>")]
//!
//! DSML (DeepSeek-V4), each invoke a call once complete:
//! push("Sure.\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n")
//!                                           -> [Text("Sure.")]
//! push("<｜DSML｜parameter name=\"x\" string=\"false\">1</｜DSML｜parameter>\n</｜DSML｜invoke>\n")
//!                                           -> [Call{0, "call_…", "f", "{\"x\":1}"}]
//! push("</｜DSML｜tool_calls>")              -> []
//! ```
//!
//! A broken call is never an error here: it stays in the content, and the answer's
//! `finish_reason` is the engine's (`stop`, or `length` for a call cut off by the token
//! limit), not `tool_calls`, unless other calls were parsed.

use serde_json::Value;

use super::dsml;
use super::format::{ToolFormat, HERMES_CLOSE, MISTRAL_ARGS, MISTRAL_CALL_ID};
use super::qwen_xml;
use super::Tool;

/// One tool call of an answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolCall {
    /// Its place among the answer's calls, from 0 (`tool_calls[].index` in stream chunks).
    pub index: usize,
    /// Unique within the answer, and across answers with distinct seeds: `call_` and 16
    /// letters or digits, or 9 letters or digits for Mistral (its templates refuse other
    /// ids when the call comes back in history).
    pub id: String,
    pub name: String,
    /// The arguments as JSON text (an object, unless the model wrote a string that is not).
    pub arguments: String,
}

/// A decided part of an answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Piece {
    /// Content to show.
    Text(String),
    /// One complete call.
    Call(ToolCall),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Free text: looking for the format's marker.
    Text,
    /// After a marker; `held` is what follows it.
    Marked,
    /// The answer began with `{` in a format whose call is the whole answer; `held` is the
    /// JSON so far.
    Bare,
    /// Hermes: the answer began with a fenced JSON block (`fence` holds its opening);
    /// `held` is the JSON so far.
    Fenced,
    /// Text to the end: Generic after an answer that is not its JSON.
    Plain,
}

/// How far a held body got.
enum Step {
    /// It may still become a call: wait for more text.
    Wait,
    /// Decided; go on with what is left in `held`.
    Go,
}

/// How a call's closing tag stands in the held text.
enum Closing {
    /// The call and its tag take this many bytes.
    At(usize),
    /// The tag may still come.
    Wait,
    /// Something else follows the call.
    Missing,
}

/// The first JSON value at the start of a text.
enum Json {
    Incomplete,
    Invalid,
    /// The value and the byte length it took.
    Complete(Value, usize),
}

fn first_json(s: &str) -> Json {
    let mut values = serde_json::Deserializer::from_str(s).into_iter::<Value>();
    match values.next() {
        None => Json::Incomplete,
        Some(Ok(v)) => Json::Complete(v, values.byte_offset()),
        Some(Err(e)) if e.is_eof() => Json::Incomplete,
        Some(Err(_)) => Json::Invalid,
    }
}

/// `(name, arguments as JSON text)` when `v` is a call object: a non-empty string `name`
/// and an object (or JSON text, or nothing) under `arguments` or `parameters`.
fn call_of(v: &Value) -> Option<(String, String)> {
    let obj = v.as_object()?;
    let name = obj.get("name")?.as_str()?.trim();
    if name.is_empty() {
        return None;
    }
    let arguments = match obj.get("arguments").or_else(|| obj.get("parameters")) {
        None | Some(Value::Null) => "{}".to_string(),
        Some(args @ Value::Object(_)) => args.to_string(),
        Some(Value::String(s)) => match serde_json::from_str::<Value>(s) {
            Ok(args @ Value::Object(_)) => args.to_string(),
            _ => s.clone(),
        },
        Some(_) => return None,
    };
    Some((name.to_string(), arguments))
}

/// Splits a stream of text deltas into content and tool calls (see the module example).
///
/// Build one per answer, only for requests whose [`super::ToolSpec::active`] holds.
#[derive(Debug)]
pub struct CallParser {
    format: ToolFormat,
    /// Bare JSON (Llama 3.x without its tag) is a call only when it names one of these.
    names: Vec<String>,
    /// Each tool's parameters' schema, by which Qwen3-Coder's values are read.
    schemas: Vec<Value>,
    id_seed: u64,
    state: State,
    /// Undecided text: a partial marker, or the body of a possible call.
    held: String,
    /// Whitespace ending the content so far: sent only when more content follows it.
    ws: String,
    /// Only whitespace has come so far.
    at_start: bool,
    /// The opening of a fenced block held while its JSON is undecided.
    fence: String,
    /// Whitespace right after a call is dropped.
    after_call: bool,
    /// Calls since the last marker (a marked block that yields none is text, marker and all).
    block_calls: usize,
    n_calls: usize,
}

impl CallParser {
    /// A parser for answers in `format` to a request offering `tools`. `id_seed` makes the
    /// call ids: give each answer its own (a request's random seed), and they are unique.
    pub fn new(format: ToolFormat, tools: &[Tool], id_seed: u64) -> Self {
        CallParser {
            format,
            names: tools.iter().map(|t| t.name.clone()).collect(),
            schemas: tools.iter().map(|t| t.parameters.clone()).collect(),
            id_seed,
            state: State::Text,
            held: String::new(),
            ws: String::new(),
            at_start: true,
            fence: String::new(),
            after_call: false,
            block_calls: 0,
            n_calls: 0,
        }
    }

    /// The pieces that `text` decides, in order; adjacent text is merged.
    pub fn push(&mut self, text: &str) -> Vec<Piece> {
        self.held.push_str(text);
        let mut out = Vec::new();
        self.run(&mut out, false);
        out
    }

    /// Everything still held, at the end of the answer: an unfinished call becomes text,
    /// unless it is complete but for its closing tag.
    pub fn finish(&mut self) -> Vec<Piece> {
        let mut out = Vec::new();
        self.run(&mut out, true);
        let rest = std::mem::take(&mut self.held);
        self.text(&mut out, &rest);
        let ws = std::mem::take(&mut self.ws);
        if self.n_calls == 0 {
            push_text(&mut out, ws);
        }
        out
    }

    fn run(&mut self, out: &mut Vec<Piece>, at_end: bool) {
        loop {
            let step = match self.state {
                State::Text => self.scan_text(out, at_end),
                State::Fenced => self.fenced_body(out, at_end),
                State::Plain => {
                    let rest = std::mem::take(&mut self.held);
                    self.text(out, &rest);
                    Step::Wait
                }
                State::Marked => match self.format {
                    ToolFormat::Hermes => self.hermes_body(out, at_end),
                    ToolFormat::Mistral => self.mistral_body(out, at_end),
                    ToolFormat::Llama3 | ToolFormat::Generic => self.json_sequence(out, at_end),
                    ToolFormat::Dsml => self.dsml_body(out, at_end),
                    ToolFormat::QwenXml => self.xml_body(out, at_end),
                },
                State::Bare => match self.format {
                    ToolFormat::Generic => self.generic_body(out, at_end),
                    _ => self.json_sequence(out, at_end),
                },
            };
            if let Step::Wait = step {
                return;
            }
        }
    }

    fn scan_text(&mut self, out: &mut Vec<Piece>, at_end: bool) -> Step {
        // Hermes models (Qwen2.5's small ones among them) often write the call's JSON
        // without its tags; llama.cpp's Hermes parser takes it too.
        let bare = matches!(
            self.format,
            ToolFormat::Llama3 | ToolFormat::Generic | ToolFormat::Hermes
        );
        if self.at_start {
            let trimmed = self.held.trim_start();
            if trimmed.is_empty() {
                let ws = std::mem::take(&mut self.held);
                self.text(out, &ws);
                return Step::Wait;
            }
            if self.format == ToolFormat::Hermes {
                match fence_open(trimmed) {
                    Fence::Partial if !at_end => return Step::Wait,
                    Fence::Open(n) => {
                        let lead = self.held.len() - trimmed.len();
                        let ws: String = self.held.drain(..lead).collect();
                        self.text(out, &ws);
                        self.fence = self.held.drain(..n).collect();
                        self.at_start = false;
                        self.state = State::Fenced;
                        return Step::Go;
                    }
                    _ => {}
                }
            }
            self.at_start = false;
            if bare && trimmed.starts_with('{') {
                let lead = self.held.len() - trimmed.len();
                let ws: String = self.held.drain(..lead).collect();
                self.text(out, &ws);
                self.state = State::Bare;
                self.block_calls = 0;
                return Step::Go;
            }
        }
        let Some(marker) = self.format.marker() else {
            self.state = State::Plain;
            return Step::Go;
        };
        if let Some(at) = self.held.find(marker) {
            let before: String = self.held.drain(..at + marker.len()).collect();
            self.text(out, &before[..at]);
            self.state = State::Marked;
            self.block_calls = 0;
            return Step::Go;
        }
        let keep = text::partial_suffix(&self.held, marker);
        let rest = self.held.split_off(self.held.len() - keep);
        let shown = std::mem::replace(&mut self.held, rest);
        self.text(out, &shown);
        Step::Wait
    }

    /// `<tool_call>` JSON `</tool_call>`: one call object. The JSON decides first (so that a
    /// closing tag inside a string is not taken for the end); at the end of the answer a
    /// missing closing tag is forgiven.
    fn hermes_body(&mut self, out: &mut Vec<Piece>, at_end: bool) -> Step {
        let lead = self.held.len() - self.held.trim_start().len();
        let (v, n) = match first_json(&self.held[lead..]) {
            Json::Incomplete if !at_end => return Step::Wait,
            Json::Complete(v, n) => (v, lead + n),
            _ => return self.give_up_marker(out),
        };
        let taken = match self.closed_by(n, HERMES_CLOSE, at_end) {
            Closing::At(taken) => taken,
            Closing::Wait => return Step::Wait,
            Closing::Missing => return self.give_up_marker(out),
        };
        let body: String = self.held.drain(..taken).collect();
        self.state = State::Text;
        match call_of(&v) {
            Some((name, args)) => self.call(out, name, args),
            None => {
                let marker = self.format.marker().unwrap_or_default();
                self.text(out, &format!("{marker}{body}"));
            }
        }
        Step::Go
    }

    /// `[TOOL_CALLS]` then a JSON array of calls, or `name[ARGS]{...}` (optionally
    /// `name[CALL_ID]id[ARGS]{...}`), one call per marker.
    fn mistral_body(&mut self, out: &mut Vec<Piece>, at_end: bool) -> Step {
        let lead = self.held.len() - self.held.trim_start().len();
        let body = &self.held[lead..];
        if body.is_empty() {
            return if at_end {
                self.give_up_marker(out)
            } else {
                Step::Wait
            };
        }
        if body.starts_with('[') {
            return match first_json(body) {
                Json::Incomplete if !at_end => Step::Wait,
                Json::Complete(Value::Array(items), n) if !items.is_empty() => {
                    let calls: Option<Vec<_>> = items.iter().map(call_of).collect();
                    let Some(calls) = calls else {
                        return self.give_up_marker(out);
                    };
                    self.held.drain(..lead + n);
                    for (name, args) in calls {
                        self.call(out, name, args);
                    }
                    self.state = State::Text;
                    Step::Go
                }
                _ => self.give_up_marker(out),
            };
        }
        let name_len = body
            .bytes()
            .take_while(|b| b.is_ascii_alphanumeric() || b"_-.".contains(b))
            .count();
        let after_name = &body[name_len..];
        let args_at = if let Some(rest) = after_name.strip_prefix(MISTRAL_CALL_ID) {
            rest.find(MISTRAL_ARGS)
                .map(|at| name_len + MISTRAL_CALL_ID.len() + at)
        } else if after_name.starts_with(MISTRAL_ARGS) {
            Some(name_len)
        } else {
            let could_be_tag = MISTRAL_ARGS.starts_with(after_name)
                || MISTRAL_CALL_ID.starts_with(after_name)
                || after_name.is_empty();
            return if could_be_tag && name_len > 0 && !at_end {
                Step::Wait
            } else {
                self.give_up_marker(out)
            };
        };
        let Some(args_at) = args_at else {
            return if at_end {
                self.give_up_marker(out)
            } else {
                Step::Wait
            };
        };
        let args_start = args_at + MISTRAL_ARGS.len();
        match first_json(&body[args_start..]) {
            Json::Incomplete if !at_end => Step::Wait,
            Json::Complete(args @ Value::Object(_), n) if name_len > 0 => {
                let name = body[..name_len].to_string();
                self.held.drain(..lead + args_start + n);
                self.call(out, name, args.to_string());
                self.state = State::Text;
                Step::Go
            }
            _ => self.give_up_marker(out),
        }
    }

    /// Llama 3.x: call objects separated by `;` or whitespace, after `<|python_tag|>` or as
    /// the whole answer. Bare ones must name an offered tool. The sequence ends at anything
    /// that is not a call; what follows is text.
    fn json_sequence(&mut self, out: &mut Vec<Piece>, at_end: bool) -> Step {
        let lead = self.held.len()
            - self
                .held
                .trim_start_matches(|c: char| c.is_whitespace() || c == ';')
                .len();
        if self.block_calls > 0 {
            self.held.drain(..lead);
        }
        let lead = if self.block_calls > 0 { 0 } else { lead };
        let body = &self.held[lead..];
        if body.is_empty() && !at_end {
            return Step::Wait;
        }
        if !body.starts_with('{') {
            return self.end_sequence(out);
        }
        let bare = self.state == State::Bare;
        match first_json(body) {
            Json::Incomplete if !at_end => Step::Wait,
            Json::Complete(v, n) => match call_of(&v) {
                Some((name, args)) if !bare || self.names.contains(&name) => {
                    self.held.drain(..lead + n);
                    self.call(out, name, args);
                    Step::Go
                }
                _ => self.end_sequence(out),
            },
            _ => self.end_sequence(out),
        }
    }

    /// DSML: invokes until the block's closing tag, each a call as soon as it is complete
    /// ([`dsml::next`]). At the end of the answer a missing or partial closing tag is
    /// forgiven. A block that ends in anything but an invoke or its closing tag stops
    /// there: without a call before, it is text, marker and all; after calls, the rest is.
    fn dsml_body(&mut self, out: &mut Vec<Piece>, at_end: bool) -> Step {
        match dsml::next(&self.held) {
            dsml::Next::Call {
                name,
                arguments,
                len,
            } => {
                self.held.drain(..len);
                self.call(out, name, arguments);
                Step::Go
            }
            dsml::Next::Close(len) if self.block_calls > 0 => {
                self.held.drain(..len);
                self.state = State::Text;
                Step::Go
            }
            dsml::Next::Wait if !at_end => Step::Wait,
            dsml::Next::Wait
                if self.block_calls > 0 && dsml::CLOSE.starts_with(self.held.trim_start()) =>
            {
                self.held.clear();
                self.state = State::Text;
                Step::Go
            }
            _ => self.end_sequence(out),
        }
    }

    /// Qwen3-Coder: `<tool_call>` then one function ([`qwen_xml::next`]). At the end of the
    /// answer a missing `</tool_call>` is forgiven; a block that does not parse is text,
    /// marker and all.
    fn xml_body(&mut self, out: &mut Vec<Piece>, at_end: bool) -> Step {
        let is_text = |tool: &str, key: &str| {
            let at = self.names.iter().position(|n| n == tool);
            at.is_some_and(|i| super::grammar::is_text(&self.schemas[i], key))
        };
        let next = match qwen_xml::next(&self.held, &is_text) {
            dsml::Next::Wait if at_end => {
                let closed = format!("{}\n{}", self.held.trim_end(), qwen_xml::CLOSE);
                match qwen_xml::next(&closed, &is_text) {
                    dsml::Next::Call {
                        name, arguments, ..
                    } => {
                        self.held.clear();
                        dsml::Next::Call {
                            name,
                            arguments,
                            len: 0,
                        }
                    }
                    _ => dsml::Next::Broken,
                }
            }
            next => next,
        };
        match next {
            dsml::Next::Call {
                name,
                arguments,
                len,
            } => {
                self.held.drain(..len);
                self.state = State::Text;
                self.call(out, name, arguments);
                Step::Go
            }
            dsml::Next::Wait => Step::Wait,
            _ => self.give_up_marker(out),
        }
    }

    /// A call sequence is over: if it held no call, its marker (if any) is text again.
    fn end_sequence(&mut self, out: &mut Vec<Piece>) -> Step {
        if self.block_calls == 0 && self.state == State::Marked {
            return self.give_up_marker(out);
        }
        self.state = State::Text;
        Step::Go
    }

    /// Generic: `{"tool_calls": [...]}`, `{"tool_call": {...}}` or `{"response": "..."}`;
    /// any other answer is text.
    fn generic_body(&mut self, out: &mut Vec<Piece>, at_end: bool) -> Step {
        let (v, n) = match first_json(&self.held) {
            Json::Incomplete if !at_end => return Step::Wait,
            Json::Complete(v, n) => (v, n),
            _ => {
                self.state = State::Plain;
                return Step::Go;
            }
        };
        let calls: Option<Vec<_>> = match (v.get("tool_calls"), v.get("tool_call")) {
            (Some(Value::Array(items)), _) if !items.is_empty() => {
                items.iter().map(call_of).collect()
            }
            (None, Some(call)) => call_of(call).map(|c| vec![c]),
            _ => None,
        };
        let response = match v.get("response") {
            Some(Value::String(s)) => Some(s.clone()),
            Some(other) => Some(other.to_string()),
            None => None,
        };
        self.state = State::Plain;
        match (calls, response) {
            (Some(calls), _) => {
                self.held.drain(..n);
                for (name, args) in calls {
                    self.call(out, name, args);
                }
            }
            (None, Some(text)) => {
                self.held.drain(..n);
                self.ws.clear();
                self.text(out, &text);
                self.after_call = true;
            }
            (None, None) => {}
        }
        Step::Go
    }

    /// The marker just seen opens no call: it is text, and what followed it is scanned again.
    /// Hermes: a fenced block holding one call of an offered tool (as llama.cpp's Hermes
    /// parser takes it); anything else in the fence is text, fence and all.
    fn fenced_body(&mut self, out: &mut Vec<Piece>, at_end: bool) -> Step {
        let (v, n) = match first_json(&self.held) {
            Json::Incomplete if !at_end => return Step::Wait,
            Json::Complete(v, n) => (v, n),
            _ => return self.give_up_fence(out),
        };
        let Some((name, args)) = call_of(&v).filter(|c| self.names.contains(&c.0)) else {
            return self.give_up_fence(out);
        };
        let taken = match self.closed_by(n, FENCE, at_end) {
            Closing::At(taken) => taken,
            Closing::Wait => return Step::Wait,
            Closing::Missing => return self.give_up_fence(out),
        };
        self.held.drain(..taken);
        self.fence.clear();
        self.state = State::Text;
        self.call(out, name, args);
        Step::Go
    }

    /// Whether the held text closes with `tag` after its first `n` bytes (whitespace
    /// between them allowed); at the end of the answer a missing or partial tag is forgiven.
    fn closed_by(&self, n: usize, tag: &str, at_end: bool) -> Closing {
        let after = &self.held[n..];
        let gap = after.len() - after.trim_start().len();
        if after[gap..].starts_with(tag) {
            Closing::At(n + gap + tag.len())
        } else if tag.starts_with(&after[gap..]) {
            match at_end {
                true => Closing::At(self.held.len()),
                false => Closing::Wait,
            }
        } else {
            Closing::Missing
        }
    }

    fn give_up_fence(&mut self, out: &mut Vec<Piece>) -> Step {
        let fence = std::mem::take(&mut self.fence);
        self.text(out, &fence);
        self.state = State::Text;
        Step::Go
    }

    fn give_up_marker(&mut self, out: &mut Vec<Piece>) -> Step {
        let marker = self.format.marker().unwrap_or_default();
        self.text(out, marker);
        self.state = State::Text;
        Step::Go
    }

    fn text(&mut self, out: &mut Vec<Piece>, s: &str) {
        let s = if self.after_call { s.trim_start() } else { s };
        let end = s.trim_end().len();
        if end == 0 {
            if !self.after_call {
                self.ws.push_str(s);
            }
            return;
        }
        self.after_call = false;
        let mut shown = std::mem::take(&mut self.ws);
        shown.push_str(&s[..end]);
        push_text(out, shown);
        self.ws = s[end..].to_string();
    }

    fn call(&mut self, out: &mut Vec<Piece>, name: String, arguments: String) {
        self.ws.clear();
        self.after_call = true;
        let index = self.n_calls;
        self.n_calls += 1;
        self.block_calls += 1;
        out.push(Piece::Call(ToolCall {
            index,
            id: call_id(self.format, self.id_seed, index),
            name,
            arguments,
        }));
    }
}

const FENCE: &str = "```";

/// Whether a text starts a fenced JSON block.
enum Fence {
    /// It may still: wait for more.
    Partial,
    /// It does: the opening (fence, language, newline, whitespace) is this many bytes, and
    /// the JSON starts right after.
    Open(usize),
    No,
}

/// Matches `` ```json `` (or a bare fence), a newline and whitespace, then `{`.
fn fence_open(s: &str) -> Fence {
    let b = s.as_bytes();
    if !b.starts_with(FENCE.as_bytes()) {
        return if FENCE.as_bytes().starts_with(b) {
            Fence::Partial
        } else {
            Fence::No
        };
    }
    let mut i = FENCE.len();
    let rest = &b[i..];
    if rest.starts_with(b"json") {
        i += 4;
    } else if b"json".starts_with(rest) {
        return Fence::Partial;
    }
    while b.get(i).is_some_and(|c| *c == b' ' || *c == b'\t') {
        i += 1;
    }
    match b.get(i) {
        None => return Fence::Partial,
        Some(b'\n') => i += 1,
        Some(_) => return Fence::No,
    }
    while b.get(i).is_some_and(u8::is_ascii_whitespace) {
        i += 1;
    }
    match b.get(i) {
        None => Fence::Partial,
        Some(b'{') => Fence::Open(i),
        Some(_) => Fence::No,
    }
}

fn push_text(out: &mut Vec<Piece>, s: String) {
    if s.is_empty() {
        return;
    }
    match out.last_mut() {
        Some(Piece::Text(t)) => t.push_str(&s),
        _ => out.push(Piece::Text(s)),
    }
}

/// The content and calls of a whole answer (not streamed).
pub fn parse_whole(
    format: ToolFormat,
    tools: &[Tool],
    id_seed: u64,
    text: &str,
) -> (String, Vec<ToolCall>) {
    let mut p = CallParser::new(format, tools, id_seed);
    let mut pieces = p.push(text);
    pieces.extend(p.finish());
    let mut content = String::new();
    let mut calls = Vec::new();
    for piece in pieces {
        match piece {
            Piece::Text(t) => content.push_str(&t),
            Piece::Call(c) => calls.push(c),
        }
    }
    (content, calls)
}

fn splitmix64(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

fn base62(mut x: u64, n: usize, out: &mut String) {
    const DIGITS: &[u8] = b"0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
    for _ in 0..n {
        out.push(DIGITS[(x % 62) as usize] as char);
        x /= 62;
    }
}

/// The id of call `index` of the answer seeded `seed`.
fn call_id(format: ToolFormat, seed: u64, index: usize) -> String {
    let a = splitmix64(seed ^ splitmix64(index as u64));
    let b = splitmix64(a);
    let mut id = String::with_capacity(21);
    if format == ToolFormat::Mistral {
        base62(a, 9, &mut id);
    } else {
        id.push_str("call_");
        base62(a, 8, &mut id);
        base62(b, 8, &mut id);
    }
    id
}

#[cfg(test)]
#[path = "parse_tests.rs"]
mod tests;
