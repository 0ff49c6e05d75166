//! DeepSeek-V4's DSML tool calls: one block of invokes, each parameter written as text
//! (`string="true"`) or as JSON (`string="false"`), as its chat template writes them:
//!
//! ```text
//! <｜DSML｜tool_calls>
//! <｜DSML｜invoke name="get_weather">
//! <｜DSML｜parameter name="city" string="true">Paris</｜DSML｜parameter>
//! <｜DSML｜parameter name="days" string="false">[1, 2]</｜DSML｜parameter>
//! </｜DSML｜invoke>
//! <｜DSML｜invoke name="now">
//!
//! </｜DSML｜invoke>
//! </｜DSML｜tool_calls>
//! ```
//!
//! The `｜` are full-width bars (U+FF5C). The template puts `"\n\n"` between the content and
//! the block, and writes an empty line for an invoke without parameters.

use std::fmt::Write;

use serde_json::{Map, Value};

use super::format::py_json;

/// Opens the block of calls.
pub(crate) const OPEN: &str = "<｜DSML｜tool_calls>";
pub(crate) const CLOSE: &str = "</｜DSML｜tool_calls>";
/// Opens one call; its name and `">` follow.
pub(crate) const INVOKE: &str = "<｜DSML｜invoke name=\"";
pub(crate) const INVOKE_CLOSE: &str = "</｜DSML｜invoke>";
/// Opens one parameter; its name, `" string="true|false">`, its value and
/// [`PARAM_CLOSE`] follow.
pub(crate) const PARAM: &str = "<｜DSML｜parameter name=\"";
pub(crate) const PARAM_CLOSE: &str = "</｜DSML｜parameter>";
/// The part of every tag that may be one token of the vocabulary.
pub(crate) const TOKEN: &str = "｜DSML｜";

/// What follows a parameter's name, closing quote included.
pub(crate) const AS_TEXT: &str = "\" string=\"true\">";
pub(crate) const AS_JSON: &str = "\" string=\"false\">";

/// `calls` (name, arguments) as one block, byte for byte as the template renders an
/// assistant's `tool_calls`. Arguments that are not an object (nor null) have no parameters
/// to write: their JSON stands alone in the invoke, which reads back as text, not a call.
pub(crate) fn write(calls: &[(&str, &Value)]) -> String {
    let mut s = format!("{OPEN}\n");
    for (name, args) in calls {
        let _ = writeln!(s, "{INVOKE}{name}\">");
        match args {
            Value::Object(params) if !params.is_empty() => {
                for (key, value) in params {
                    let _ = match value {
                        Value::String(text) => {
                            writeln!(s, "{PARAM}{key}{AS_TEXT}{text}{PARAM_CLOSE}")
                        }
                        other => {
                            writeln!(s, "{PARAM}{key}{AS_JSON}{}{PARAM_CLOSE}", py_json(other))
                        }
                    };
                }
            }
            Value::Object(_) | Value::Null => s.push('\n'),
            other => {
                let _ = writeln!(s, "{}", py_json(other));
            }
        }
        let _ = writeln!(s, "{INVOKE_CLOSE}");
    }
    s.push_str(CLOSE);
    s
}

/// What the text after a block's opening, or after its last call, starts with.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Next {
    /// More text may make it a call or the block's end.
    Wait,
    /// One call, `len` bytes with the whitespace before it; `arguments` is a JSON object.
    Call {
        name: String,
        arguments: String,
        len: usize,
    },
    /// The block's closing tag, `len` bytes with the whitespace before it.
    Close(usize),
    /// Neither: a call that does not parse (a tag out of place, a `string="false"` value
    /// that is not JSON, an empty name), or other text.
    Broken,
}

/// Why a scan stopped short.
pub(crate) enum Stop {
    Wait,
    Broken,
}

pub(crate) type Scan<T> = Result<T, Stop>;

