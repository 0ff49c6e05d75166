//! OpenAI's Responses request, read into the chat request the rest of the server runs:
//! `instructions` becomes the first message, `input` (text, or items: messages,
//! `function_call`, `function_call_output`, `reasoning`) the conversation, `tools` and
//! `tool_choice` their chat forms, `text.format` the `response_format`. A stored response's
//! conversation comes before the input with `previous_response_id` ([`super::store`]);
//! `conversation` objects are refused, as is every other
//! field this server cannot honor. Errors name the Responses field.

use serde::Deserialize;
use serde_json::{json, Map, Value};

use crate::chat::{Content, Part, RawMessage};
use crate::constrain::RawChain;
use crate::error::ApiError;
use crate::validate::RawRequest;

/// The fields of `/v1/responses`. Names nobody defines are ignored, as on the other routes.
#[derive(Debug, Deserialize, Default)]
#[serde(default)]
pub struct ResponsesRequest {
    pub model: Option<String>,
    pub input: Option<Input>,
    pub instructions: Option<String>,
    pub max_output_tokens: Option<i64>,
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    pub tools: Option<Vec<Map<String, Value>>>,
    pub tool_choice: Option<Value>,
    pub parallel_tool_calls: Option<bool>,
    pub text: Option<TextConfig>,
    pub stream: Option<bool>,
    pub stream_options: Option<StreamOptions>,
    pub store: Option<bool>,
    /// Echoed in the response.
    pub metadata: Option<Map<String, Value>>,
    pub user: Option<String>,
    /// Opaque ids: nothing here depends on them.
    pub safety_identifier: Option<String>,
    /// A caching hint: every prompt's prefix is cached here.
    pub prompt_cache_key: Option<String>,
    pub truncation: Option<String>,
    pub service_tier: Option<String>,
    pub include: Option<Vec<String>>,
    pub reasoning: Option<Value>,
    pub background: Option<bool>,
    pub previous_response_id: Option<String>,
    pub conversation: Option<Value>,
    pub prompt: Option<Value>,
    pub max_tool_calls: Option<Value>,
    pub top_logprobs: Option<i64>,
    /// llama-server's stream telemetry.
    pub return_progress: Option<bool>,
    pub timings_per_token: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum Input {
    Text(String),
    Items(Vec<Map<String, Value>>),
}

#[derive(Debug, Deserialize, Default)]
#[serde(default)]
pub struct TextConfig {
    pub format: Option<Map<String, Value>>,
    pub verbosity: Option<String>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(default)]
pub struct StreamOptions {
    pub include_obfuscation: Option<bool>,
}

fn message(role: &str, content: String, rest: Map<String, Value>) -> RawMessage {
    RawMessage {
        role: role.into(),
        content: Some(Content::Text(content)),
        rest,
    }
}

/// A message item's content: a string, or parts of text and images (`input_image` with a
/// data URL in `image_url`).
fn content_parts(at: &str, content: Option<&Value>) -> Result<Content, ApiError> {
    match content {
        None | Some(Value::Null) => Ok(Content::Text(String::new())),
        Some(Value::String(s)) => Ok(Content::Text(s.clone())),
        Some(Value::Array(parts)) => {
            let mut out = Vec::with_capacity(parts.len());
            for (j, p) in parts.iter().enumerate() {
                let field = format!("{at}.content[{j}]");
                match (p.get("type").and_then(Value::as_str), p.get("text")) {
                    (Some("input_text" | "output_text" | "text"), Some(Value::String(t))) => {
                        out.push(Part::text(t.as_str()))
                    }
                    (Some("input_image"), _) => match p.get("image_url").and_then(Value::as_str) {
                        Some(url) => out.push(Part::image(url.to_string(), format!("{field}.image_url"))),
                        None => {
                            return Err(ApiError::invalid(
                                &field,
                                format!("{field}: an input_image needs an image_url (file_id is not read)"),
                            ))
                        }
                    },
                    (kind, _) => {
                        return Err(ApiError::invalid(
                            &field,
                            format!(
                                "{field}: a part of type {} is not supported (input_text, output_text, input_image)",
                                kind.unwrap_or("(none)")
                            ),
                        ))
                    }
                }
            }
            Ok(Content::Parts(out))
        }
        Some(_) => Err(ApiError::invalid(
            format!("{at}.content"),
            format!("{at}.content must be a string or a list of text parts"),
        )),
    }
}

/// Appends input item `i` to the conversation: function calls join the assistant message
/// before them (or open one), reasoning is kept for the next assistant message.
fn item(
    i: usize,
    it: &Map<String, Value>,
    out: &mut Vec<RawMessage>,
    reasoning: &mut String,
) -> Result<(), ApiError> {
    let at = format!("input[{i}]");
    let str_field = |name: &str| -> Result<String, ApiError> {
        it.get(name)
            .and_then(Value::as_str)
            .map(str::to_string)
            .ok_or_else(|| {
                ApiError::invalid(
                    format!("{at}.{name}"),
                    format!("{at}.{name} is required (a string)"),
                )
            })
    };
    let kind = it.get("type").and_then(Value::as_str).unwrap_or("message");
    match kind {
        "message" => {
            let role = str_field("role")?;
            if !["user", "assistant", "system", "developer"].contains(&role.as_str()) {
                return Err(ApiError::invalid(
                    format!("{at}.role"),
                    format!("{at}.role: '{role}' is not user, assistant, system or developer"),
                ));
            }
            let content = content_parts(&at, it.get("content"))?;
            let mut rest = Map::new();
            if role == "assistant" && !reasoning.is_empty() {
                rest.insert("reasoning_content".into(), json!(std::mem::take(reasoning)));
            }
            out.push(RawMessage {
                role,
                content: Some(content),
                rest,
            });
        }
        "function_call" => {
            let call = json!({
                "id": str_field("call_id")?, "type": "function",
                "function": {"name": str_field("name")?, "arguments": str_field("arguments")?},
            });
            let open = out.last_mut().filter(|m| m.role == "assistant");
            match open {
                Some(m) => match m.rest.get_mut("tool_calls").and_then(Value::as_array_mut) {
                    Some(calls) => calls.push(call),
                    None => {
                        m.rest.insert("tool_calls".into(), json!([call]));
                    }
                },
                None => {
                    let mut rest = Map::from_iter([("tool_calls".into(), json!([call]))]);
                    if !reasoning.is_empty() {
                        rest.insert("reasoning_content".into(), json!(std::mem::take(reasoning)));
                    }
                    out.push(message("assistant", String::new(), rest));
                }
            }
        }
        "function_call_output" => {
            let output = match it.get("output") {
                Some(Value::String(s)) => s.clone(),
                other => match content_parts(&at, other)? {
                    Content::Text(t) => t,
                    Content::Parts(parts) => parts
                        .into_iter()
                        .map(|p| p.text.filter(|_| p.kind == "text"))
                        .collect::<Option<String>>()
                        .ok_or_else(|| {
                            ApiError::invalid(
                                format!("{at}.output"),
                                format!("{at}.output: a function call's output is text only"),
                            )
                        })?,
                },
            };
            let rest = Map::from_iter([("tool_call_id".into(), json!(str_field("call_id")?))]);
            out.push(message("tool", output, rest));
        }
        "reasoning" => {
            for part in it.get("content").and_then(Value::as_array).into_iter().flatten() {
                reasoning.push_str(part.get("text").and_then(Value::as_str).unwrap_or(""));
            }
        }
        other => {
            return Err(ApiError::invalid(
                format!("{at}.type"),
                format!("{at}: items of type {other} are not supported (message, function_call, function_call_output, reasoning)"),
            ))
        }
    }
    Ok(())
}

/// A function tool in its chat form; built-in tools are refused.
fn tool(i: usize, t: &Map<String, Value>) -> Result<Value, ApiError> {
    match t.get("type").and_then(Value::as_str) {
        Some("function") => {}
        other => {
            return Err(ApiError::invalid(
                format!("tools[{i}].type"),
                format!(
                    "tools[{i}]: tools of type {} are not available here (function only)",
                    other.unwrap_or("(none)")
                ),
            ))
        }
    }
    let mut function = Map::new();
    for name in ["name", "description", "parameters", "strict"] {
        if let Some(v) = t.get(name) {
            function.insert(name.into(), v.clone());
        }
    }
    Ok(json!({"type": "function", "function": function}))
}

fn tool_choice(c: Value) -> Result<Value, ApiError> {
    match &c {
        Value::String(s) if ["none", "auto", "required"].contains(&s.as_str()) => Ok(c),
        Value::Object(o) if o.get("type") == Some(&json!("function")) => match o.get("name") {
            Some(name) => Ok(json!({"type": "function", "function": {"name": name}})),
            None => Err(ApiError::invalid(
                "tool_choice.name",
                "a function tool_choice needs a name",
            )),
        },
        _ => Err(ApiError::invalid(
            "tool_choice",
            "tool_choice must be none, auto, required or {\"type\": \"function\", \"name\": ...}",
        )),
    }
}

/// `text.format` as a chat `response_format`.
fn format(f: Map<String, Value>) -> Result<Option<Value>, ApiError> {
    match f.get("type").and_then(Value::as_str) {
        Some("text") => Ok(None),
        Some("json_object") => Ok(Some(json!({"type": "json_object"}))),
        Some("json_schema") => {
            let mut schema = f.clone();
            schema.remove("type");
            Ok(Some(json!({"type": "json_schema", "json_schema": schema})))
        }
        other => Err(ApiError::invalid(
            "text.format.type",
            format!(
                "text.format.type must be text, json_object or json_schema, got {}",
                other.unwrap_or("(none)")
            ),
        )),
    }
}

impl ResponsesRequest {
    /// Fields given that this server cannot honor, first one first.
    fn refused(&self) -> Option<(&'static str, &'static str)> {
        let named = [
            (
                "conversation",
                self.conversation.is_some(),
                "conversation objects are not supported; continue with previous_response_id",
            ),
            (
                "background",
                self.background == Some(true),
                "background responses are not supported",
            ),
            (
                "prompt",
                self.prompt.is_some(),
                "stored prompts are not supported",
            ),
            (
                "reasoning",
                self.reasoning.as_ref().is_some_and(|r| !r.is_null()),
                "reasoning options are not supported: the model thinks as its template says",
            ),
            (
                "include",
                self.include.as_ref().is_some_and(|v| !v.is_empty()),
                "include is not supported",
            ),
            (
                "max_tool_calls",
                self.max_tool_calls.as_ref().is_some_and(|v| !v.is_null()),
                "max_tool_calls is not supported",
            ),
            (
                "top_logprobs",
                self.top_logprobs.is_some_and(|n| n != 0),
                "log-probabilities are not supported on this route; use /v1/chat/completions",
            ),
            (
                "truncation",
                self.truncation.as_deref().is_some_and(|t| t != "disabled"),
                "only truncation: disabled (a prompt that does not fit is refused)",
            ),
            (
                "service_tier",
                self.service_tier
                    .as_deref()
                    .is_some_and(|t| !["auto", "default"].contains(&t)),
                "one service tier here: auto or default",
            ),
            (
                "text.verbosity",
                self.text.as_ref().is_some_and(|t| t.verbosity.is_some()),
                "text.verbosity is not supported",
            ),
            (
                "stream_options.include_obfuscation",
                self.stream_options
                    .as_ref()
                    .is_some_and(|o| o.include_obfuscation == Some(true)),
                "obfuscation is not supported",
            ),
        ];
        named
            .into_iter()
            .find(|(_, given, _)| *given)
            .map(|(name, _, why)| (name, why))
    }

