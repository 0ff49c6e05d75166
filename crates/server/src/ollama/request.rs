//! Ollama's request bodies, read into the llama-server requests the rest of the server runs:
//! `options` become the sampling fields, `format` a JSON mode or schema, `think` the
//! template's `enable_thinking`, messages the chat messages (`thinking` as
//! `reasoning_content`, tool calls with their arguments as text, `tool_name` answered by the
//! latest call of that name). Errors name Ollama's field (`options.temperature`, `format`).

use std::time::Duration;

use base64::Engine as _;
use serde::Deserialize;
use serde_json::{json, Map, Value};

use crate::error::ApiError;
use crate::validate::RawRequest;

/// The fields `/api/chat` and `/api/generate` share.
#[derive(Debug, Deserialize, Default)]
#[serde(default)]
pub struct Common {
    pub model: Option<String>,
    pub format: Option<Value>,
    pub options: Option<Map<String, Value>>,
    pub stream: Option<bool>,
    pub keep_alive: Option<Value>,
    pub think: Option<Value>,
    pub logprobs: Option<bool>,
    pub top_logprobs: Option<i64>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(default)]
pub struct ChatBody {
    #[serde(flatten)]
    pub common: Common,
    pub messages: Option<Vec<Message>>,
    pub tools: Option<Value>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(default)]
pub struct GenerateBody {
    #[serde(flatten)]
    pub common: Common,
    pub prompt: Option<String>,
    pub suffix: Option<String>,
    pub system: Option<String>,
    pub template: Option<String>,
    /// Tokens of an earlier answer (`context` of its last line), continued.
    pub context: Option<Vec<u32>>,
    pub raw: Option<bool>,
    pub images: Option<Vec<Value>>,
    pub width: Option<Value>,
    pub height: Option<Value>,
    pub steps: Option<Value>,
}

#[derive(Debug, Deserialize)]
pub struct Message {
    pub role: String,
    #[serde(default)]
    pub content: Option<String>,
    #[serde(default)]
    pub thinking: Option<String>,
    #[serde(default)]
    pub images: Option<Vec<Value>>,
    #[serde(default)]
    pub tool_calls: Option<Vec<CallIn>>,
    #[serde(default)]
    pub tool_name: Option<String>,
}

#[derive(Debug, Deserialize)]
pub struct CallIn {
    #[serde(default)]
    pub id: Option<String>,
    pub function: FunctionIn,
}

#[derive(Debug, Deserialize)]
pub struct FunctionIn {
    pub name: String,
    #[serde(default)]
    pub arguments: Option<Value>,
}

/// How an option's value is checked.
#[derive(Clone, Copy)]
enum Kind {
    Float,
    Int,
    Stops,
}

/// Ollama's runtime options and the llama-server field each becomes.
const MAPPED: &[(&str, &str, Kind)] = &[
    ("num_predict", "n_predict", Kind::Int),
    ("temperature", "temperature", Kind::Float),
    ("top_k", "top_k", Kind::Int),
    ("top_p", "top_p", Kind::Float),
    ("min_p", "min_p", Kind::Float),
    ("typical_p", "typical_p", Kind::Float),
    ("repeat_penalty", "repeat_penalty", Kind::Float),
    ("repeat_last_n", "repeat_last_n", Kind::Int),
    ("presence_penalty", "presence_penalty", Kind::Float),
    ("frequency_penalty", "frequency_penalty", Kind::Float),
    ("seed", "seed", Kind::Int),
    ("stop", "stop", Kind::Stops),
    ("mirostat", "mirostat", Kind::Int),
    ("num_keep", "n_keep", Kind::Int),
];

/// Options that only act with a sampler tandem refuses (mirostat) or that Ollama itself no
/// longer reads: accepted at any value, they change nothing.
const INERT: &[(&str, Kind)] = &[("mirostat_tau", Kind::Float), ("mirostat_eta", Kind::Float)];

/// Options fixed when a model loads, and the `tandem serve` flag that sets each instead.
const LOAD_TIME: &[(&str, &str)] = &[
    ("numa", "tandem has no NUMA setting"),
    ("num_batch", "--batch-size"),
    ("num_gpu", "--device gpu and --n-gpu-layers"),
    ("main_gpu", "--device"),
    ("low_vram", "--mem-limit"),
    ("f16_kv", "--cache-type-k and --cache-type-v"),
    (
        "logits_all",
        "tandem computes the logits of sampled rows only",
    ),
    ("vocab_only", "tandem always loads the whole model"),
    ("use_mmap", "--no-mmap"),
    ("use_mlock", "--mlock"),
    ("embedding_only", "--embeddings"),
    ("num_thread", "--threads"),
];

