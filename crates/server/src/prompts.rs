//! Completion prompts as llama-server reads them (texts, token ids, both mixed, several),
//! and the check every prompt passes before it is queued.

use serde::Deserialize;

use crate::error::ApiError;
use crate::state::Ready;
use crate::validate::Route;
use crate::vision::{Picture, Vision};

/// A prompt as sent, as llama-server reads it: a text, token ids, a list of texts and ids
/// (one prompt when it holds both, else a prompt per text), or a list of prompts.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum Prompt {
    Text(String),
    Tokens(Vec<u32>),
    Object(JsonPrompt),
    List(Vec<Piece>),
    Many(Vec<OnePrompt>),
}

/// A piece of a mixed prompt.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum Piece {
    Token(u32),
    Text(String),
}

/// One prompt of a list.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum OnePrompt {
    Text(String),
    Tokens(Vec<u32>),
    Object(JsonPrompt),
    Mixed(Vec<Piece>),
}

/// llama-server's prompt objects: `{"prompt_string": TEXT, "multimodal_data": [...]}`, or
/// `{"content": [{"type": "text", "text": TEXT}, ...]}` (the parts' texts joined).
/// Read from a JSON object only (a derived struct would also take an array's items by
/// position, and a list of texts would become one).
#[derive(Debug, Deserialize)]
#[serde(try_from = "serde_json::Map<String, serde_json::Value>")]
pub struct JsonPrompt {
    prompt_string: Option<String>,
    multimodal_data: Option<serde_json::Value>,
    content: Option<serde_json::Value>,
}

impl TryFrom<serde_json::Map<String, serde_json::Value>> for JsonPrompt {
    type Error = String;

    fn try_from(mut m: serde_json::Map<String, serde_json::Value>) -> Result<Self, String> {
        let prompt_string = match m.remove("prompt_string") {
            None => None,
            Some(serde_json::Value::String(t)) => Some(t),
            Some(_) => return Err("prompt_string must be a text".into()),
        };
        let p = JsonPrompt {
            prompt_string,
            multimodal_data: m.remove("multimodal_data"),
            content: m.remove("content"),
        };
        match m.keys().next() {
            Some(k) => Err(format!("unknown field '{k}' in a prompt object")),
            None => Ok(p),
        }
    }
}

impl JsonPrompt {
    pub fn has_media(&self) -> bool {
        self.multimodal_data.is_some()
    }

    /// Its `prompt_string` and `multimodal_data` (base64 images, one for each
    /// [`crate::vision::MARKER`] in the text) decoded, read with `vision`'s limits.
    pub fn with_media(
        self,
        field: &str,
        vision: Option<&Vision>,
    ) -> Result<(String, Vec<Picture>), ApiError> {
        let at = format!("{field}.multimodal_data");
        let bad = |f: &str, m: &str| ApiError::invalid(f, format!("{f}: {m}"));
        let v = vision.ok_or_else(|| bad(&at, "this server has no vision tower loaded (start it with --mmproj), so it reads no images"))?;
        let text = self
            .prompt_string
            .ok_or_else(|| bad(field, "multimodal_data comes with a prompt_string"))?;
        let Some(serde_json::Value::Array(items)) = self.multimodal_data else {
            return Err(bad(&at, "must be a list of base64 images"));
        };
        let pictures = items
            .iter()
            .enumerate()
            .map(|(k, item)| {
                let f = format!("{at}[{k}]");
                let b64 = item
                    .as_str()
                    .ok_or_else(|| bad(&f, "an image is a base64 string"))?;
                crate::vision::image_url(
                    &serde_json::json!(format!("data:image;base64,{b64}")),
                    &f,
                    v,
                )
            })
            .collect::<Result<_, _>>()?;
        Ok((text, pictures))
    }

