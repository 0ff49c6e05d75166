//! Conversation history with tool turns, readied for chat templates.
//!
//! Templates expect what Hugging Face's `apply_chat_template` users pass: arguments as a
//! mapping (Qwen writes `tool_call.arguments | tojson`; a JSON string there would come out
//! quoted and escaped) and string content (SmolLM2 writes `message['content'] + ...`, which
//! fails on `null`). Templates that cannot show tool turns at all get them as plain turns.

use std::collections::HashMap;

use serde_json::{Map, Value};

use super::format::ToolFormat;

/// Fixes what OpenAI clients send and templates choke on, in place:
/// - an assistant call's `function.arguments` given as JSON text becomes that object (text
///   that is not a JSON object stays as it is);
/// - `content: null` or a missing `content` becomes `""`;
/// - a `tool` message without `name` gets the name of the call its `tool_call_id` answers.
///
/// ```text
/// {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
///   "function": {"name": "f", "arguments": "{\"x\": 1}"}}]}
/// {"role": "tool", "tool_call_id": "call_1", "content": "42"}
///   ─▶
/// {"role": "assistant", "content": "", "tool_calls": [{..., "function": {"name": "f",
///   "arguments": {"x": 1}}}]}
/// {"role": "tool", "tool_call_id": "call_1", "content": "42", "name": "f"}
/// ```
pub fn normalize_messages(messages: &mut [Value]) {
    let mut names: HashMap<String, String> = HashMap::new();
    for m in messages.iter_mut() {
        let Some(obj) = m.as_object_mut() else {
            continue;
        };
        if matches!(obj.get("content"), None | Some(Value::Null)) {
            obj.insert("content".into(), Value::String(String::new()));
        }
        if let Some(Value::Array(calls)) = obj.get_mut("tool_calls") {
            for call in calls.iter_mut().filter_map(Value::as_object_mut) {
                let id = call.get("id").and_then(Value::as_str).map(str::to_string);
                let Some(function) = call.get_mut("function").and_then(Value::as_object_mut) else {
                    continue;
                };
                if let Some(Value::String(text)) = function.get("arguments") {
                    if let Ok(args @ Value::Object(_)) = serde_json::from_str::<Value>(text) {
                        function.insert("arguments".into(), args);
                    }
                }
                let name = function.get("name").and_then(Value::as_str);
                if let (Some(id), Some(name)) = (id, name) {
                    names.insert(id, name.to_string());
                }
            }
        }
        let is_tool = obj.get("role").and_then(Value::as_str) == Some("tool");
        let unnamed = matches!(obj.get("name"), None | Some(Value::Null));
        if is_tool && unnamed {
            let id = obj.get("tool_call_id").and_then(Value::as_str);
            if let Some(name) = id.and_then(|id| names.get(id)) {
                obj.insert("name".into(), Value::String(name.clone()));
            }
        }
    }
}

/// Rewrites tool turns as turns any template renders, for templates that cannot show them
/// (SmolLM2's prints only `role` and `content`, so calls would vanish):
/// - an assistant message's `tool_calls` become its text, written in `format` after any
///   content, as the model is asked to write them ([`ToolFormat::write_calls`]);
/// - `tool` (and legacy `function`) results become one `user` message per run of results,
///   each result as `Tool result (name):` and its content, so that roles still alternate.
///
/// Expects [`normalize_messages`] to have run (arguments as objects, names filled in).
pub fn flatten_tool_turns(messages: &mut Vec<Value>, format: ToolFormat) {
    let mut out: Vec<Value> = Vec::with_capacity(messages.len());
    let mut in_results = false;
    for m in messages.drain(..) {
        let role = m.get("role").and_then(Value::as_str).unwrap_or_default();
        let content = match m.get("content") {
            Some(Value::String(s)) => s.clone(),
            None | Some(Value::Null) => String::new(),
            Some(other) => other.to_string(),
        };
        match role {
            "tool" | "function" => {
                let block = match m.get("name").and_then(Value::as_str) {
                    Some(name) => format!("Tool result ({name}):\n{content}"),
                    None => format!("Tool result:\n{content}"),
                };
                match out.last_mut() {
                    Some(Value::Object(last)) if in_results => {
                        let prev = last.get("content").and_then(Value::as_str).unwrap_or("");
                        let joined = format!("{prev}\n\n{block}");
                        last.insert("content".into(), Value::String(joined));
                    }
                    _ => out.push(user_message(block)),
                }
                in_results = true;
            }
            "assistant" if has_calls(&m) => {
                let calls = call_list(&m);
                let refs: Vec<(&str, &Value)> = calls.iter().map(|(n, a)| (*n, a)).collect();
                let written = format.write_calls(&refs);
                let text = if content.is_empty() {
                    written
                } else {
                    format!("{content}\n{written}")
                };
                let mut obj = Map::new();
                obj.insert("role".into(), Value::String("assistant".into()));
                obj.insert("content".into(), Value::String(text));
                out.push(Value::Object(obj));
                in_results = false;
            }
            _ => {
                out.push(m);
                in_results = false;
            }
        }
    }
    *messages = out;
}