fn checked(name: &str, v: &Value, kind: Kind) -> Result<Value, ApiError> {
    let ok = match kind {
        Kind::Float => v.is_number(),
        Kind::Int => v.is_i64() || v.as_f64().is_some_and(|x| x.fract() == 0.0),
        Kind::Stops => v.as_array().is_some_and(|a| a.iter().all(Value::is_string)),
    };
    let what = match kind {
        Kind::Float => "a number",
        Kind::Int => "an integer",
        Kind::Stops => "a list of strings",
    };
    if !ok {
        return Err(ApiError::invalid(
            format!("options.{name}"),
            format!("options.{name} must be {what}, got {v}"),
        ));
    }
    Ok(match kind {
        Kind::Int => json!(v.as_f64().map_or(0, |x| x as i64)),
        _ => v.clone(),
    })
}

/// The request's `num_ctx`, when it asks for one: the window its prompt and answer must fit.
pub fn num_ctx(options: Option<&Map<String, Value>>) -> Result<Option<usize>, ApiError> {
    match options.and_then(|o| o.get("num_ctx")) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => match v.as_u64() {
            Some(n) if n > 0 => Ok(Some(n as usize)),
            _ => Err(ApiError::invalid(
                "options.num_ctx",
                format!("options.num_ctx must be a positive integer, got {v}"),
            )),
        },
    }
}

/// Puts `options` into `body` under llama-server's names. Names Ollama does not define are
/// ignored (as Ollama ignores them); the ones tandem does not run are refused.
fn options(given: &Map<String, Value>, body: &mut Map<String, Value>) -> Result<(), ApiError> {
    for (name, v) in given {
        if v.is_null() {
            continue;
        }
        if let Some((_, to, kind)) = MAPPED.iter().find(|m| m.0 == name) {
            let v = checked(name, v, *kind)?;
            match (*to, v.as_i64()) {
                // Ollama's -1 (no limit) and -2 (fill the context) both run to the slot's end.
                ("n_predict", Some(n)) if n < 0 => body.insert("n_predict".into(), json!(-1)),
                _ => body.insert((*to).into(), v),
            };
        } else if let Some((_, kind)) = INERT.iter().find(|m| m.0 == name) {
            checked(name, v, *kind)?;
        } else if let Some((_, flag)) = LOAD_TIME.iter().find(|m| m.0 == name) {
            return Err(ApiError::invalid(
                format!("options.{name}"),
                format!(
                    "options.{name} is a load-time setting, fixed when tandem serve starts: {flag}"
                ),
            ));
        } else {
            let refused = match name.as_str() {
                "tfs_z" if v.as_f64() != Some(1.0) => {
                    Some("tail-free sampling is not implemented (only 1.0, which turns it off)")
                }
                "penalize_newline" if v != &Value::Bool(false) => {
                    Some("newlines are penalized as any token is (only false is accepted)")
                }
                _ => None,
            };
            if let Some(why) = refused {
                return Err(ApiError::invalid(
                    format!("options.{name}"),
                    format!("options.{name}: {why}"),
                ));
            }
        }
    }
    Ok(())
}

/// The llama-server body of the fields both routes share: options, format, think.
pub fn common_body(c: &Common) -> Result<Map<String, Value>, ApiError> {
    let mut body = Map::new();
    if let Some(o) = &c.options {
        options(o, &mut body)?;
    }
    match &c.format {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) if s.is_empty() => {}
        Some(Value::String(s)) if s == "json" => {
            body.insert("response_format".into(), json!({"type": "json_object"}));
        }
        Some(Value::Object(schema)) => {
            body.insert("json_schema".into(), Value::Object(schema.clone()));
        }
        Some(other) => {
            return Err(ApiError::invalid(
                "format",
                format!("format must be \"json\" or a JSON schema object, got {other}"),
            ))
        }
    }
    match &c.think {
        None | Some(Value::Null) => {}
        Some(Value::Bool(b)) => {
            body.insert("chat_template_kwargs".into(), json!({"enable_thinking": b}));
        }
        Some(other) => {
            return Err(ApiError::invalid(
                "think",
                format!("think must be true or false, got {other} (levels are gpt-oss's, which tandem does not run)"),
            ))
        }
    }
    if c.logprobs == Some(true) || c.top_logprobs.is_some() {
        return Err(ApiError::invalid(
            "logprobs",
            "logprobs are not given on Ollama's routes here; /v1/chat/completions and /completion give them",
        ));
    }
    Ok(body)
}

