//! How a model writes tool calls in its answer, and calls written that way.

use std::fmt;
use std::str::FromStr;

use serde::Serialize;
use serde_json::{json, Value};

use super::{dsml, qwen_xml};

/// The text a model's tool calls take.
///
/// ```text
/// Hermes   <tool_call>\n{"name": "f", "arguments": {"x": 1}}\n</tool_call>   (one block per call)
/// Llama3   {"name": "f", "parameters": {"x": 1}}                             (the whole answer)
///          <|python_tag|>{"name": "f", "parameters": {"x": 1}}                (`;` or lines between calls)
/// Mistral  [TOOL_CALLS][{"name": "f", "arguments": {"x": 1}}]
///          [TOOL_CALLS]f[ARGS]{"x": 1}                                        (newer templates)
/// Generic  {"tool_calls": [{"name": "f", "arguments": {"x": 1}}]}             (the whole answer)
///          {"response": "text"}                                               (an answer in text)
/// Dsml     <｜DSML｜tool_calls>                                                (one block of calls,
///          <｜DSML｜invoke name="f">                                            see [`super::dsml`])
///          <｜DSML｜parameter name="x" string="false">1</｜DSML｜parameter>
///          </｜DSML｜invoke>
///          </｜DSML｜tool_calls>
/// QwenXml  <tool_call>\n<function=f>\n<parameter=x>\n1\n</parameter>\n</function>\n</tool_call>
///                                                                             (one block per call,
///                                                                             see [`super::qwen_xml`])
/// ```
///
/// Generic is llama.cpp's format for templates with no tool syntax of their own: the system
/// prompt asks for it ([`super::fallback_system_prompt`]), so it is always taught, never
/// native. Parsing accepts `"arguments"` and `"parameters"` in every JSON format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ToolFormat {
    /// Hermes 2 Pro, Qwen 2.5 / Qwen 3.
    Hermes,
    /// Llama 3.1 – 3.3 JSON tool calling.
    Llama3,
    /// Mistral v3 / Nemo / Small.
    Mistral,
    Generic,
    /// DeepSeek-V4's DSML markup.
    Dsml,
    /// Qwen3-Coder's XML, taught by the Qwen 3.5 templates.
    QwenXml,
}

impl ToolFormat {
    /// The format a chat template's source implies: DSML when it builds DeepSeek-V4's
    /// `<｜DSML｜tool_calls>` (its `dsml_token`; V3.2's `function_calls` blocks are not this
    /// format), Qwen3-Coder's XML when it writes `<function=` and `<parameter=` inside
    /// `<tool_call>`, Hermes when it mentions `<tool_call>` otherwise, Mistral for `[TOOL_CALLS]`, Llama 3.x
    /// for `<|python_tag|>` or the `ipython` role, Generic otherwise (templates that do not
    /// render tools, or in a syntax not known here).
    pub fn detect(template_source: &str) -> Self {
        let dsml = ["dsml_token", "DSML", "tool_calls>"];
        if dsml.iter().all(|s| template_source.contains(s)) {
            ToolFormat::Dsml
        } else if [qwen_xml::OPEN, qwen_xml::FUNCTION, qwen_xml::PARAM]
            .iter()
            .all(|s| template_source.contains(s))
        {
            ToolFormat::QwenXml
        } else if template_source.contains("<tool_call>") {
            ToolFormat::Hermes
        } else if template_source.contains("[TOOL_CALLS]") {
            ToolFormat::Mistral
        } else if template_source.contains("<|python_tag|>") || template_source.contains("ipython")
        {
            ToolFormat::Llama3
        } else {
            ToolFormat::Generic
        }
    }