fn user_message(content: String) -> Value {
    let mut obj = Map::new();
    obj.insert("role".into(), Value::String("user".into()));
    obj.insert("content".into(), Value::String(content));
    Value::Object(obj)
}

fn has_calls(m: &Value) -> bool {
    m.get("tool_calls")
        .and_then(Value::as_array)
        .is_some_and(|c| !c.is_empty())
}

/// `(name, arguments)` of each call of an assistant message; arguments that are still text
/// are passed on as a JSON string.
fn call_list(m: &Value) -> Vec<(&str, Value)> {
    let calls = m.get("tool_calls").and_then(Value::as_array);
    calls
        .into_iter()
        .flatten()
        .filter_map(|c| {
            let f = c.get("function")?;
            let name = f.get("name")?.as_str()?;
            let args = f.get("arguments").cloned().unwrap_or(Value::Null);
            Some((name, args))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use text::RenderOptions;

    use super::*;
    use crate::tools::testing::{qwen, smollm2};
    use crate::tools::{parse_whole, TemplateSupport};

    /// user → assistant calling `get_weather` twice (content null, arguments as text) →
    /// two tool results → assistant.
    fn conversation() -> Vec<Value> {
        vec![
            json!({"role": "system", "content": "Be brief."}),
            json!({"role": "user", "content": "Weather in Paris and Oslo?"}),
            json!({"role": "assistant", "content": null, "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}},
                {"id": "call_2", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Oslo\"}"}},
            ]}),
            json!({"role": "tool", "tool_call_id": "call_1", "content": "21 C"}),
            json!({"role": "tool", "tool_call_id": "call_2", "content": "3 C"}),
        ]
    }

    fn render(t: &text::ChatTemplate, m: &[Value]) -> Result<String, text::Error> {
        let options = RenderOptions {
            add_generation_prompt: true,
            ..RenderOptions::default()
        };
        t.render_with(m, &options)
    }

    #[test]
    fn normalizes_arguments_content_and_names() {
        let mut m = conversation();
        m.push(json!({"role": "assistant", "tool_calls": [{"id": "x", "type": "function", "function": {"name": "f", "arguments": "not json"}}]}));
        normalize_messages(&mut m);
        assert_eq!(m[2]["content"], "");
        assert_eq!(
            m[2]["tool_calls"][0]["function"]["arguments"],
            json!({"city": "Paris"})
        );
        assert_eq!(m[3]["name"], "get_weather");
        assert_eq!(m[3]["tool_call_id"], "call_1");
        assert_eq!(m[5]["tool_calls"][0]["function"]["arguments"], "not json");
    }

    #[test]
    fn qwen_renders_calls_as_objects() {
        let q = qwen();
        let mut m = conversation();
        normalize_messages(&mut m);
        let p = render(&q.template, &m).unwrap();
        let want = "<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\n21 C\n</tool_response>\n<tool_response>\n3 C\n</tool_response><|im_end|>\n<|im_start|>assistant\n";
        assert!(p.ends_with(want), "{p}");
    }

    #[test]
    fn smollm2_gets_plain_turns() {
        let s = smollm2();
        assert!(
            render(&s.template, &conversation()).is_err(),
            "null content should fail as is"
        );
        assert!(!TemplateSupport::probe(&s.template).tool_turns);
        let mut m = conversation();
        normalize_messages(&mut m);
        flatten_tool_turns(&mut m, ToolFormat::Generic);
        assert_eq!(m.len(), 4);
        let p = render(&s.template, &m).unwrap();
        let call = "<|im_start|>assistant\n{\"tool_calls\": [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}, {\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}]}<|im_end|>\n";
        let results = "<|im_start|>user\nTool result (get_weather):\n21 C\n\nTool result (get_weather):\n3 C<|im_end|>\n<|im_start|>assistant\n";
        assert!(p.contains(call) && p.ends_with(results), "{p}");
        let (_, calls) = parse_whole(
            ToolFormat::Generic,
            &[],
            0,
            m[2]["content"].as_str().unwrap(),
        );
        assert_eq!(calls.len(), 2);
    }
}
