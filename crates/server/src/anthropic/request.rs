//! Anthropic's Messages request, read into the chat request the rest of the server runs:
//! `system` becomes the first message, content blocks become text, `tool_use` blocks the
//! assistant's `tool_calls`, `tool_result` blocks `tool` messages, `tools` and
//! `tool_choice` their OpenAI forms. A final assistant message is continued (Anthropic's
//! prefill). Errors name the Anthropic field.

use serde::Deserialize;
use serde_json::{json, Map, Value};

use crate::chat::{Content, Part, RawMessage};
use crate::constrain::RawChain;
use crate::error::ApiError;
use crate::validate::{RawRequest, Stop};

/// The fields of `/v1/messages` (and `/v1/messages/count_tokens`, which has no
/// `max_tokens`). Names nobody defines are ignored, as on the other routes.
#[derive(Debug, Deserialize, Default)]
#[serde(default)]
pub struct MessagesRequest {
    pub model: Option<String>,
    pub max_tokens: Option<i64>,
    pub messages: Option<Vec<Message>>,
    pub system: Option<System>,
    pub stop_sequences: Option<Vec<String>>,
    pub stream: Option<bool>,
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    pub top_k: Option<i64>,
    pub tools: Option<Vec<Map<String, Value>>>,
    pub tool_choice: Option<ToolChoice>,
    /// `user_id`: an opaque id for abuse detection; nothing here depends on it.
    pub metadata: Option<Value>,
    pub thinking: Option<Thinking>,
    /// `auto` or `standard_only`: one tier here, so both are honored.
    pub service_tier: Option<String>,
    /// Marks the prompt for caching: every prompt's prefix is cached here, so it is honored.
    pub cache_control: Option<CacheControl>,
    /// `format` (a JSON schema the answer follows) is honored; `effort` is not.
    pub output_config: Option<OutputConfig>,
    /// `standard` only: there is one speed here.
    pub speed: Option<String>,
    pub container: Option<Value>,
    pub mcp_servers: Option<Value>,
    pub context_management: Option<Value>,
    pub diagnostics: Option<Value>,
    pub inference_geo: Option<Value>,
    pub user_profile_id: Option<Value>,
    pub workspace_id: Option<Value>,
}

#[derive(Debug, Deserialize)]
pub struct CacheControl {
    #[serde(rename = "type")]
    pub kind: String,
}

#[derive(Debug, Deserialize, Default)]
#[serde(default)]
pub struct OutputConfig {
    pub effort: Option<String>,
    pub format: Option<OutputFormat>,
}

#[derive(Debug, Deserialize)]
pub struct OutputFormat {
    #[serde(rename = "type")]
    pub kind: String,
    pub schema: Option<Value>,
}

#[derive(Debug, Deserialize)]
pub struct Message {
    pub role: String,
    pub content: Blocks,
}