/// A message's text and its `images` (base64 strings) as OpenAI content parts, the images
/// after the text as Ollama places them.
pub(crate) fn with_images(at: &str, text: Value, images: Vec<Value>) -> Result<Value, ApiError> {
    let mut parts = vec![json!({"type": "text", "text": text.as_str().unwrap_or("")})];
    for (k, img) in images.into_iter().enumerate() {
        let field = format!("{at}[{k}]");
        let b64 = match img {
            Value::String(b64)
                if base64::engine::general_purpose::STANDARD
                    .decode(b64.trim())
                    .is_ok() =>
            {
                b64
            }
            _ => {
                return Err(ApiError::invalid(
                    &field,
                    format!("{field}: an image is a base64 string"),
                ))
            }
        };
        parts.push(
            json!({"type": "image_url", "image_url": {"url": format!("data:image;base64,{b64}")}}),
        );
    }
    Ok(Value::Array(parts))
}

/// Chat messages in OpenAI's shape, which the template renderer reads.
pub fn chat_messages(messages: Vec<Message>) -> Result<Vec<Value>, ApiError> {
    let mut out = Vec::with_capacity(messages.len());
    // The calls of the latest assistant message not yet answered: (id, name).
    let mut pending: Vec<(String, String)> = Vec::new();
    for (i, m) in messages.into_iter().enumerate() {
        let mut o = Map::new();
        match m.role.as_str() {
            "system" | "user" => {}
            "assistant" => {
                if let Some(t) = m.thinking.filter(|t| !t.is_empty()) {
                    o.insert("reasoning_content".into(), json!(t));
                }
                let calls = m.tool_calls.unwrap_or_default();
                pending.clear();
                let mut shown = Vec::with_capacity(calls.len());
                for (j, c) in calls.into_iter().enumerate() {
                    let id = c.id.unwrap_or_else(|| format!("call_{i}_{j}"));
                    let args = match c.function.arguments {
                        None | Some(Value::Null) => "{}".to_string(),
                        Some(Value::String(s)) => s,
                        Some(v) => v.to_string(),
                    };
                    pending.push((id.clone(), c.function.name.clone()));
                    shown.push(json!({"id": id, "type": "function",
                        "function": {"name": c.function.name, "arguments": args}}));
                }
                if !shown.is_empty() {
                    o.insert("tool_calls".into(), Value::Array(shown));
                }
            }
            "tool" => {
                let at = match &m.tool_name {
                    Some(name) => pending.iter().position(|(_, n)| n == name),
                    None => (!pending.is_empty()).then_some(0),
                };
                if let Some((id, name)) = at.map(|k| pending.remove(k)) {
                    o.insert("tool_call_id".into(), json!(id));
                    o.insert("name".into(), json!(name));
                } else if let Some(name) = &m.tool_name {
                    o.insert("name".into(), json!(name));
                }
            }
            other => {
                return Err(ApiError::invalid(
                    format!("messages[{i}].role"),
                    format!(
                        "messages[{i}].role must be system, user, assistant or tool, got '{other}'"
                    ),
                ))
            }
        }
        let text = json!(m.content.unwrap_or_default());
        let content = match m.images.filter(|v| !v.is_empty()) {
            Some(images) => with_images(&format!("messages[{i}].images"), text, images)?,
            None => text,
        };
        o.insert("role".into(), json!(m.role));
        o.insert("content".into(), content);
        out.push(Value::Object(o));
    }
    Ok(out)
}

