//! Qwen3-Coder's XML tool calls, which the Qwen 3.5 templates teach: one `<tool_call>`
//! block per call, each parameter's value as text on its own lines, as the template writes
//! them:
//!
//! ```text
//! <tool_call>
//! <function=get_weather>
//! <parameter=city>
//! Paris
//! </parameter>
//! <parameter=days>
//! [1, 2]
//! </parameter>
//! </function>
//! </tool_call>
//! ```
//!
//! The template writes a string as it is, an object or array as JSON and anything else as
//! Jinja's `string` filter does (`True`, `None`). Reading back, a value is a string where
//! the tool's schema wants one, else the JSON it spells (Python's `True`, `False` and
//! `None` too), else the text.

use serde_json::{Map, Value};

use super::dsml::{part, skip_ws, tag, Next, Part, Scan, Stop};
use super::format::py_json;

pub(crate) const OPEN: &str = "<tool_call>";
pub(crate) const CLOSE: &str = "</tool_call>";
/// Opens a call; its name and `>` follow.
pub(crate) const FUNCTION: &str = "<function=";
pub(crate) const FUNCTION_CLOSE: &str = "</function>";
/// Opens a parameter; its name, `>\n`, its value and [`PARAM_CLOSE`] follow.
pub(crate) const PARAM: &str = "<parameter=";
pub(crate) const PARAM_CLOSE: &str = "\n</parameter>";

/// `calls` (name, arguments) byte for byte as the template renders an assistant's
/// `tool_calls` after empty content (after content it puts `"\n\n"` first).
pub(crate) fn write(calls: &[(&str, &Value)]) -> String {
    let blocks = calls.iter().map(|(name, args)| {
        let mut s = format!("{OPEN}\n{FUNCTION}{name}>\n");
        if let Value::Object(params) = args {
            for (key, value) in params {
                let text = match value {
                    Value::String(t) => t.clone(),
                    Value::Object(_) | Value::Array(_) => py_json(value),
                    Value::Bool(true) => "True".into(),
                    Value::Bool(false) => "False".into(),
                    Value::Null => "None".into(),
                    Value::Number(n) => n.to_string(),
                };
                s.push_str(&format!("{PARAM}{key}>\n{text}{PARAM_CLOSE}\n"));
            }
        }
        s.push_str(&format!("{FUNCTION_CLOSE}\n{CLOSE}"));
        s
    });
    blocks.collect::<Vec<_>>().join("\n")
}

/// `is_text(tool, key)`: whether parameter `key` of tool `tool` takes its text as it is.
pub(crate) type IsText<'a> = &'a dyn Fn(&str, &str) -> bool;

/// The call at the start of `s`, the text after `<tool_call>` (see [`Next`]: `Close` is
/// never given, each call closing its own block). `is_text(name, key)` says how to read a
/// value.
pub(crate) fn next(s: &str, is_text: IsText<'_>) -> Next {
    match call(s, is_text) {
        Ok((name, params, len)) => Next::Call {
            name,
            arguments: Value::Object(params).to_string(),
            len,
        },
        Err(Stop::Wait) => Next::Wait,
        Err(Stop::Broken) => Next::Broken,
    }
}

fn call(s: &str, is_text: IsText<'_>) -> Scan<(String, Map<String, Value>, usize)> {
    let at = tag(s, skip_ws(s, 0), FUNCTION)?;
    let (func, mut at) = name(s, at)?;
    let mut params = Map::new();
    loop {
        let at_param = match part(s, at, FUNCTION_CLOSE, PARAM)? {
            Part::Close(after) => {
                let end = tag(s, skip_ws(s, after), CLOSE)?;
                return Ok((func.to_string(), params, end));
            }
            Part::Param(after) => after,
        };
        let (key, from) = name(s, at_param)?;
        let from = match s[from..].starts_with('\n') {
            true => from + 1,
            false if s.len() == from => return Err(Stop::Wait),
            false => from,
        };
        let end = from + s[from..].find(PARAM_CLOSE).ok_or(Stop::Wait)?;
        let raw = &s[from..end];
        params.insert(key.to_string(), value(raw, is_text(func, key)));
        at = end + PARAM_CLOSE.len();
    }
}

/// A parameter's text as the value it stands for.
fn value(raw: &str, is_text: bool) -> Value {
    if is_text {
        return Value::String(raw.to_string());
    }
    let python = match raw.trim() {
        "True" => Some(Value::Bool(true)),
        "False" => Some(Value::Bool(false)),
        "None" => Some(Value::Null),
        _ => None,
    };
    python
        .or_else(|| serde_json::from_str(raw.trim()).ok())
        .unwrap_or_else(|| Value::String(raw.to_string()))
}

/// A name from `at` up to `>`: one line without tags, not empty; and the byte after `>`.
fn name(s: &str, at: usize) -> Scan<(&str, usize)> {
    let rest = &s[at..];
    match rest.find(['>', '\n', '<']).map(|i| (i, rest.as_bytes()[i])) {
        Some((i, b'>')) if i > 0 => Ok((&rest[..i], at + i + 1)),
        None => Err(Stop::Wait),
        Some(_) => Err(Stop::Broken),
    }
}

#[cfg(test)]
#[path = "qwen_xml_tests.rs"]
mod tests;