/// Content: a string, or a list of blocks (each read by its `type`).
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum Blocks {
    Text(String),
    List(Vec<Map<String, Value>>),
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum System {
    Text(String),
    Blocks(Vec<Map<String, Value>>),
}

#[derive(Debug, Deserialize)]
pub struct ToolChoice {
    #[serde(rename = "type")]
    pub kind: String,
    pub name: Option<String>,
    #[serde(default)]
    pub disable_parallel_tool_use: bool,
}

#[derive(Debug, Deserialize)]
pub struct Thinking {
    #[serde(rename = "type")]
    pub kind: String,
    /// With `enabled`: reasoning tokens before the end of reasoning is forced.
    pub budget_tokens: Option<i64>,
}

fn text_of(at: &str, blocks: &[Map<String, Value>]) -> Result<String, ApiError> {
    let mut s = String::new();
    for (j, b) in blocks.iter().enumerate() {
        match (b.get("type").and_then(Value::as_str), b.get("text")) {
            (Some("text"), Some(Value::String(t))) => s.push_str(t),
            (kind, _) => {
                return Err(ApiError::invalid(
                    format!("{at}[{j}]"),
                    format!(
                        "{at}[{j}]: a block of type {} is not supported here (text blocks only)",
                        kind.unwrap_or("(none)")
                    ),
                ))
            }
        }
    }
    Ok(s)
}

fn message(role: &str, content: Option<String>, rest: Map<String, Value>) -> RawMessage {
    RawMessage {
        role: role.into(),
        content: content.map(Content::Text),
        rest,
    }
}

fn user_parts(parts: Vec<Part>) -> RawMessage {
    RawMessage {
        role: "user".into(),
        content: Some(Content::Parts(parts)),
        rest: Map::new(),
    }
}

/// An image block's `source` as an image URL: a data URL of `{"type": "base64",
/// "media_type", "data"}`, or the `url` of `{"type": "url", "url"}` (fetched only with
/// `--image-urls allow`).
fn image_source(source: Option<&Value>, field: &str) -> Result<String, ApiError> {
    let bad = |why: &str| ApiError::invalid(field, format!("{field}: {why}"));
    let source = source.ok_or_else(|| bad("an image block needs a source"))?;
    match source.get("type").and_then(Value::as_str) {
        Some("base64") => {
            let media = source
                .get("media_type")
                .and_then(Value::as_str)
                .unwrap_or("image");
            let data = source
                .get("data")
                .and_then(Value::as_str)
                .ok_or_else(|| bad("a base64 source needs a string `data`"))?;
            Ok(format!("data:{media};base64,{data}"))
        }
        Some("url") => source
            .get("url")
            .and_then(Value::as_str)
            .map(str::to_string)
            .ok_or_else(|| bad("a url source needs a string `url`")),
        other => Err(bad(&format!(
            "a source of type {} is not supported (base64)",
            other.unwrap_or("(none)")
        ))),
    }
}

/// One Anthropic message as chat messages: the assistant's with its text, reasoning and
/// calls; the user's as `tool` messages for its results and a user message for its text,
/// in the order the blocks came.
fn convert(i: usize, m: Message, out: &mut Vec<RawMessage>) -> Result<(), ApiError> {
    let at = format!("messages[{i}].content");
    let blocks = match m.content {
        Blocks::Text(t) => vec![Map::from_iter([
            ("type".into(), json!("text")),
            ("text".into(), json!(t)),
        ])],
        Blocks::List(b) => b,
    };
    let bad =
        |j: usize, why: &str| ApiError::invalid(format!("{at}[{j}]"), format!("{at}[{j}]: {why}"));
    match m.role.as_str() {
        "assistant" => {
            let (mut text, mut reasoning, mut calls) = (String::new(), String::new(), Vec::new());
            for (j, b) in blocks.iter().enumerate() {
                match b.get("type").and_then(Value::as_str) {
                    Some("text") => text.push_str(b.get("text").and_then(Value::as_str).unwrap_or("")),
                    Some("thinking") => {
                        reasoning.push_str(b.get("thinking").and_then(Value::as_str).unwrap_or(""))
                    }
                    Some("redacted_thinking") => {}
                    Some("tool_use") => {
                        let (Some(id), Some(name)) = (
                            b.get("id").and_then(Value::as_str),
                            b.get("name").and_then(Value::as_str),
                        ) else {
                            return Err(bad(j, "a tool_use block needs an id and a name"));
                        };
                        let input = b.get("input").cloned().unwrap_or_else(|| json!({}));
                        calls.push(json!({
                            "id": id, "type": "function",
                            "function": {"name": name, "arguments": input.to_string()},
                        }));
                    }
                    other => {
                        return Err(bad(j, &format!(
                            "an assistant block of type {} is not supported (text, thinking, tool_use)",
                            other.unwrap_or("(none)")
                        )))
                    }
                }
            }
            let mut rest = Map::new();
            if !reasoning.is_empty() {
                rest.insert("reasoning_content".into(), json!(reasoning));
            }
            if !calls.is_empty() {
                rest.insert("tool_calls".into(), Value::Array(calls));
            }
            out.push(message("assistant", Some(text), rest));
        }
        "user" => {
            let mut parts: Option<Vec<Part>> = None;
            for (j, b) in blocks.iter().enumerate() {
                match b.get("type").and_then(Value::as_str) {
                    Some("text") => parts.get_or_insert_with(Vec::new).push(Part::text(
                        b.get("text").and_then(Value::as_str).unwrap_or(""),
                    )),
                    Some("image") => {
                        let field = format!("{at}[{j}].source");
                        let url = image_source(b.get("source"), &field)?;
                        parts
                            .get_or_insert_with(Vec::new)
                            .push(Part::image(url, field));
                    }
                    Some("tool_result") => {
                        if let Some(p) = parts.take() {
                            out.push(user_parts(p));
                        }
                        let Some(id) = b.get("tool_use_id").and_then(Value::as_str) else {
                            return Err(bad(j, "a tool_result block needs a tool_use_id"));
                        };
                        let mut result = match b.get("content") {
                            None | Some(Value::Null) => String::new(),
                            Some(Value::String(s)) => s.clone(),
                            Some(Value::Array(parts)) => {
                                let parts: Vec<Map<String, Value>> = parts
                                    .iter()
                                    .filter_map(|p| p.as_object().cloned())
                                    .collect();
                                text_of(&format!("{at}[{j}].content"), &parts)?
                            }
                            Some(_) => {
                                return Err(bad(j, "content must be a string or text blocks"))
                            }
                        };
                        if b.get("is_error") == Some(&Value::Bool(true)) {
                            result.insert_str(0, "Error: ");
                        }
                        let rest = Map::from_iter([("tool_call_id".into(), json!(id))]);
                        out.push(message("tool", Some(result), rest));
                    }
                    other => {
                        return Err(bad(
                            j,
                            &format!(
                            "a user block of type {} is not supported (text, image, tool_result)",
                            other.unwrap_or("(none)")
                        ),
                        ))
                    }
                }
            }
            if let Some(p) = parts {
                out.push(user_parts(p));
            }
        }
        other => {
            return Err(ApiError::invalid(
                format!("messages[{i}].role"),
                format!("messages[{i}].role: '{other}' is neither user nor assistant"),
            ))
        }
    }
    Ok(())
}

/// A tool as OpenAI's `{"type": "function", "function": ...}`; Anthropic's server tools
/// (a `type` other than `custom`) are refused.
fn tool(i: usize, t: Map<String, Value>) -> Result<Value, ApiError> {
    match t.get("type").and_then(Value::as_str) {
        None | Some("custom") => {}
        Some(kind) => {
            return Err(ApiError::invalid(
                format!("tools[{i}].type"),
                format!("tools[{i}]: server tools ({kind}) are not available here; define the tool with a name and an input_schema"),
            ))
        }
    }
    let mut function = Map::new();
    for (from, to) in [
        ("name", "name"),
        ("description", "description"),
        ("input_schema", "parameters"),
    ] {
        if let Some(v) = t.get(from) {
            function.insert(to.into(), v.clone());
        }
    }
    Ok(json!({"type": "function", "function": function}))
}

impl MessagesRequest {
    /// The chat request this asks for; `max_tokens` is required unless `counting`.
    pub fn into_chat(self, counting: bool) -> Result<RawRequest, ApiError> {
        let refused = [
            ("container", self.container.is_some()),
            ("mcp_servers", self.mcp_servers.is_some()),
            ("context_management", self.context_management.is_some()),
            ("diagnostics", self.diagnostics.is_some()),
            ("inference_geo", self.inference_geo.is_some()),
            ("user_profile_id", self.user_profile_id.is_some()),
            ("workspace_id", self.workspace_id.is_some()),
            (
                "speed",
                self.speed.as_deref().is_some_and(|s| s != "standard"),
            ),
            (
                "cache_control",
                self.cache_control.is_some_and(|c| c.kind != "ephemeral"),
            ),
        ];
        if let Some((name, _)) = refused.iter().find(|(_, given)| *given) {
            return Err(ApiError::invalid(
                *name,
                format!("{name} is not supported by this server"),
            ));
        }
        let config = self.output_config.unwrap_or_default();
        if config.effort.is_some() {
            return Err(ApiError::invalid(
                "output_config.effort",
                "output_config.effort is not supported: the model thinks as its template says",
            ));
        }
        let schema = match config.format {
            None => None,
            Some(OutputFormat { kind, schema: Some(schema) }) if kind == "json_schema" => Some(schema),
            Some(f) => {
                return Err(ApiError::invalid(
                    "output_config.format",
                    format!("output_config.format must be {{\"type\": \"json_schema\", \"schema\": ...}}, got type '{}'", f.kind),
                ))
            }
        };
        if let Some(tier) = self
            .service_tier
            .as_deref()
            .filter(|t| !["auto", "standard_only"].contains(t))
        {
            return Err(ApiError::invalid(
                "service_tier",
                format!("service_tier must be auto or standard_only, got '{tier}'"),
            ));
        }
        let mut kwargs = Map::new();
        let mut budget = None;
        match self.thinking.as_ref().map(|t| (t.kind.as_str(), t.budget_tokens)) {
            None | Some(("adaptive", _)) => {}
            Some(("disabled", _)) => {
                kwargs.insert("enable_thinking".into(), json!(false));
            }
            Some(("enabled", tokens)) => {
                kwargs.insert("enable_thinking".into(), json!(true));
                budget = match tokens {
                    Some(n) if n >= 0 => Some(n),
                    Some(n) => {
                        return Err(ApiError::invalid(
                            "thinking.budget_tokens",
                            format!("thinking.budget_tokens must be at least 0, got {n}"),
                        ))
                    }
                    None => {
                        return Err(ApiError::invalid(
                            "thinking.budget_tokens",
                            "thinking.budget_tokens is required with thinking of type 'enabled'",
                        ))
                    }
                };
            }
            Some((kind, _)) => {
                return Err(ApiError::invalid(
                    "thinking",
                    format!("thinking of type '{kind}' is not supported: enabled (with budget_tokens), adaptive or disabled"),
                ))
            }
        }
        if !counting && self.max_tokens.is_none() {
            return Err(ApiError::invalid("max_tokens", "max_tokens is required"));
        }
        crate::validate::range("temperature", self.temperature, 0.0, 1.0)?;
        let mut messages = Vec::new();
        match self.system {
            None => {}
            Some(System::Text(t)) => messages.push(message("system", Some(t), Map::new())),
            Some(System::Blocks(b)) => {
                let t = text_of("system", &b)?;
                messages.push(message("system", Some(t), Map::new()));
            }
        }
        let given = self
            .messages
            .ok_or_else(|| ApiError::invalid("messages", "messages is required"))?;
        for (i, m) in given.into_iter().enumerate() {
            convert(i, m, &mut messages)?;
        }
        let tools = self
            .tools
            .map(|ts| {
                ts.into_iter()
                    .enumerate()
                    .map(|(i, t)| tool(i, t))
                    .collect::<Result<Vec<_>, _>>()
            })
            .transpose()?;
        let (tool_choice, parallel) = match self.tool_choice {
            None => (None, None),
            Some(c) => {
                let choice = match (c.kind.as_str(), c.name) {
                    ("auto", _) => json!("auto"),
                    ("any", _) => json!("required"),
                    ("none", _) => json!("none"),
                    ("tool", Some(name)) => json!({"type": "function", "function": {"name": name}}),
                    ("tool", None) => {
                        return Err(ApiError::invalid(
                            "tool_choice.name",
                            "tool_choice of type tool needs a name",
                        ))
                    }
                    (kind, _) => {
                        return Err(ApiError::invalid(
                            "tool_choice.type",
                            format!(
                                "tool_choice.type must be auto, any, tool or none, got '{kind}'"
                            ),
                        ))
                    }
                };
                (
                    Some(choice),
                    c.disable_parallel_tool_use.then_some(json!(false)),
                )
            }
        };
        Ok(RawRequest {
            model: self.model,
            messages: Some(messages),
            max_tokens: self.max_tokens,
            temperature: self.temperature,
            top_p: self.top_p,
            top_k: self.top_k,
            stop: self.stop_sequences.map(Stop::Many),
            stream: self.stream,
            tools: tools.map(Value::Array),
            tool_choice,
            parallel_tool_calls: parallel,
            chat_template_kwargs: (!kwargs.is_empty()).then_some(kwargs),
            thinking_budget_tokens: budget,
            empty_messages: true,
            chain: RawChain {
                json_schema: schema,
                ..RawChain::default()
            },
            ..RawRequest::default()
        })
    }
}

/// An error of the chat request, named as the Messages request names its field.
pub fn renamed(mut e: ApiError) -> ApiError {
    let rename = |s: &str| {
        let s = s
            .replace(".function.parameters", ".input_schema")
            .replace(".function.", ".")
            .replace("json_schema", "output_config.format.schema");
        match s.strip_prefix("stop") {
            Some(rest) if !rest.starts_with('_') => format!("stop_sequences{rest}"),
            _ => s,
        }
    };
    e.param = e.param.map(|p| rename(&p));
    e.message = rename(&e.message);
    e
}
