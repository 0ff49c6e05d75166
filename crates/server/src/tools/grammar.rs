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
//!
//! DSML (DeepSeek-V4) calls are markup, not JSON: each callable tool is one invoke rule whose
//! parameters are the tool's properties, text (`string="true"`, up to the parameter's closing
//! tag, or one of a string `enum`) where the schema allows a string, JSON of the property's
//! schema (`string="false"`) where it allows anything else:
//!
//! ```text
//! start: "<｜DSML｜tool_calls>" "\n" body+ "</｜DSML｜tool_calls>"
//! call_0: "<｜DSML｜invoke name=\"get_weather\">\n" call_0_args "</｜DSML｜invoke>\n"
//! call_0_args: call_0_p0 (call_0_p1)*
//! call_0_p0: "<｜DSML｜parameter name=\"city\" string=\"true\">" param_text "\n"
//! param_text[lazy]: TEXT "</｜DSML｜parameter>"
//! ```

use std::fmt::Write;

use serde_json::{json, Map, Value};
use text::{TokenKind, Tokenizer};

use super::format::{ToolFormat, HERMES_CLOSE, HERMES_OPEN, MISTRAL_OPEN};
use super::{dsml, qwen_xml};
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
/// - `auto`: Hermes, Mistral and DSML: free text until the marker, then calls (one without
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
        ToolFormat::Dsml => {
            let invokes = if many { "body+" } else { "body" };
            let close = lit(dsml::CLOSE);
            if forced {
                let _ = writeln!(g, "start: {} \"\\n\" {invokes} {close}", lit(dsml::OPEN));
            } else {
                let head = lazy_head(tok, dsml::OPEN);
                let _ = writeln!(g, "start: TEXT | head \"\\n\" {invokes} {close}\n{head}");
            }
            let _ = writeln!(
                g,
                "TEXT: /(?s:.*)/\nparam_text[lazy]: TEXT {}\nDSML_NAME: /[^\"<>\\n]+/",
                lit(dsml::PARAM_CLOSE)
            );
        }
        ToolFormat::QwenXml => {
            let (open, close) = (lit(qwen_xml::OPEN), lit(qwen_xml::CLOSE));
            if forced {
                let repeat = if many { " (\"\\n\" block)*" } else { "" };
                let _ = writeln!(g, "start: block{repeat}");
                let _ = writeln!(g, "block: {open} \"\\n\" body \"\\n\" {close}");
            } else {
                let rest = if many { " block* TEXT" } else { "" };
                let head = lazy_head(tok, qwen_xml::OPEN);
                let _ = writeln!(g, "start: TEXT | head \"\\n\" body \"\\n\" {close}{rest}");
                let _ = writeln!(g, "block: head \"\\n\" body \"\\n\" {close}\n{head}");
            }
            let _ = writeln!(
                g,
                "TEXT: /(?s:.*)/\nparam_xml[lazy]: TEXT {}\nXML_NAME: /[^<>\\n]+/",
                lit(qwen_xml::PARAM_CLOSE)
            );
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
        if format == ToolFormat::Dsml {
            g.push_str(&dsml_invoke(name, tool, &lit));
        } else if format == ToolFormat::QwenXml {
            g.push_str(&xml_call(name, tool, &lit));
        } else {
            let schema = call_schema(format, tool);
            let _ = writeln!(g, "{name}: %json {schema}");
        }
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
        (format == ToolFormat::Dsml).then_some(dsml::TOKEN),
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

/// The rules of one DSML invoke of `tool`, named `rule` (see the module documentation):
/// the required parameters first, in the order of the schema's properties, then optional
/// ones in any order; an invoke without parameters has its empty line, as the template writes
/// it. A schema that declares no properties takes any parameters.
fn dsml_invoke(rule: &str, tool: &Tool, lit: &dyn Fn(&str) -> String) -> String {
    let params = &tool.parameters;
    let mut g = String::new();
    let mut required = Vec::new();
    let mut optional = Vec::new();
    match params.get("properties").and_then(Value::as_object) {
        None => {
            let (text, json) = (lit(dsml::AS_TEXT), lit(dsml::AS_JSON));
            let _ = writeln!(
                g,
                "{rule}_any: {} DSML_NAME ({text} param_text | {json} {rule}_json {}) \"\\n\"",
                lit(dsml::PARAM),
                lit(dsml::PARAM_CLOSE),
            );
            let _ = writeln!(g, "{rule}_json: %json {}", param_schema(params, &json!({})));
            optional.push(format!("{rule}_any"));
        }
        Some(props) => {
            let needed = required_keys(params);
            for (i, (key, schema)) in props.iter().enumerate() {
                let p = format!("{rule}_p{i}");
                g.push_str(&dsml_param(&p, key, schema, params, lit));
                match needed.contains(&key.as_str()) {
                    true => required.push(p),
                    false => optional.push(p),
                }
            }
        }
    }
    let args = args_rule(&required, &optional, "\"\\n\"");
    let open = lit(&format!("{}{}\">\n", dsml::INVOKE, tool.name));
    let close = lit(&format!("{}\n", dsml::INVOKE_CLOSE));
    let _ = writeln!(g, "{rule}: {open} {rule}_args {close}\n{rule}_args: {args}");
    g
}

/// The keys a tool's parameters' schema `params` requires.
fn required_keys(params: &Value) -> Vec<&str> {
    params
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

/// A call's parameters: the `required` rules in order, then the `optional` ones in any
/// order; `empty` where there are none.
fn args_rule(required: &[String], optional: &[String], empty: &str) -> String {
    let any = format!("({})", optional.join(" | "));
    match (required.is_empty(), optional.is_empty()) {
        (true, true) => empty.to_string(),
        (true, false) => format!("{empty} | {any}+"),
        (false, true) => required.join(" "),
        (false, false) => format!("{} {any}*", required.join(" ")),
    }
}

/// The rules of one Qwen3-Coder call of `tool`, named `rule`: as [`dsml_invoke`]'s, each
/// value text up to its closing tag where the schema allows a string (or one of a string
/// `enum`), else JSON of the property's schema; a call without parameters has none.
fn xml_call(rule: &str, tool: &Tool, lit: &dyn Fn(&str) -> String) -> String {
    let params = &tool.parameters;
    let mut g = String::new();
    let (mut required, mut optional) = (Vec::new(), Vec::new());
    let close = lit(&format!("{}\n", qwen_xml::PARAM_CLOSE));
    match params.get("properties").and_then(Value::as_object) {
        None => {
            let open = lit(qwen_xml::PARAM);
            let _ = writeln!(g, "{rule}_any: {open} XML_NAME \">\\n\" param_xml \"\\n\"");
            optional.push(format!("{rule}_any"));
        }
        Some(props) => {
            let needed = required_keys(params);
            for (i, (key, schema)) in props.iter().enumerate() {
                let p = format!("{rule}_p{i}");
                let open = lit(&format!("{}{key}>\n", qwen_xml::PARAM));
                let value = match (value_kinds(schema, params, 0).0, string_choices(schema)) {
                    (true, Some(choices)) if !choices.is_empty() => {
                        let alts: Vec<String> = choices.iter().map(|c| lit(c)).collect();
                        format!("({}) {close}", alts.join(" | "))
                    }
                    (true, _) => "param_xml \"\\n\"".to_string(),
                    (false, _) => {
                        let _ = writeln!(g, "{p}_json: %json {}", param_schema(params, schema));
                        format!("{p}_json {close}")
                    }
                };
                let _ = writeln!(g, "{p}: {open} {value}");
                match needed.contains(&key.as_str()) {
                    true => required.push(p),
                    false => optional.push(p),
                }
            }
        }
    }
    let open = lit(&format!("{}{}>\n", qwen_xml::FUNCTION, tool.name));
    let end = lit(qwen_xml::FUNCTION_CLOSE);
    match required.is_empty() && optional.is_empty() {
        true => {
            let _ = writeln!(g, "{rule}: {open} {end}");
        }
        false => {
            let args = args_rule(&required, &optional, "");
            let _ = writeln!(g, "{rule}: {open} {rule}_args {end}\n{rule}_args: {args}");
        }
    }
    g
}

/// Whether parameter `key` of a tool whose parameters' schema is `params` is text: the
/// schema allows a string and nothing else.
pub(crate) fn is_text(params: &Value, key: &str) -> bool {
    let schema = params.get("properties").and_then(|p| p.get(key));
    schema.is_some_and(|s| value_kinds(s, params, 0) == (true, false))
}

/// The rule `rule`: parameter `key`, of schema `schema`, of a tool whose parameters' schema
/// is `params`.
fn dsml_param(
    rule: &str,
    key: &str,
    schema: &Value,
    params: &Value,
    lit: &dyn Fn(&str) -> String,
) -> String {
    let (text, other) = value_kinds(schema, params, 0);
    let mut forms = Vec::new();
    let mut g = String::new();
    let close = lit(&format!("{}\n", dsml::PARAM_CLOSE));
    if text {
        let open = lit(&format!("{}{key}{}", dsml::PARAM, dsml::AS_TEXT));
        match string_choices(schema) {
            Some(choices) => {
                let alts: Vec<String> = choices.iter().map(|c| lit(c)).collect();
                forms.push(format!("{open} ({}) {close}", alts.join(" | ")));
            }
            None => forms.push(format!("{open} param_text \"\\n\"")),
        }
    }
    if other {
        let open = lit(&format!("{}{key}{}", dsml::PARAM, dsml::AS_JSON));
        forms.push(format!("{open} {rule}_json {close}"));
        let _ = writeln!(g, "{rule}_json: %json {}", param_schema(params, schema));
    }
    let _ = writeln!(g, "{rule}: {}", forms.join(" | "));
    g
}

/// Whether a value of `schema` may be a string, and whether it may be anything else. A local
/// `$ref` is followed into `root`'s `$defs` (or `definitions`); a schema that does not say
/// may be either.
fn value_kinds(schema: &Value, root: &Value, depth: usize) -> (bool, bool) {
    let either = (true, true);
    if depth > 8 {
        return either;
    }
    if let Some(target) = schema.get("$ref").and_then(Value::as_str) {
        let found = ["#/$defs/", "#/definitions/"].iter().find_map(|prefix| {
            let name = target.strip_prefix(prefix)?;
            root.get(&prefix[2..prefix.len() - 1])?.get(name)
        });
        return found.map_or(either, |s| value_kinds(s, root, depth + 1));
    }
    if let Some(values) = schema
        .get("enum")
        .and_then(Value::as_array)
        .cloned()
        .or_else(|| schema.get("const").map(|c| vec![c.clone()]))
    {
        return (
            values.iter().any(Value::is_string),
            values.iter().any(|v| !v.is_string()),
        );
    }
    match schema.get("type") {
        Some(Value::String(t)) => (t == "string", t != "string"),
        Some(Value::Array(ts)) => (
            ts.iter().any(|t| t == "string"),
            ts.iter().any(|t| t != "string"),
        ),
        _ => {
            let alts = ["anyOf", "oneOf"]
                .iter()
                .filter_map(|k| schema.get(*k).and_then(Value::as_array))
                .flatten()
                .map(|s| value_kinds(s, root, depth + 1));
            alts.reduce(|a, b| (a.0 || b.0, a.1 || b.1))
                .unwrap_or(either)
        }
    }
}

/// The strings a schema's `enum` or `const` allows, when it names them.
fn string_choices(schema: &Value) -> Option<Vec<&str>> {
    let values = match (schema.get("enum"), schema.get("const")) {
        (Some(Value::Array(values)), _) => values.iter().collect::<Vec<_>>(),
        (_, Some(c)) => vec![c],
        _ => return None,
    };
    Some(values.into_iter().filter_map(Value::as_str).collect())
}

/// The JSON schema of one DSML parameter: `schema`, with `params`' `$defs` (and
/// `definitions`) beside it, where its references point.
fn param_schema(params: &Value, schema: &Value) -> Value {
    let mut root = match schema {
        Value::Object(o) => o.clone(),
        _ => Map::new(),
    };
    for key in ["$defs", "definitions"] {
        if let Some(defs) = params.get(key) {
            root.insert(key.into(), defs.clone());
        }
    }
    root.insert(
        "x-guidance".into(),
        json!({"whitespace_pattern": JSON_WS, "lenient": true}),
    );
    Value::Object(root)
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