impl GenerateBody {
    /// Refuses what `/api/generate` asks that tandem does not do: Go templates, images
    /// outside a templated prompt, and image generation.
    pub fn refuse_unsupported(&self) -> Result<(), ApiError> {
        if self.template.as_deref().is_some_and(|t| !t.is_empty()) {
            return Err(ApiError::invalid(
                "template",
                "template: Ollama's Go templates are not run here; the model's chat template is used, or none with raw: true",
            ));
        }
        let templated = self.raw != Some(true)
            && self.context.as_ref().is_none_or(|c| c.is_empty())
            && self.suffix.as_ref().is_none_or(|s| s.is_empty());
        if !templated && self.images.as_ref().is_some_and(|v| !v.is_empty()) {
            return Err(ApiError::invalid(
                "images",
                "images: read only with a templated prompt (not raw, no context, no suffix)",
            ));
        }
        for (name, v) in [
            ("width", &self.width),
            ("height", &self.height),
            ("steps", &self.steps),
        ] {
            if v.as_ref().is_some_and(|v| !v.is_null()) {
                return Err(ApiError::invalid(
                    name,
                    format!("{name}: tandem does not generate images"),
                ));
            }
        }
        Ok(())
    }
}

/// `body` as the request the rest of the server validates.
pub fn raw_request(body: Map<String, Value>) -> Result<RawRequest, ApiError> {
    serde_json::from_value(Value::Object(body))
        .map_err(|e| ApiError::bad_request(format!("invalid request: {e}")))
}

/// An error of the llama-server request, named as Ollama's request names its field.
pub fn renamed(mut e: ApiError) -> ApiError {
    let ollama = |p: &str| -> Option<String> {
        let (head, tail) = p.find('[').map_or((p, ""), |i| p.split_at(i));
        let name = match head {
            "response_format" | "json_schema" => "format".to_string(),
            "chat_template_kwargs" => "think".to_string(),
            "input_prefix" => "prompt".to_string(),
            "input_suffix" => "suffix".to_string(),
            h => MAPPED
                .iter()
                .find(|m| m.1 == h)
                .map(|m| format!("options.{}", m.0))?,
        };
        Some(format!("{name}{tail}"))
    };
    if let Some(p) = e.param.clone() {
        if let Some(new) = ollama(&p) {
            if e.message.starts_with(&p) {
                e.message = format!("{new}{}", &e.message[p.len()..]);
            }
            e.param = Some(new);
        }
    }
    e
}

/// Ollama's `keep_alive`: how long the model stays loaded after a request (`None`: for
/// ever). Seconds as a number, or a Go duration (`"5m"`, `"1h30m"`, `"-1"`); negative is
/// for ever, 0 unloads at once.
pub fn keep_alive(v: &Value) -> Result<Option<Duration>, ApiError> {
    let bad = || {
        ApiError::invalid(
            "keep_alive",
            format!("keep_alive must be seconds or a duration such as \"5m\" or \"1h30m\" (negative: for ever), got {v}"),
        )
    };
    let secs = match v {
        Value::Number(n) => n.as_f64().ok_or_else(bad)?,
        Value::String(s) if s.trim().is_empty() => return Err(bad()),
        Value::String(s) => go_duration(s.trim()).ok_or_else(bad)?,
        _ => return Err(bad()),
    };
    if !secs.is_finite() {
        return Err(bad());
    }
    Ok((secs >= 0.0).then(|| Duration::from_secs_f64(secs.min(1e10))))
}

