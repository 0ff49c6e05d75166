//! The grammar side: `tool_choice` as a grammar in llguidance's Lark dialect, so that the
//! calls a model writes are well-formed calls of the offered tools.
//!
//! Each callable tool is one `%json` rule whose schema is the call object in the format's
//! shape, `{"name": <const>, "arguments": <the tool's parameters schema>}` (Llama 3.x:
//! `"parameters"`), properties in that order, nothing else. For Qwen and `required`:
//!
//! ```text
//! start: block ("\n" block)*
//! block: "<tool_call>" "\n" body "\n" "</tool_call>"
//! body: call_0 | call_1
//! call_0: %json {"type": "object", "properties": {"name": {"const": "get_weather"}, ...}}
//! ```
//!
//! `auto` is lazy where the format has a marker: any text until the model writes the marker,
//! the call constrained from there on (llguidance's `head[lazy]: TEXT "<tool_call>"`).

use std::fmt::Write;

use serde_json::{json, Map, Value};
use text::{TokenKind, Tokenizer};

use super::format::{ToolFormat, HERMES_CLOSE, HERMES_OPEN, MISTRAL_OPEN};
use super::{Tool, ToolChoice, ToolSpec};

/// Whitespace a call's JSON may hold at each place JSON allows it: enough for indented JSON,
/// too little for a model to loop on newlines.
const JSON_WS: &str = r"[\x20\x0A\x0D\x09]{1,24}";

/// The grammar the answer must follow for `spec` in `format`, for `tok`'s vocabulary, or
/// `None` when the answer is unconstrained:
///
/// - `none`, or no tools: `None`.
/// - `required`: the answer is calls and nothing else; one call without `parallel`.
/// - a named function: exactly one call, of it.
/// - `auto`: Hermes and Mistral: free text until the marker, then calls (one without
///   `parallel`). Generic: `{"tool_calls": [...]}` or `{"response": "..."}`, its only
///   answers. Llama 3.x: `None`, since its call has no marker: a grammar would have to
///   bind every answer that starts with `{` to be a call.
///
/// Llama 3.x gets one call even with `parallel` (its JSON tool calling has no syntax for
/// more). A marker that is one control token in `tok` (`[TOOL_CALLS]` for Mistral's
/// vocabularies) is required as that token, not as text.
pub fn lark(format: ToolFormat, spec: &ToolSpec, tok: &Tokenizer) -> Option<String> {
    let tools: Vec<&Tool> = spec.callable().collect();
    if !spec.active() || tools.is_empty() {
        return None;
    }
    let forced = spec.choice != ToolChoice::Auto;
    let many = spec.parallel && !matches!(spec.choice, ToolChoice::Named(_));
    let lit = |s: &str| literal(tok, s);
    let mut g = String::new();
    match format {
        ToolFormat::Hermes => {
            let block = format!(
                "{} \"\\n\" body \"\\n\" {}",
                lit(HERMES_OPEN),
                lit(HERMES_CLOSE)
            );
            if forced {
                let repeat = if many { " (\"\\n\" block)*" } else { "" };
                let _ = writeln!(g, "start: block{repeat}\nblock: {block}");
            } else {
                // A call written bare (its JSON first, no tags, or in a fenced JSON block) is
                // a call too, so an answer that starts so must be one; other text runs free
                // until a tag.
                let close = lit(HERMES_CLOSE);
                let first = lazy_head_rule(tok, HERMES_OPEN, "first_head", "FREE");
                let head = lazy_head(tok, HERMES_OPEN);
                let rest = if many { " block* TEXT" } else { "" };
                let _ = writeln!(
                    g,
                    "start: body | FENCE_OPEN body FENCE_CLOSE | FREE \
                     | first_head \"\\n\" body \"\\n\" {close}{rest}"
                );
                let _ = writeln!(g, "block: head \"\\n\" body \"\\n\" {close}");
                let _ = writeln!(g, "{first}\n{head}\nTEXT: /(?s:.*)/");
                g.push_str(
                    "FENCE_OPEN: /```(json)?[ \\t]*\\n[ \\t\\n]*/\nFENCE_CLOSE: /[ \\t\\n]*```/\n\
                     FREE: /(?s:.*)/ & ~/(\\{|```(json)?[ \\t]*\\n[ \\t\\n]*\\{)(?s:.*)/\n",
                );
            }
        }
        ToolFormat::Mistral => {
            let repeat = if many { " (SEP body)*" } else { "" };
            let _ = writeln!(g, "calls: \"[\" WS? body{repeat} WS? \"]\"");
            if forced {
                let _ = writeln!(g, "start: {} calls", lit(MISTRAL_OPEN));
            } else {
                let head = lazy_head(tok, MISTRAL_OPEN);
                let _ = writeln!(g, "start: TEXT | head calls\n{head}\nTEXT: /(?s:.*)/");
            }
        }
        ToolFormat::Llama3 if forced => g.push_str("start: body\n"),
        ToolFormat::Llama3 => return None,
        ToolFormat::Generic => {
            let repeat = if many { " (SEP body)*" } else { "" };
            let _ = writeln!(
                g,
                "calls: \"\\\"tool_calls\\\"\" WS? \":\" WS? \"[\" WS? body{repeat} WS? \"]\""
            );
            if forced {
                g.push_str("start: \"{\" WS? calls WS? \"}\"\n");
            } else {
                g.push_str("start: \"{\" WS? (calls | response) WS? \"}\"\n");
                g.push_str(
                    "response: \"\\\"response\\\"\" WS? \":\" WS? %json {\"type\": \"string\"}\n",
                );
            }
        }
    }
    g.push_str("SEP: /[ \\t\\n]*,[ \\t\\n]*/\nWS: /[ \\t\\n]{1,24}/\n");
    let names: Vec<String> = (0..tools.len()).map(|i| format!("call_{i}")).collect();
    let _ = writeln!(g, "body: {}", names.join(" | "));
    for (name, tool) in names.iter().zip(&tools) {
        let schema = call_schema(format, tool);
        let _ = writeln!(g, "{name}: %json {schema}");
    }
    Some(g)
}

