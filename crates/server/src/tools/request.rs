//! The request side: `tools`, `tool_choice` and `parallel_tool_calls` validated into a
//! [`ToolSpec`], or a 400 that names the field at fault (`tools[1].function.name`).

use serde_json::{json, Map, Value};

use crate::error::ApiError;

/// One function the model may call.
#[derive(Debug, Clone, PartialEq)]
pub struct Tool {
    pub name: String,
    pub description: Option<String>,
    /// JSON schema of the arguments object; `{"type":"object","properties":{}}` when the
    /// request gave none.
    pub parameters: Value,
}

/// What the model may or must call (`tool_choice`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolChoice {
    /// No calls: the answer is text, and it is not parsed for calls. The default without tools.
    None,
    /// Text or calls, as the model decides. The default with tools.
    Auto,
    /// At least one call (exactly one without `parallel_tool_calls`).
    Required,
    /// Exactly one call, of this function.
    Named(String),
}

/// The tool part of a chat request.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolSpec {
    /// Distinct names, in the request's order.
    pub tools: Vec<Tool>,
    pub choice: ToolChoice,
    /// Whether one answer may hold several calls (`parallel_tool_calls`, default true).
    pub parallel: bool,
}

/// Longest function name accepted (OpenAI's limit).
const MAX_NAME: usize = 64;

impl ToolSpec {
    /// Validates the three request fields (each absent or `null` when not sent). `tools: []`
    /// counts as no tools. Without tools, `tool_choice` may only be `"none"` or `"auto"`.
    pub fn from_request(
        tools: Option<&Value>,
        tool_choice: Option<&Value>,
        parallel_tool_calls: Option<&Value>,
    ) -> Result<Self, ApiError> {
        let tools = match tools {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(items)) => {
                let mut tools: Vec<Tool> = Vec::with_capacity(items.len());
                for (i, item) in items.iter().enumerate() {
                    let tool = parse_tool(i, item)?;
                    if tools.iter().any(|t| t.name == tool.name) {
                        return Err(ApiError::invalid(
                            format!("tools[{i}].function.name"),
                            format!("tools[{i}].function.name: '{}' is named twice", tool.name),
                        ));
                    }
                    tools.push(tool);
                }
                tools
            }
            Some(_) => {
                return Err(ApiError::invalid(
                    "tools",
                    "tools must be an array of {\"type\": \"function\", \"function\": {...}}",
                ))
            }
        };
        let choice = parse_choice(tool_choice, &tools)?;
        let parallel = match parallel_tool_calls {
            None | Some(Value::Null) => true,
            Some(Value::Bool(b)) => *b,
            Some(_) => {
                return Err(ApiError::invalid(
                    "parallel_tool_calls",
                    "parallel_tool_calls must be a boolean",
                ))
            }
        };
        Ok(ToolSpec {
            tools,
            choice,
            parallel,
        })
    }

    /// Whether answers may hold calls: there are tools and `tool_choice` is not `none`.
    /// When false, the prompt shows no tools and answers are not parsed.
    pub fn active(&self) -> bool {
        !self.tools.is_empty() && self.choice != ToolChoice::None
    }

    /// The tools the answer may call: all of them, or the one `tool_choice` names.
    pub fn callable(&self) -> impl Iterator<Item = &Tool> {
        self.tools.iter().filter(move |t| match &self.choice {
            ToolChoice::Named(name) => &t.name == name,
            _ => true,
        })
    }

    /// The tools as chat templates take them (OpenAI's shape, as Hugging Face passes them):
    /// `[{"type": "function", "function": {"name", "description", "parameters"}}]`.
    pub fn tools_json(&self) -> Value {
        Value::Array(self.tools.iter().map(Tool::to_json).collect())
    }
}

impl Tool {
    /// `{"type": "function", "function": {...}}`, the description left out when absent.
    pub fn to_json(&self) -> Value {
        let mut function = Map::new();
        function.insert("name".into(), Value::String(self.name.clone()));
        if let Some(d) = &self.description {
            function.insert("description".into(), Value::String(d.clone()));
        }
        function.insert("parameters".into(), self.parameters.clone());
        json!({"type": "function", "function": function})
    }
}

