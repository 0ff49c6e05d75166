//! The prompt side: what a template shows of tools by itself, and the system text that
//! shows them when it does not.

use serde_json::{json, Value};
use text::{ChatTemplate, RenderOptions};

use super::format::{py_json, ToolFormat};
use super::history::{flatten_tool_turns, normalize_messages};
use super::{ToolChoice, ToolSpec};

/// What a chat template renders of tools, found by rendering probe conversations once per
/// model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TemplateSupport {
    /// `tools` appear in the prompt (Qwen, Llama 3.x, Mistral do; SmolLM2 does not).
    pub tools: bool,
    /// Assistant `tool_calls` and `tool` results both appear in the prompt.
    pub tool_turns: bool,
}

/// A name no template prints unless it was given to it.
const PROBE_NAME: &str = "tandem_probe_fn";
const PROBE_RESULT: &str = "tandem_probe_result";
/// Mistral's templates refuse call ids that are not 9 letters or digits.
const PROBE_ID: &str = "a1b2c3d4e";

impl TemplateSupport {
    /// Renders one conversation with a probe tool and one with a probe call and result; a
    /// render that fails counts as no support.
    pub fn probe(template: &ChatTemplate) -> Self {
        let render = |messages: &[Value], tools: Option<Value>| {
            let options = RenderOptions {
                add_generation_prompt: true,
                tools,
                ..RenderOptions::default()
            };
            template.render_with(messages, &options).unwrap_or_default()
        };
        let tool = json!([{"type": "function", "function": {
            "name": PROBE_NAME,
            "description": "A probe.",
            "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
        }}]);
        let user = json!({"role": "user", "content": "Hi"});
        let tools = render(std::slice::from_ref(&user), Some(tool)).contains(PROBE_NAME);
        let mut turns = vec![
            user,
            json!({"role": "assistant", "content": null, "tool_calls": [{
                "id": PROBE_ID,
                "type": "function",
                "function": {"name": PROBE_NAME, "arguments": "{\"q\": \"x\"}"},
            }]}),
            json!({"role": "tool", "tool_call_id": PROBE_ID, "content": PROBE_RESULT}),
        ];
        normalize_messages(&mut turns);
        let rendered = render(&turns, None);
        TemplateSupport {
            tools,
            tool_turns: rendered.contains(PROBE_NAME) && rendered.contains(PROBE_RESULT),
        }
    }
}

/// Readies a chat request's messages for its template and returns the `tools` to pass to
/// it. History is always normalized ([`normalize_messages`]), and flattened into plain
/// turns when the template cannot render tool turns ([`flatten_tool_turns`]). With active
/// tools, a template that renders them natively in `format` gets them (`Some`); otherwise
/// the system message gets [`fallback_system_prompt`] and the template gets none, since
/// its own instructions would ask for a syntax the parser does not read.
pub fn prepare_messages(
    messages: &mut Vec<Value>,
    support: TemplateSupport,
    format: ToolFormat,
    spec: &ToolSpec,
) -> Option<Value> {
    normalize_messages(messages);
    if !support.tool_turns {
        flatten_tool_turns(messages, format);
    }
    if !spec.active() {
        return None;
    }
    if support.tools && format != ToolFormat::Generic {
        return Some(spec.tools_json());
    }
    add_to_system(messages, &fallback_system_prompt(format, spec));
    None
}

/// System text for a template that does not show tools: the callable tools as JSON schemas
/// (one per line, as Qwen's template lists them), the exact syntax of a call in `format`,
/// and what `tool_choice` asks for.
///
/// ```text
/// # Tools
///
/// You can call functions to help with the user's request. Each line below describes one
/// function as a JSON schema:
/// {"type": "function", "function": {"name": "get_weather", ...}}
///
/// Answer with one JSON object and nothing else: either {"tool_calls": [...]} ... or
/// {"response": <your answer as a string>} to answer the user directly.
/// ```
pub fn fallback_system_prompt(format: ToolFormat, spec: &ToolSpec) -> String {
    let mut s = String::from(
        "# Tools\n\nYou can call functions to help with the user's request. \
         Each line below describes one function as a JSON schema:\n",
    );
    for tool in spec.callable() {
        s.push_str(&py_json(&tool.to_json()));
        s.push('\n');
    }
    s.push('\n');
    s.push_str(match format {
        ToolFormat::Hermes => {
            "To call a function, write a JSON object with its name and arguments between \
             <tool_call></tool_call> tags, one block per call:\n<tool_call>\n\
             {\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call>"
        }
        ToolFormat::Llama3 => {
            "To call a function, answer with only a JSON object of the form \
             {\"name\": <function-name>, \"parameters\": <args-json-object>}, using literal \
             values, never variables. Otherwise answer in plain text."
        }
        ToolFormat::Mistral => {
            "To call functions, answer with [TOOL_CALLS] followed by a JSON array of calls:\n\
             [TOOL_CALLS][{\"name\": <function-name>, \"arguments\": <args-json-object>}]"
        }
        ToolFormat::Generic => {
            "Answer with one JSON object and nothing else: either \
             {\"tool_calls\": [{\"name\": <function-name>, \"arguments\": <args-json-object>}]} \
             to call functions, or {\"response\": <your answer as a string>} to answer the \
             user directly."
        }
        ToolFormat::Dsml => {
            "To call functions, write one block with one invoke per call:\n\
             <｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"<function-name>\">\n\
             <｜DSML｜parameter name=\"<parameter-name>\" string=\"true|false\"><value></｜DSML｜parameter>\n\
             ...\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>\n\
             Write string values as they are, with string=\"true\"; write numbers, booleans, \
             arrays and objects as JSON, with string=\"false\"."
        }
        ToolFormat::QwenXml => {
            "To call a function, write one block per call:\n<tool_call>\n\
             <function=<function-name>>\n<parameter=<parameter-name>>\n<value>\n</parameter>\n\
             ...\n</function>\n</tool_call>\n\
             Write string values as they are; write numbers, booleans, arrays and objects as JSON."
        }
    });
    let rule = match (&spec.choice, spec.parallel) {
        (ToolChoice::Named(name), _) => format!("You must call the function {name}, once."),
        (ToolChoice::Required, true) => "You must call at least one function.".into(),
        (ToolChoice::Required, false) => "You must call exactly one function.".into(),
        (ToolChoice::Auto, false) => "Call at most one function per answer.".into(),
        (ToolChoice::Auto | ToolChoice::None, _) => String::new(),
    };
    if !rule.is_empty() {
        s.push('\n');
        s.push_str(&rule);
    }
    s
}