/// `text` as a Lark terminal: the control token it is in `tok` (`<[id]>`), else a string.
fn literal(tok: &Tokenizer, text: &str) -> String {
    match control_token(tok, text) {
        Some(id) => format!("<[{id}]>"),
        None => Value::String(text.to_string()).to_string(),
    }
}

/// The control tokens among `format`'s call markers in `tok`'s vocabulary: the detokenizer
/// must keep their text for [`super::CallParser`] to see the calls.
pub fn marker_tokens(format: ToolFormat, tok: &Tokenizer) -> Vec<u32> {
    [
        format.marker(),
        (format == ToolFormat::Hermes).then_some(HERMES_CLOSE),
    ]
    .into_iter()
    .flatten()
    .filter_map(|m| control_token(tok, m))
    .collect()
}

fn control_token(tok: &Tokenizer, text: &str) -> Option<u32> {
    match tok.encode(text, false, true).ok()?.as_slice() {
        &[id] if tok.token_kind(id) == Some(TokenKind::Control) => Some(id),
        _ => None,
    }
}

/// The rule `head`: any text, then `marker`. As text the marker ends a lazy lexeme (the
/// shortest match, so the call starts at its first occurrence); as a control token, which
/// no text spells, plain text before it is enough.
fn lazy_head(tok: &Tokenizer, marker: &str) -> String {
    lazy_head_rule(tok, marker, "head", "TEXT")
}

/// The rule `name`: text matching the terminal `text`, then `marker` (see [`lazy_head`]).
fn lazy_head_rule(tok: &Tokenizer, marker: &str, name: &str, text: &str) -> String {
    match control_token(tok, marker) {
        Some(id) => format!("{name}: {text} <[{id}]>"),
        None => format!("{name}[lazy]: {text} {}", literal(tok, marker)),
    }
}

/// The schema of one call object of `tool` in `format`. The tool's `$defs` (and
/// `definitions`) move to the root, where its `#/$defs/...` references now point.
fn call_schema(format: ToolFormat, tool: &Tool) -> Value {
    let mut params = tool.parameters.clone();
    let mut root = Map::new();
    root.insert(
        "x-guidance".into(),
        json!({"whitespace_pattern": JSON_WS, "lenient": true}),
    );
    if let Some(p) = params.as_object_mut() {
        for key in ["$defs", "definitions"] {
            if let Some(defs) = p.remove(key) {
                root.insert(key.into(), defs);
            }
        }
    }
    let key = format.args_key();
    let mut properties = Map::new();
    properties.insert("name".into(), json!({"const": tool.name}));
    properties.insert(key.into(), params);
    if format == ToolFormat::Mistral {
        properties.insert(
            "id".into(),
            json!({"type": "string", "pattern": "^[a-zA-Z0-9]{9}$"}),
        );
    }
    root.insert("type".into(), json!("object"));
    root.insert("properties".into(), Value::Object(properties));
    root.insert("required".into(), json!(["name", key]));
    root.insert("additionalProperties".into(), json!(false));
    Value::Object(root)
}

#[cfg(test)]
#[path = "grammar_tests.rs"]
mod tests;