/// The next call or the block's end at the start of `s` (see [`Next`]). Whitespace is
/// allowed between tags; a parameter's value is everything up to its closing tag.
pub(crate) fn next(s: &str) -> Next {
    let at = skip_ws(s, 0);
    let rest = &s[at..];
    if rest.starts_with(CLOSE) {
        return Next::Close(at + CLOSE.len());
    }
    if !rest.starts_with(INVOKE) {
        return match CLOSE.starts_with(rest) || INVOKE.starts_with(rest) {
            true => Next::Wait,
            false => Next::Broken,
        };
    }
    match invoke(s, at + INVOKE.len()) {
        Ok((name, params, len)) => Next::Call {
            name,
            arguments: Value::Object(params).to_string(),
            len,
        },
        Err(Stop::Wait) => Next::Wait,
        Err(Stop::Broken) => Next::Broken,
    }
}

/// One invoke from just after `<｜DSML｜invoke name="`: its name, parameters, and the byte
/// after its closing tag.
fn invoke(s: &str, at: usize) -> Scan<(String, Map<String, Value>, usize)> {
    let (name, quote) = attribute(s, at)?;
    let mut at = tag(s, quote, "\">")?;
    let mut params = Map::new();
    loop {
        let at_param = match part(s, at, INVOKE_CLOSE, PARAM)? {
            Part::Close(end) => return Ok((name.to_string(), params, end)),
            Part::Param(after) => after,
        };
        let (key, quote) = attribute(s, at_param)?;
        let (as_text, from) = match (tag(s, quote, AS_TEXT), tag(s, quote, AS_JSON)) {
            (Ok(from), _) => (true, from),
            (_, Ok(from)) => (false, from),
            (Err(Stop::Wait), _) | (_, Err(Stop::Wait)) => return Err(Stop::Wait),
            _ => return Err(Stop::Broken),
        };
        let end = from + s[from..].find(PARAM_CLOSE).ok_or(Stop::Wait)?;
        let raw = &s[from..end];
        let value = match as_text {
            true => Value::String(raw.to_string()),
            false => serde_json::from_str(raw.trim()).map_err(|_| Stop::Broken)?,
        };
        params.insert(key.to_string(), value);
        at = end + PARAM_CLOSE.len();
    }
}

/// What a call holds at `at`, after whitespace: its closing tag or a parameter's opening.
pub(crate) enum Part {
    /// The byte after the closing tag.
    Close(usize),
    /// The byte after the parameter's opening.
    Param(usize),
}

/// The call's closing tag `close` or a parameter's opening `param` at `at`, after
/// whitespace.
pub(crate) fn part(s: &str, at: usize, close: &str, param: &str) -> Scan<Part> {
    let at = skip_ws(s, at);
    let rest = &s[at..];
    if rest.starts_with(close) {
        Ok(Part::Close(at + close.len()))
    } else if rest.starts_with(param) {
        Ok(Part::Param(at + param.len()))
    } else if close.starts_with(rest) || param.starts_with(rest) {
        Err(Stop::Wait)
    } else {
        Err(Stop::Broken)
    }
}

/// A quoted attribute's value from `at` (just after its opening quote), and where its
/// closing quote is. It is one line of text without tags, and not empty.
fn attribute(s: &str, at: usize) -> Scan<(&str, usize)> {
    let rest = &s[at..];
    match rest
        .find(['"', '\n', '<', '>'])
        .map(|i| (i, rest.as_bytes()[i]))
    {
        Some((i, b'"')) if i > 0 => Ok((&rest[..i], at + i)),
        None => Err(Stop::Wait),
        Some(_) => Err(Stop::Broken),
    }
}

/// `lit` at `at`: the byte after it.
pub(crate) fn tag(s: &str, at: usize, lit: &str) -> Scan<usize> {
    let rest = &s[at..];
    if rest.starts_with(lit) {
        Ok(at + lit.len())
    } else if lit.starts_with(rest) {
        Err(Stop::Wait)
    } else {
        Err(Stop::Broken)
    }
}

pub(crate) fn skip_ws(s: &str, at: usize) -> usize {
    s.len() - s[at..].trim_start().len()
}

#[cfg(test)]
#[path = "dsml_tests.rs"]
mod tests;