fn parse_tool(i: usize, item: &Value) -> Result<Tool, ApiError> {
    let at = |field: &str| format!("tools[{i}]{field}");
    let bad = |field: &str, why: &str| {
        let path = at(field);
        ApiError::invalid(path.clone(), format!("{path}: {why}"))
    };
    let obj = item.as_object().ok_or_else(|| {
        bad(
            "",
            "must be an object {\"type\": \"function\", \"function\": {...}}",
        )
    })?;
    match obj.get("type") {
        None | Some(Value::Null) => {}
        Some(Value::String(t)) if t == "function" => {}
        Some(t) => {
            return Err(bad(
                ".type",
                &format!("only function tools are supported, not {t}"),
            ))
        }
    }
    let function = obj
        .get("function")
        .and_then(Value::as_object)
        .ok_or_else(|| bad(".function", "must be an object with a 'name'"))?;
    let name = function
        .get("name")
        .and_then(Value::as_str)
        .ok_or_else(|| bad(".function.name", "must be a string"))?;
    let name_ok = !name.is_empty()
        && name.len() <= MAX_NAME
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_-.".contains(&b));
    if !name_ok {
        return Err(bad(
            ".function.name",
            &format!("'{name}' must be 1 to {MAX_NAME} letters, digits, '_', '-' or '.'"),
        ));
    }
    let description = match function.get("description") {
        None | Some(Value::Null) => None,
        Some(Value::String(d)) => Some(d.clone()),
        Some(_) => return Err(bad(".function.description", "must be a string")),
    };
    let parameters = match function.get("parameters") {
        None | Some(Value::Null) => json!({"type": "object", "properties": {}}),
        Some(p @ Value::Object(_)) => p.clone(),
        Some(_) => return Err(bad(".function.parameters", "must be a JSON schema object")),
    };
    if !matches!(
        function.get("strict"),
        None | Some(Value::Null | Value::Bool(_))
    ) {
        return Err(bad(".function.strict", "must be a boolean"));
    }
    Ok(Tool {
        name: name.to_string(),
        description,
        parameters,
    })
}