    /// The fields a response repeats, as they were given.
    pub fn echo(&self) -> Map<String, Value> {
        let mut echo = Map::new();
        let mut put = |k: &str, v: Value| {
            if !v.is_null() {
                echo.insert(k.into(), v);
            }
        };
        put("instructions", json!(self.instructions));
        put("max_output_tokens", json!(self.max_output_tokens));
        put("temperature", json!(self.temperature));
        put("top_p", json!(self.top_p));
        put("tools", json!(self.tools));
        put(
            "tool_choice",
            self.tool_choice.clone().unwrap_or(Value::Null),
        );
        put("parallel_tool_calls", json!(self.parallel_tool_calls));
        put("metadata", json!(self.metadata));
        put("user", json!(self.user));
        put("store", json!(self.store != Some(false)));
        put("previous_response_id", json!(self.previous_response_id));
        if let Some(f) = self.text.as_ref().and_then(|t| t.format.as_ref()) {
            put("text", json!({"format": f}));
        }
        echo
    }

    /// The chat request this asks for.
    /// The chat request this asks for after the conversation `previous` (a stored
    /// response's items), and the conversation's items with this input (what a stored
    /// response keeps).
    pub fn into_chat(self, previous: Vec<Value>) -> Result<(RawRequest, Vec<Value>), ApiError> {
        if let Some((name, why)) = self.refused() {
            return Err(ApiError::invalid(name, format!("{name}: {why}")));
        }
        let mut messages = Vec::new();
        if let Some(i) = self.instructions {
            messages.push(message("system", i, Map::new()));
        }
        let mut items = previous;
        match self.input {
            None => return Err(ApiError::invalid("input", "input is required")),
            Some(Input::Text(t)) => items.push(json!({"role": "user", "content": t})),
            Some(Input::Items(given)) => items.extend(given.into_iter().map(Value::Object)),
        }
        let mut reasoning = String::new();
        for (i, it) in items.iter().enumerate() {
            let it = it.as_object().ok_or_else(|| {
                ApiError::invalid(
                    format!("input[{i}]"),
                    format!("input[{i}] must be an object"),
                )
            })?;
            item(i, it, &mut messages, &mut reasoning)?;
        }
        let tools = self
            .tools
            .map(|ts| {
                ts.iter()
                    .enumerate()
                    .map(|(i, t)| tool(i, t))
                    .collect::<Result<Vec<_>, _>>()
            })
            .transpose()?;
        let response_format = match self.text.and_then(|t| t.format) {
            None => None,
            Some(f) => format(f)?,
        };
        let raw = RawRequest {
            model: self.model,
            messages: Some(messages),
            max_tokens: self.max_output_tokens,
            temperature: self.temperature,
            top_p: self.top_p,
            stream: self.stream,
            tools: tools.map(Value::Array),
            tool_choice: self.tool_choice.map(tool_choice).transpose()?,
            parallel_tool_calls: self.parallel_tool_calls.map(Value::Bool),
            return_progress: self.return_progress,
            timings_per_token: self.timings_per_token,
            chain: RawChain {
                response_format,
                ..RawChain::default()
            },
            ..RawRequest::default()
        };
        Ok((raw, items))
    }
}

/// An error of the chat request, named as the Responses request names its field.
pub fn renamed(mut e: ApiError) -> ApiError {
    let rename = |s: &str| {
        s.replace("max_tokens", "max_output_tokens")
            .replace("response_format.json_schema", "text.format")
            .replace("response_format", "text.format")
            .replace(".function.", ".")
            .replace("messages", "input")
    };
    e.param = e.param.map(|p| rename(&p));
    e.message = rename(&e.message);
    e
}