    /// The `--tool-format` spelling.
    pub fn name(self) -> &'static str {
        match self {
            ToolFormat::Hermes => "hermes",
            ToolFormat::Llama3 => "llama3",
            ToolFormat::Mistral => "mistral",
            ToolFormat::Generic => "generic",
            ToolFormat::Dsml => "dsml",
            ToolFormat::QwenXml => "qwen3-coder",
        }
    }

    /// The text that opens calls, for formats that mark them.
    pub(crate) fn marker(self) -> Option<&'static str> {
        match self {
            ToolFormat::Hermes => Some(HERMES_OPEN),
            ToolFormat::Llama3 => Some(PYTHON_TAG),
            ToolFormat::Mistral => Some(MISTRAL_OPEN),
            ToolFormat::Generic => None,
            ToolFormat::Dsml => Some(dsml::OPEN),
            ToolFormat::QwenXml => Some(qwen_xml::OPEN),
        }
    }

    /// A marker that also ends reasoning left open: DeepSeek's models may open their call
    /// block straight from their reasoning, without `</think>` (llama.cpp reads it so).
    pub(crate) fn ends_reasoning(self) -> Option<&'static str> {
        match self {
            ToolFormat::Dsml => Some(dsml::OPEN),
            _ => None,
        }
    }

    /// The key holding a call's arguments when this format writes one.
    pub(crate) fn args_key(self) -> &'static str {
        match self {
            ToolFormat::Llama3 => "parameters",
            _ => "arguments",
        }
    }

    /// `calls` (name, arguments object) written as this format's model writes them, for
    /// assistant turns a template cannot render itself. [`super::parse_whole`] reads it back.
    pub fn write_calls(self, calls: &[(&str, &Value)]) -> String {
        let key = self.args_key();
        let objects = calls
            .iter()
            .map(|(name, args)| json!({"name": name, key: args}));
        match self {
            ToolFormat::Hermes => objects
                .map(|o| format!("{HERMES_OPEN}\n{}\n{HERMES_CLOSE}", py_json(&o)))
                .collect::<Vec<_>>()
                .join("\n"),
            ToolFormat::Llama3 => objects.map(|o| py_json(&o)).collect::<Vec<_>>().join("; "),
            ToolFormat::Mistral => {
                format!(
                    "{MISTRAL_OPEN}{}",
                    py_json(&Value::Array(objects.collect()))
                )
            }
            ToolFormat::Generic => py_json(&json!({"tool_calls": objects.collect::<Vec<_>>()})),
            ToolFormat::Dsml => dsml::write(calls),
            ToolFormat::QwenXml => qwen_xml::write(calls),
        }
    }
}

pub(crate) const HERMES_OPEN: &str = "<tool_call>";
pub(crate) const HERMES_CLOSE: &str = "</tool_call>";
pub(crate) const MISTRAL_OPEN: &str = "[TOOL_CALLS]";
pub(crate) const MISTRAL_ARGS: &str = "[ARGS]";
pub(crate) const MISTRAL_CALL_ID: &str = "[CALL_ID]";
pub(crate) const PYTHON_TAG: &str = "<|python_tag|>";

impl fmt::Display for ToolFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for ToolFormat {
    type Err = String;

    /// `hermes` (also `qwen`), `llama3`, `mistral`, `generic`, `dsml` (also `deepseek`) or
    /// `qwen3-coder` (also `xml`), in any case.
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "hermes" | "qwen" => Ok(ToolFormat::Hermes),
            "llama3" | "llama" => Ok(ToolFormat::Llama3),
            "mistral" => Ok(ToolFormat::Mistral),
            "generic" => Ok(ToolFormat::Generic),
            "dsml" | "deepseek" => Ok(ToolFormat::Dsml),
            "qwen3-coder" | "xml" => Ok(ToolFormat::QwenXml),
            _ => Err(format!(
                "unknown tool format '{s}' (expected hermes, llama3, mistral, generic, dsml or qwen3-coder)"
            )),
        }
    }
}

/// JSON on one line as Python's `json.dumps` writes it (`{"a": 1, "b": [2, 3]}`, non-ASCII
/// kept), the spelling chat templates' `tojson` gives and models are trained on.
pub(crate) fn py_json(v: &Value) -> String {
    let mut out = Vec::new();
    let mut ser = serde_json::Serializer::with_formatter(&mut out, PyFormatter);
    v.serialize(&mut ser)
        .expect("a JSON value always serializes");
    String::from_utf8(out).expect("serde_json writes UTF-8")
}