fn parse_choice(choice: Option<&Value>, tools: &[Tool]) -> Result<ToolChoice, ApiError> {
    let bad = |why: String| ApiError::invalid("tool_choice", format!("tool_choice: {why}"));
    let choice = match choice {
        None | Some(Value::Null) => ToolChoice::Auto,
        Some(Value::String(s)) => match s.as_str() {
            "none" => ToolChoice::None,
            "auto" => ToolChoice::Auto,
            "required" => ToolChoice::Required,
            other => {
                return Err(bad(format!(
                    "'{other}' is not one of \"none\", \"auto\", \"required\" or {{\"type\": \"function\", \"function\": {{\"name\": ...}}}}"
                )))
            }
        },
        Some(Value::Object(o)) => {
            let name = o
                .get("function")
                .and_then(|f| f.get("name"))
                .and_then(Value::as_str)
                .filter(|_| o.get("type").and_then(Value::as_str) == Some("function"))
                .ok_or_else(|| {
                    bad("must be {\"type\": \"function\", \"function\": {\"name\": ...}}".into())
                })?;
            if !tools.iter().any(|t| t.name == name) {
                return Err(bad(format!("'{name}' is not one of the tools")));
            }
            ToolChoice::Named(name.to_string())
        }
        Some(other) => return Err(bad(format!("must be a string or an object, not {other}"))),
    };
    match choice {
        ToolChoice::Required if tools.is_empty() => {
            Err(bad("\"required\" needs a non-empty tools array".into()))
        }
        ToolChoice::Auto if tools.is_empty() => Ok(ToolChoice::None),
        c => Ok(c),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(tools: Value, choice: Value, parallel: Value) -> Result<ToolSpec, ApiError> {
        let opt = |v: &Value| Some(v.clone()).filter(|v| !v.is_null());
        ToolSpec::from_request(
            opt(&tools).as_ref(),
            opt(&choice).as_ref(),
            opt(&parallel).as_ref(),
        )
    }

    fn param_of(r: Result<ToolSpec, ApiError>) -> String {
        r.expect_err("should be refused").param.unwrap_or_default()
    }

    fn weather() -> Value {
        json!({"type": "function", "function": {
            "name": "get_weather",
            "description": "Weather of a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
            "strict": true,
        }})
    }

    #[test]
    fn defaults_follow_tools() {
        let s = spec(json!([weather()]), Value::Null, Value::Null).unwrap();
        assert_eq!(s.choice, ToolChoice::Auto);
        assert!(s.parallel && s.active());
        assert_eq!(s.tools[0].name, "get_weather");
        assert_eq!(s.tools[0].description.as_deref(), Some("Weather of a city"));
        let none = spec(Value::Null, Value::Null, Value::Null).unwrap();
        assert_eq!(none.choice, ToolChoice::None);
        assert!(!none.active());
        let empty = spec(json!([]), json!("auto"), Value::Null).unwrap();
        assert_eq!(empty.choice, ToolChoice::None);
    }

    #[test]
    fn missing_parameters_mean_no_arguments() {
        let s = spec(
            json!([{"type": "function", "function": {"name": "now"}}]),
            json!("required"),
            json!(false),
        )
        .unwrap();
        assert_eq!(
            s.tools[0].parameters,
            json!({"type": "object", "properties": {}})
        );
        assert_eq!(s.choice, ToolChoice::Required);
        assert!(!s.parallel);
    }

    #[test]
    fn named_choice_must_be_a_tool() {
        let named = json!({"type": "function", "function": {"name": "get_weather"}});
        let s = spec(json!([weather()]), named, Value::Null).unwrap();
        assert_eq!(s.choice, ToolChoice::Named("get_weather".into()));
        let other = json!({"type": "function", "function": {"name": "nope"}});
        assert_eq!(
            param_of(spec(json!([weather()]), other, Value::Null)),
            "tool_choice"
        );
        assert_eq!(
            param_of(spec(json!([weather()]), json!("always"), Value::Null)),
            "tool_choice"
        );
        assert_eq!(
            param_of(spec(Value::Null, json!("required"), Value::Null)),
            "tool_choice"
        );
    }

    #[test]
    fn bad_shapes_name_the_field() {
        let ok = weather();
        let cases = [
            (json!({"type": "function"}), "tools"),
            (
                json!([ok, {"type": "function", "function": {"name": 3}}]),
                "tools[1].function.name",
            ),
            (
                json!([{"type": "function", "function": {"name": "a b"}}]),
                "tools[0].function.name",
            ),
            (json!([{"type": "retrieval"}]), "tools[0].type"),
            (json!([{"type": "function"}]), "tools[0].function"),
            (json!(["get_weather"]), "tools[0]"),
            (
                json!([{"type": "function", "function": {"name": "f", "parameters": "x"}}]),
                "tools[0].function.parameters",
            ),
            (
                json!([{"type": "function", "function": {"name": "f", "description": 1}}]),
                "tools[0].function.description",
            ),
            (json!([weather(), weather()]), "tools[1].function.name"),
        ];
        for (tools, field) in cases {
            assert_eq!(param_of(spec(tools, Value::Null, Value::Null)), field);
        }
        assert_eq!(
            param_of(spec(json!([weather()]), Value::Null, json!("yes"))),
            "parallel_tool_calls"
        );
    }

    #[test]
    fn template_shape_round_trips() {
        let s = spec(json!([weather()]), Value::Null, Value::Null).unwrap();
        let mut want = weather();
        want["function"].as_object_mut().unwrap().remove("strict");
        assert_eq!(s.tools_json(), json!([want]));
    }
}