/// A Go duration (`"1h30m"`, `"300ms"`, `"-1m"`) or a bare number of seconds, in seconds.
fn go_duration(s: &str) -> Option<f64> {
    if let Ok(x) = s.parse::<f64>() {
        return Some(x);
    }
    let (sign, mut rest) = match s.strip_prefix('-') {
        Some(r) => (-1.0, r),
        None => (1.0, s.strip_prefix('+').unwrap_or(s)),
    };
    let mut total = 0.0;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let x: f64 = rest[..digits].parse().ok()?;
        rest = &rest[digits..];
        let unit = rest
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(rest.len());
        let scale = match &rest[..unit] {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return None,
        };
        total += x * scale;
        rest = &rest[unit..];
    }
    Some(sign * total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keep_alive_reads_seconds_and_go_durations() {
        let d = |v: Value| keep_alive(&v).unwrap();
        assert_eq!(d(json!(0)), Some(Duration::ZERO));
        assert_eq!(d(json!(-1)), None);
        assert_eq!(d(json!("-1")), None);
        assert_eq!(d(json!("5m")), Some(Duration::from_secs(300)));
        assert_eq!(d(json!("1h30m")), Some(Duration::from_secs(5400)));
        assert_eq!(d(json!("1.5s")), Some(Duration::from_millis(1500)));
        assert_eq!(d(json!("-2m")), None);
        assert_eq!(d(json!(12.5)), Some(Duration::from_millis(12500)));
        for bad in [
            json!("5 minutes"),
            json!("m"),
            json!(true),
            json!("1x"),
            json!(""),
        ] {
            assert_eq!(
                keep_alive(&bad).unwrap_err().param.as_deref(),
                Some("keep_alive")
            );
        }
    }

    #[test]
    fn options_take_llama_names_and_refuse_load_time_ones() {
        let c = Common {
            options: Some(
                json!({"temperature": 0, "num_predict": -2, "stop": ["\n"], "top_k": 5,
                       "mirostat_eta": 0.1, "no_such_option": 1})
                .as_object()
                .unwrap()
                .clone(),
            ),
            format: Some(json!("json")),
            think: Some(json!(false)),
            ..Common::default()
        };
        let body = common_body(&c).unwrap();
        assert_eq!(
            Value::Object(body),
            json!({"temperature": 0, "n_predict": -1, "stop": ["\n"], "top_k": 5,
                   "response_format": {"type": "json_object"},
                   "chat_template_kwargs": {"enable_thinking": false}})
        );
        let refused = |o: Value| {
            let c = Common {
                options: Some(o.as_object().unwrap().clone()),
                ..Common::default()
            };
            common_body(&c).unwrap_err().param.unwrap()
        };
        assert_eq!(refused(json!({"num_gpu": 99})), "options.num_gpu");
        assert_eq!(refused(json!({"num_keep": 4.5})), "options.num_keep");
        assert_eq!(
            refused(json!({"temperature": "hot"})),
            "options.temperature"
        );
        assert_eq!(refused(json!({"stop": "x"})), "options.stop");
        assert_eq!(refused(json!({"tfs_z": 0.9})), "options.tfs_z");
    }

    #[test]
    fn errors_are_renamed_to_ollamas_fields() {
        let e = renamed(ApiError::invalid(
            "temperature",
            "temperature must be between 0 and 2, got 9",
        ));
        assert_eq!(e.param.as_deref(), Some("options.temperature"));
        assert_eq!(
            e.message,
            "options.temperature must be between 0 and 2, got 9"
        );
        let e = renamed(ApiError::invalid("json_schema", "json_schema: bad"));
        assert_eq!(e.param.as_deref(), Some("format"));
        let e = renamed(ApiError::invalid("messages[2].content", "x"));
        assert_eq!(e.param.as_deref(), Some("messages[2].content"));
    }

    #[test]
    fn tool_results_answer_the_latest_call_of_their_name() {
        let messages: Vec<Message> = serde_json::from_value(json!([
            {"role": "user", "content": "weather?"},
            {"role": "assistant", "content": "", "thinking": "hmm",
             "tool_calls": [{"function": {"name": "a", "arguments": {"x": 1}}},
                            {"function": {"name": "b", "arguments": {}}}]},
            {"role": "tool", "tool_name": "b", "content": "B"},
            {"role": "tool", "tool_name": "a", "content": "A"},
        ]))
        .unwrap();
        let out = chat_messages(messages).unwrap();
        assert_eq!(out[1]["reasoning_content"], "hmm");
        assert_eq!(
            out[1]["tool_calls"][0]["function"]["arguments"],
            "{\"x\":1}"
        );
        assert_eq!(out[2]["tool_call_id"], "call_1_1");
        assert_eq!(out[3]["tool_call_id"], "call_1_0");
        let pictured: Vec<Message> =
            serde_json::from_value(json!([{"role": "user", "content": "x", "images": ["aGk="]}]))
                .unwrap();
        let content = &chat_messages(pictured).unwrap()[0]["content"];
        assert_eq!(content[0]["text"], "x");
        assert_eq!(content[1]["image_url"]["url"], "data:image;base64,aGk=");
        let bad: Vec<Message> =
            serde_json::from_value(json!([{"role": "user", "content": "x", "images": [7]}]))
                .unwrap();
        assert_eq!(
            chat_messages(bad).unwrap_err().param.as_deref(),
            Some("messages[0].images[0]")
        );
    }
}