struct PyFormatter;

impl serde_json::ser::Formatter for PyFormatter {
    fn begin_array_value<W: ?Sized + std::io::Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        if first {
            Ok(())
        } else {
            w.write_all(b", ")
        }
    }

    fn begin_object_key<W: ?Sized + std::io::Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        self.begin_array_value(w, first)
    }

    fn begin_object_value<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        w.write_all(b": ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detects_by_template_text() {
        let cases = [
            ("{{- '<tool_call>\\n' }}", ToolFormat::Hermes),
            (
                "{{- '<tool_call>\\n<function=' + name + '>\\n' }}{{- '<parameter=' + k + '>\\n' }}",
                ToolFormat::QwenXml,
            ),
            ("{{- '[TOOL_CALLS][' }}", ToolFormat::Mistral),
            ("{{- '<|python_tag|>' + x }}", ToolFormat::Llama3),
            ("{{- 'Environment: ipython\\n' }}", ToolFormat::Llama3),
            (
                "{%- set dsml_token = '｜DSML｜' -%}{{- '\\n\\n<' + dsml_token + 'tool_calls>\\n' -}}",
                ToolFormat::Dsml,
            ),
            (
                "{%- set dsml_token = '｜DSML｜' -%}{{- '<' + dsml_token + 'function_calls>' -}}",
                ToolFormat::Generic,
            ),
            (
                "{% for m in messages %}{{ m.content }}{% endfor %}",
                ToolFormat::Generic,
            ),
        ];
        for (src, want) in cases {
            assert_eq!(ToolFormat::detect(src), want, "{src}");
        }
    }

    #[test]
    fn names_round_trip() {
        for f in [
            ToolFormat::Hermes,
            ToolFormat::Llama3,
            ToolFormat::Mistral,
            ToolFormat::Generic,
            ToolFormat::Dsml,
            ToolFormat::QwenXml,
        ] {
            assert_eq!(f.to_string().parse::<ToolFormat>(), Ok(f));
        }
        assert_eq!("Qwen".parse::<ToolFormat>(), Ok(ToolFormat::Hermes));
        assert_eq!("DeepSeek".parse::<ToolFormat>(), Ok(ToolFormat::Dsml));
        assert!("json".parse::<ToolFormat>().is_err());
    }

    #[test]
    fn writes_like_python() {
        let v = json!({"a": [1, "é"], "b": {}});
        assert_eq!(py_json(&v), r#"{"a": [1, "é"], "b": {}}"#);
        let args = json!({"city": "Paris"});
        let calls = [("get_weather", &args)];
        assert_eq!(
            ToolFormat::Hermes.write_calls(&calls),
            "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>"
        );
        assert_eq!(
            ToolFormat::Llama3.write_calls(&calls),
            r#"{"name": "get_weather", "parameters": {"city": "Paris"}}"#
        );
        assert_eq!(
            ToolFormat::Mistral.write_calls(&calls),
            r#"[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}}]"#
        );
        assert_eq!(
            ToolFormat::Generic.write_calls(&calls),
            r#"{"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]}"#
        );
        let more = json!({"city": "Paris", "days": [1, "é"]});
        let none = json!({});
        assert_eq!(
            ToolFormat::Dsml.write_calls(&[("get_weather", &more), ("now", &none)]),
            "<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"get_weather\">\n\
             <｜DSML｜parameter name=\"city\" string=\"true\">Paris</｜DSML｜parameter>\n\
             <｜DSML｜parameter name=\"days\" string=\"false\">[1, \"é\"]</｜DSML｜parameter>\n\
             </｜DSML｜invoke>\n<｜DSML｜invoke name=\"now\">\n\n</｜DSML｜invoke>\n\
             </｜DSML｜tool_calls>"
        );
    }
}
