//! Chat prompts: the messages as sent, rendered with the model's template, the tools shown
//! as the model expects them, and the prompt ended as asked (the assistant's turn opened,
//! a final assistant message continued, or neither).

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::{Map, Value};
use text::RenderOptions;

use crate::error::ApiError;
use crate::state::Ready;
use crate::tools::{self, ToolSpec};
use crate::vision::{self, Picture, Vision};

/// One chat message as sent: `content` is a string, a list of parts, or null.
#[derive(Debug, Deserialize)]
pub struct RawMessage {
    pub role: String,
    #[serde(default)]
    pub content: Option<Content>,
    #[serde(flatten)]
    pub rest: Map<String, Value>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum Content {
    Text(String),
    Parts(Vec<Part>),
}

#[derive(Debug, Deserialize)]
pub struct Part {
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default)]
    pub text: Option<String>,
    /// An `image_url` part's image.
    #[serde(default)]
    pub image_url: Option<Value>,
    /// Where the image came from, for errors, when another API's request made the part (an
    /// Anthropic image block's `source`); else `messages[i].content[j].image_url`.
    #[serde(skip)]
    pub field: Option<String>,
}

impl Part {
    pub fn text(t: impl Into<String>) -> Part {
        Part {
            kind: "text".into(),
            text: Some(t.into()),
            image_url: None,
            field: None,
        }
    }

    /// An image part of `url` (a data URL), sent as `field`.
    pub fn image(url: String, field: String) -> Part {
        Part {
            kind: "image_url".into(),
            text: None,
            image_url: Some(Value::String(url)),
            field: Some(field),
        }
    }
}

/// A message's content as the template sees it: its text, an image part's place marked
/// ([`vision::MARKER`]) and the image decoded into `pictures`.
fn content_text(
    c: Option<Content>,
    at: usize,
    vision: Option<&Vision>,
    pictures: &mut Vec<Picture>,
) -> Result<Value, ApiError> {
    match c {
        None => Ok(Value::Null),
        Some(Content::Text(s)) => Ok(Value::String(s)),
        Some(Content::Parts(parts)) => {
            let mut s = String::new();
            for (j, p) in parts.into_iter().enumerate() {
                let field = format!("messages[{at}].content[{j}]");
                match (p.kind.as_str(), p.text, p.image_url) {
                    ("text", Some(t), _) => s.push_str(&t),
                    ("image_url", _, Some(url)) => {
                        let field = p.field.unwrap_or(format!("{field}.image_url"));
                        let v = vision.ok_or_else(|| {
                            ApiError::invalid(&field, format!("{field}: this server has no vision tower loaded (start it with --mmproj), so it reads no images"))
                        })?;
                        pictures.push(vision::image_url(&url, &field, v)?);
                        s.push_str(vision::MARKER);
                    }
                    (kind, _, _) => {
                        return Err(ApiError::invalid(
                            field,
                            format!("content part of type '{kind}' is not supported (text with a 'text' field, or image_url with an 'image_url')"),
                        ))
                    }
                }
            }
            Ok(Value::String(s))
        }
    }
}

/// The message roles of the OpenAI chat API.
const ROLES: [&str; 6] = [
    "system",
    "developer",
    "user",
    "assistant",
    "tool",
    "function",
];

/// How a chat prompt ends: `continue_final_message` and `add_generation_prompt` as sent.
#[derive(Debug, Clone, Copy, Default)]
pub struct Ending {
    pub continue_final: Option<bool>,
    pub generation_prompt: Option<bool>,
    /// No messages at all render as the template's opening of the assistant's turn
    /// (llama-server's `/v1/messages`); otherwise they are a 400.
    pub empty: bool,
}

impl Ending {
    /// Whether to continue the final message (its role `last`), and whether to open the
    /// assistant's turn: llama-server continues a final assistant message unless told not
    /// to; asking for both is a 400.
    fn decide(self, last: &str) -> Result<(bool, bool), ApiError> {
        let continues = self.continue_final.unwrap_or(last == "assistant");
        if continues && last != "assistant" {
            return Err(ApiError::invalid(
                "continue_final_message",
                format!("continue_final_message needs a final assistant message; the last is the {last}'s"),
            ));
        }
        match (continues, self.generation_prompt) {
            (true, Some(true)) => Err(ApiError::invalid(
                "continue_final_message",
                "continue_final_message and add_generation_prompt cannot both be true: the answer either continues the final message or opens a new turn",
            )),
            (true, _) => Ok((true, false)),
            (false, g) => Ok((false, g.unwrap_or(true))),
        }
    }
}