/// Appends `text` to the leading system (or developer) message, after a blank line, or
/// inserts a system message holding it.
pub fn add_to_system(messages: &mut Vec<Value>, text: &str) {
    let first = messages.first_mut().and_then(Value::as_object_mut);
    let system = first.filter(|m| {
        matches!(
            m.get("role").and_then(Value::as_str),
            Some("system" | "developer")
        )
    });
    let Some(system) = system else {
        messages.insert(0, json!({"role": "system", "content": text}));
        return;
    };
    let joined = match system.get("content") {
        Some(Value::String(c)) if !c.trim().is_empty() => format!("{c}\n\n{text}"),
        _ => text.to_string(),
    };
    system.insert("content".into(), Value::String(joined));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::testing::{qwen, smollm2};
    use crate::tools::Tool;

    fn spec(choice: ToolChoice, parallel: bool) -> ToolSpec {
        ToolSpec {
            tools: vec![Tool {
                name: "get_weather".into(),
                description: Some("Weather of a city".into()),
                parameters: json!({"type": "object", "properties": {"city": {"type": "string"}}}),
            }],
            choice,
            parallel,
        }
    }

    #[test]
    fn fallback_states_the_format_and_choice() {
        let s = fallback_system_prompt(ToolFormat::Generic, &spec(ToolChoice::Required, false));
        assert!(s.contains(r#"{"type": "function", "function": {"name": "get_weather", "description": "Weather of a city", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}"#), "{s}");
        assert!(s.contains("{\"tool_calls\": [") && s.contains("{\"response\":"));
        assert!(s.ends_with("You must call exactly one function."));
        let h = fallback_system_prompt(ToolFormat::Hermes, &spec(ToolChoice::Auto, true));
        assert!(h.ends_with("</tool_call>"), "{h}");
    }

    #[test]
    fn system_text_is_merged() {
        let mut m = vec![
            json!({"role": "system", "content": "Be brief."}),
            json!({"role": "user", "content": "Hi"}),
        ];
        add_to_system(&mut m, "TOOLS");
        assert_eq!(m[0]["content"], "Be brief.\n\nTOOLS");
        let mut m = vec![json!({"role": "user", "content": "Hi"})];
        add_to_system(&mut m, "TOOLS");
        assert_eq!(m[0], json!({"role": "system", "content": "TOOLS"}));
        assert_eq!(m.len(), 2);
    }

    #[test]
    fn probes_real_templates() {
        assert_eq!(
            TemplateSupport::probe(&qwen().template),
            TemplateSupport {
                tools: true,
                tool_turns: true
            }
        );
        assert_eq!(
            TemplateSupport::probe(&smollm2().template),
            TemplateSupport {
                tools: false,
                tool_turns: false
            }
        );
        assert_eq!(ToolFormat::detect(&qwen().source), ToolFormat::Hermes);
        assert_eq!(ToolFormat::detect(&smollm2().source), ToolFormat::Generic);
    }

    #[test]
    fn prepared_prompts_render() {
        let user = json!({"role": "user", "content": "Weather in Paris?"});
        let s = spec(ToolChoice::Auto, true);

        let q = qwen();
        let mut m = vec![user.clone()];
        let tools = prepare_messages(
            &mut m,
            TemplateSupport::probe(&q.template),
            ToolFormat::Hermes,
            &s,
        );
        assert_eq!(tools, Some(s.tools_json()));
        let options = RenderOptions {
            add_generation_prompt: true,
            tools,
            ..RenderOptions::default()
        };
        let p = q.template.render_with(&m, &options).unwrap();
        assert!(
            p.contains(
                "<tools>\n{\"type\": \"function\", \"function\": {\"name\": \"get_weather\""
            ),
            "{p}"
        );

        let sm = smollm2();
        let mut m = vec![user];
        let tools = prepare_messages(
            &mut m,
            TemplateSupport::probe(&sm.template),
            ToolFormat::Generic,
            &s,
        );
        assert_eq!(tools, None);
        let p = sm
            .template
            .render_with(&m, &RenderOptions::default())
            .unwrap();
        assert!(p.starts_with("<|im_start|>system\n# Tools\n"), "{p}");
        assert!(
            p.contains("{\"response\": <your answer as a string>}"),
            "{p}"
        );
    }
}