    /// Its text. Media (`multimodal_data`, parts other than text) are refused with a 400
    /// naming `field` ([`JsonPrompt::with_media`] reads them).
    pub fn text(self, field: &str) -> Result<String, ApiError> {
        let bad = |m: &str| ApiError::invalid(field, format!("{field}: {m}"));
        if self.multimodal_data.is_some() {
            return Err(bad(
                "multimodal_data: images are read only in a request's one prompt, from a server with --mmproj",
            ));
        }
        match (self.prompt_string, self.content) {
            (Some(t), None) => Ok(t),
            (None, Some(serde_json::Value::Array(parts))) => parts
                .iter()
                .map(
                    |p| match (p.get("type").and_then(|t| t.as_str()), p.get("text")) {
                        (Some("text"), Some(serde_json::Value::String(t))) => Ok(t.as_str()),
                        (Some("text"), _) => Err(bad("a text part needs a string `text`")),
                        (Some(t), _) => Err(bad(&format!(
                        "content parts of type '{t}' are not supported: this server reads text only"
                    ))),
                        (None, _) => Err(bad("each content part needs a `type`")),
                    },
                )
                .collect(),
            (None, Some(_)) => Err(bad("`content` must be a list of parts")),
            _ => Err(bad(
                "a prompt object has either `prompt_string` or `content`",
            )),
        }
    }
}

impl Prompt {
    /// Each prompt: its text, its tokens, or texts and tokens mixed.
    pub fn each(self) -> Vec<OnePrompt> {
        match self {
            Prompt::Text(t) => vec![OnePrompt::Text(t)],
            Prompt::Tokens(ids) => vec![OnePrompt::Tokens(ids)],
            Prompt::Object(o) => vec![OnePrompt::Object(o)],
            Prompt::List(pieces) if pieces.iter().all(|p| matches!(p, Piece::Text(_))) => pieces
                .into_iter()
                .filter_map(|p| match p {
                    Piece::Text(t) => Some(OnePrompt::Text(t)),
                    Piece::Token(_) => None,
                })
                .collect(),
            Prompt::List(pieces) => vec![OnePrompt::Mixed(pieces)],
            Prompt::Many(v) => v,
        }
    }
}

/// A prompt's text and tokens, checked: not empty, in the vocabulary, and leaving a slot
/// room for one token (as llama-server, an answer that reaches the slot's end stops there
/// with `length`). `at` is its place in a list of prompts.
pub fn checked_prompt(
    ready: &Ready,
    route: Route,
    p: OnePrompt,
    at: Option<usize>,
) -> Result<(String, Vec<u32>), ApiError> {
    let field = match (route, at) {
        (Route::Chat, _) => "messages".to_string(),
        (_, None) => "prompt".to_string(),
        (_, Some(i)) => format!("prompt[{i}]"),
    };
    let (text, ids) = match p {
        OnePrompt::Text(t) => {
            let ids = encode(ready, &t)?;
            (t, ids)
        }
        OnePrompt::Tokens(ids) => (ready.tok.decode(&ids), ids),
        OnePrompt::Object(o) => {
            let t = o.text(&field)?;
            let ids = encode(ready, &t)?;
            (t, ids)
        }
        OnePrompt::Mixed(pieces) => {
            // As llama.cpp: special tokens are added only when the first piece is a text.
            let mut ids = Vec::new();
            for (i, p) in pieces.into_iter().enumerate() {
                match p {
                    Piece::Token(t) => ids.push(t),
                    Piece::Text(t) => {
                        ids.extend(ready.tok.encode(&t, i == 0, true).map_err(|e| {
                            ApiError::invalid(&field, format!("cannot tokenize {field}: {e}"))
                        })?)
                    }
                }
            }
            (ready.tok.decode(&ids), ids)
        }
    };
    if ids.is_empty() {
        return Err(ApiError::invalid(
            &field,
            format!("{field}: the prompt is empty"),
        ));
    }
    let n_vocab = ready.tok.n_vocab();
    if let Some(&bad) = ids.iter().find(|&&t| t as usize >= n_vocab) {
        return Err(ApiError::invalid(
            &field,
            format!("{field}: token id {bad} is outside the vocabulary of {n_vocab}"),
        ));
    }
    let slot_ctx = ready.engine.config().slot_ctx();
    if ids.len() >= slot_ctx {
        return Err(ApiError::exceeds_context(&field, ids.len(), slot_ctx));
    }
    Ok((text, ids))
}

fn encode(ready: &Ready, text: &str) -> Result<Vec<u32>, ApiError> {
    ready
        .tok
        .encode(text, true, true)
        .map_err(|e| ApiError::invalid("prompt", format!("cannot tokenize the prompt: {e}")))
}