/// Renders chat messages with the model's template into the prompt text, with the tools
/// `spec` offers shown the way the model expects ([`tools::prepare_messages`]) and `kwargs`
/// as template variables (`enable_thinking`, unless given, the server's
/// [`Ready::thinking`]). A final assistant message that `ending` continues is taken out, the
/// rest rendered with the assistant's turn opened, and its text appended (as llama-server
/// prefills). Images come back decoded, in order, where the text has a
/// [`vision::MARKER`] for each.
pub fn render_chat(
    ready: &Ready,
    messages: Vec<RawMessage>,
    spec: &ToolSpec,
    kwargs: Option<Map<String, Value>>,
    ending: Ending,
) -> Result<(String, Vec<Picture>), ApiError> {
    let mut pictures = Vec::new();
    if messages.is_empty() && !ending.empty {
        return Err(ApiError::invalid("messages", "messages must not be empty"));
    }
    let template = ready.template.as_ref().ok_or_else(|| {
        ApiError::bad_request(
            "this model has no chat template; pass --chat-template or use /v1/completions",
        )
    })?;
    let mut msgs = messages
        .into_iter()
        .enumerate()
        .map(|(i, m)| {
            if !ROLES.contains(&m.role.as_str()) {
                return Err(ApiError::invalid(
                    format!("messages[{i}].role"),
                    format!(
                        "messages[{i}].role: unknown role '{}' (expected one of {})",
                        m.role,
                        ROLES.join(", ")
                    ),
                ));
            }
            let mut obj = m.rest;
            obj.insert("role".into(), Value::String(m.role));
            let content = content_text(m.content, i, ready.vision.as_ref(), &mut pictures)?;
            obj.insert("content".into(), content);
            Ok(Value::Object(obj))
        })
        .collect::<Result<Vec<_>, ApiError>>()?;
    let (continues, add_generation_prompt) = match msgs.last() {
        Some(last) => ending.decide(last["role"].as_str().unwrap_or(""))?,
        None => (false, ending.generation_prompt.unwrap_or(true)),
    };
    let prefill = match continues {
        false => String::new(),
        true => continued(&mut msgs)?,
    };
    let tools = tools::prepare_messages(&mut msgs, ready.tool_support, ready.tool_format, spec);
    let mut extra: BTreeMap<String, Value> = kwargs.unwrap_or_default().into_iter().collect();
    if let Some(on) = ready.thinking {
        extra
            .entry("enable_thinking".into())
            .or_insert(Value::Bool(on));
    }
    let options = RenderOptions {
        add_generation_prompt: add_generation_prompt || continues,
        tools,
        extra,
    };
    let mut prompt = template
        .render_with(&msgs, &options)
        .map_err(|e| ApiError::invalid("messages", format!("the chat template failed: {e}")))?;
    prompt.push_str(&prefill);
    Ok((prompt, pictures))
}

/// Takes the final assistant message out of `msgs`: its text, which the answer continues.
fn continued(msgs: &mut Vec<Value>) -> Result<String, ApiError> {
    let at = msgs.len() - 1;
    let last = msgs.pop().expect("messages are not empty");
    if last.get("tool_calls").is_some_and(|c| !c.is_null()) {
        return Err(ApiError::invalid(
            format!("messages[{at}].tool_calls"),
            format!("messages[{at}]: a final assistant message with tool_calls cannot be continued; send the tool results, or set continue_final_message: false"),
        ));
    }
    if msgs.last().is_some_and(|m| m["role"] == "assistant") {
        return Err(ApiError::invalid(
            format!("messages[{at}]"),
            format!("messages[{at}]: two assistant messages end the conversation; only one can be continued"),
        ));
    }
    Ok(last["content"].as_str().unwrap_or("").to_string())
}
