//! DeepSeek-V4's own chat template rendered as chat requests render it, and answers to its
//! prompts split into reasoning, content and calls.

use serde_json::{json, Value};
use text::{ChatTemplate, RenderOptions};

use crate::reasoning::Splitter;
use crate::tools::{
    normalize_messages, parse_whole, CallParser, TemplateSupport, Tool, ToolFormat,
};
use crate::transform::{Chain, Out};

/// deepseek-ai/DeepSeek-V4's chat template (as llama.cpp keeps it in
/// models/templates/deepseek-ai-DeepSeek-V4.jinja), verbatim.
const V4: &str = r##"{%- if not add_generation_prompt is defined -%}
  {%- set add_generation_prompt = false -%}
{%- endif -%}
{%- if not thinking is defined -%}
  {%- if enable_thinking is defined -%}
    {%- set thinking = enable_thinking -%}
  {%- else -%}
    {%- set thinking = false -%}
  {%- endif -%}
{%- endif -%}
{%- if not drop_thinking is defined -%}
  {%- set drop_thinking = true -%}
{%- endif -%}
{%- set dsml_token = '｜DSML｜' -%}
{%- set thinking_start_token = '<think>' -%}
{%- set thinking_end_token = '</think>' -%}
{%- set reasoning_effort_max = 'Reasoning Effort: Absolute maximum with no shortcuts permitted.\nYou MUST be very thorough in your thinking and comprehensively decompose the problem to resolve the root cause, rigorously stress-testing your logic against all potential paths, edge cases, and adversarial scenarios.\nExplicitly write out your entire deliberation process, documenting every intermediate step, considered alternative, and rejected hypothesis to ensure absolutely no assumption is left unchecked.\n\n' -%}
{%- set response_format_template = '## Response Format:\n\nYou MUST strictly adhere to the following schema to reply:\n' -%}
{%- set has_tools = false -%}
{%- set tools_header = '## Tools\n\nYou have access to a set of tools to help answer the user\'s question. You can invoke tools by writing a "<' + dsml_token + 'tool_calls>" block like the following:\n\n<' + dsml_token + 'tool_calls>\n<' + dsml_token + 'invoke name="$TOOL_NAME">\n<' + dsml_token + 'parameter name="$PARAMETER_NAME" string="true|false">$PARAMETER_VALUE</' + dsml_token + 'parameter>\n...\n</' + dsml_token + 'invoke>\n<' + dsml_token + 'invoke name="$TOOL_NAME2">\n...\n</' + dsml_token + 'invoke>\n</' + dsml_token + 'tool_calls>\n\nString parameters should be specified as is and set `string="true"`. For all other types (numbers, booleans, arrays, objects), pass the value in JSON format and set `string="false"`.\n\nIf thinking_mode is enabled (triggered by ' + thinking_start_token + '), you MUST output your complete reasoning inside ' + thinking_start_token + '...' + thinking_end_token + ' BEFORE any tool calls or final response.\n\nOtherwise, output directly after ' + thinking_end_token + ' with tool calls or final response.\n\n### Available Tool Schemas\n\n' -%}
{%- set tools_footer = '\nYou MUST strictly follow the above defined tool name and parameter schemas to invoke tool calls.\n' -%}
{%- set ns = namespace(system_prompt='', is_first_sp=true, has_tool_calls=false) -%}
{%- for message in messages -%}
  {%- if message['role'] == 'system' -%}
    {%- if ns.is_first_sp -%}
      {%- set ns.system_prompt = ns.system_prompt + (message['content'] or '') -%}
      {%- set ns.is_first_sp = false -%}
    {%- else -%}
      {%- set ns.system_prompt = ns.system_prompt + '\n\n' + (message['content'] or '') -%}
    {%- endif -%}
  {%- endif -%}
{%- endfor -%}
{%- if tools is defined and tools -%}
  {%- set has_tools = true -%}
  {%- set ts = namespace(schemas='') -%}
  {%- for tool in tools -%}
    {%- if tool['type'] == 'function' -%}
      {%- set ts.schemas = ts.schemas + (tool['function'] | tojson) + '\n' -%}
    {%- endif -%}
  {%- endfor -%}
  {%- if ns.system_prompt -%}
    {%- set ns.system_prompt = ns.system_prompt + '\n\n' + tools_header + ts.schemas + tools_footer -%}
  {%- else -%}
    {%- set ns.system_prompt = tools_header + ts.schemas + tools_footer -%}
  {%- endif -%}
{%- endif -%}
{%- if response_format is defined -%}
  {%- if ns.system_prompt -%}
    {%- set ns.system_prompt = ns.system_prompt + '\n\n' -%}
  {%- endif -%}
  {%- set ns.system_prompt = ns.system_prompt + response_format_template + (response_format | tojson) -%}
{%- endif -%}
{{- bos_token -}}
{%- if messages and thinking and reasoning_effort is defined and reasoning_effort == 'max' -%}
  {{- reasoning_effort_max -}}
{%- endif -%}
{{- ns.system_prompt -}}
{%- set last_user_idx = namespace(value=-1) -%}
{%- for message in messages -%}
  {%- if message['role'] == 'user' or message['role'] == 'developer' or message['role'] == 'tool' -%}
    {%- set last_user_idx.value = loop.index0 -%}
  {%- endif -%}
{%- endfor -%}
{%- set state = namespace(in_user=false) -%}
{%- for message in messages -%}
  {%- if message['role'] == 'tool' -%}
    {%- set ns.has_tool_calls = true -%}
  {%- endif -%}
{%- endfor -%}
{%- for message in messages -%}
  {%- if message['role'] == 'user' or message['role'] == 'developer' -%}
    {%- if state.in_user -%}
      {{- '\n\n' -}}
    {%- else -%}
      {{- '<｜User｜>' -}}
      {%- set state.in_user = true -%}
    {%- endif -%}
    {{- message['content'] or '' -}}
  {%- elif message['role'] == 'tool' -%}
    {%- if state.in_user -%}
      {{- '\n\n' -}}
    {%- else -%}
      {{- '<｜User｜>' -}}
      {%- set state.in_user = true -%}
    {%- endif -%}
    {{- '<tool_result>' + (message['content'] or '') + '</tool_result>' -}}
  {%- elif message['role'] == 'assistant' -%}
    {%- set state.in_user = false -%}
    {{- '<｜Assistant｜>' -}}
    {%- set is_after_last_user = loop.index0 > last_user_idx.value -%}
    {%- set keep_reasoning = thinking and ((not drop_thinking) or has_tools or is_after_last_user or ns.has_tool_calls) -%}
    {%- if keep_reasoning -%}
      {{- thinking_start_token -}}
      {%- if message['reasoning_content'] is defined and message['reasoning_content'] -%}
        {{- message['reasoning_content'] -}}
      {%- endif -%}
      {{- thinking_end_token -}}
    {%- else -%}
      {{- thinking_end_token -}}
    {%- endif -%}
    {%- if message['content'] is defined and message['content'] -%}
      {{- message['content'] -}}
    {%- endif -%}
    {%- if message['tool_calls'] -%}
      {{- '\n\n<' + dsml_token + 'tool_calls>\n' -}}
      {%- for tool in message['tool_calls'] -%}
        {%- set func = tool['function'] -%}
        {{- '<' + dsml_token + 'invoke name="' + func['name'] + '">\n' -}}
        {%- set args = func['arguments'] -%}
        {%- if args is string -%}
          {%- set args = args | from_json -%}
        {%- endif -%}
        {%- for key, val in args.items() -%}
          {%- if val is string -%}
            {{- '<' + dsml_token + 'parameter name="' + key + '" string="true">' + val + '</' + dsml_token + 'parameter>\n' -}}
          {%- else -%}
            {{- '<' + dsml_token + 'parameter name="' + key + '" string="false">' + (val | tojson) + '</' + dsml_token + 'parameter>\n' -}}
          {%- endif -%}
        {%- endfor -%}
        {%- if not args -%}
          {{- '\n' -}}
        {%- endif -%}
        {{- '</' + dsml_token + 'invoke>\n' -}}
      {%- endfor -%}
      {{- '</' + dsml_token + 'tool_calls>' -}}
    {%- endif -%}
    {{- '<｜end▁of▁sentence｜>' -}}
  {%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
  {{- '<｜Assistant｜>' -}}
  {%- if thinking -%}
    {{- thinking_start_token -}}
  {%- else -%}
    {{- thinking_end_token -}}
  {%- endif -%}
{%- endif -%}
"##;

fn template() -> ChatTemplate {
    ChatTemplate::new(V4, "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>").unwrap()
}

/// `messages` normalized and rendered with the assistant's turn opened and `vars` (the
/// server's `enable_thinking`, a request's `chat_template_kwargs`).
fn render(mut messages: Vec<Value>, vars: Value) -> String {
    normalize_messages(&mut messages);
    let options = RenderOptions {
        add_generation_prompt: true,
        tools: None,
        extra: serde_json::from_value(vars).unwrap(),
    };
    template().render_with(&messages, &options).unwrap()
}

fn tools() -> Vec<Tool> {
    crate::tools::testing::untyped_tools(&["get_weather", "now"])
}

#[test]
fn detected_and_probed() {
    assert_eq!(ToolFormat::detect(V4), ToolFormat::Dsml);
    let support = TemplateSupport::probe(&template());
    assert!(support.tools && support.tool_turns, "{support:?}");
}

#[test]
fn the_generation_prompt_opens_or_closes_thinking() {
    let hi = || vec![json!({"role": "user", "content": "Hi"})];
    let cases = [
        (json!({"enable_thinking": true}), "<｜Assistant｜><think>"),
        (json!({"enable_thinking": false}), "<｜Assistant｜></think>"),
        (json!({}), "<｜Assistant｜></think>"),
        (
            json!({"enable_thinking": true, "thinking": false}),
            "<｜Assistant｜></think>",
        ),
        (json!({"thinking": true}), "<｜Assistant｜><think>"),
    ];
    for (vars, end) in cases {
        let prompt = render(hi(), vars.clone());
        assert_eq!(
            prompt,
            format!("<｜begin▁of▁sentence｜><｜User｜>Hi{end}"),
            "{vars}"
        );
    }
}

/// An assistant turn with calls, as the template renders it, is what
/// [`ToolFormat::write_calls`] writes after the content, and reads back as that content
/// and those calls.
#[test]
fn calls_render_as_write_calls_writes_them() {
    let args = json!({"city": "Paris", "days": [1, 2], "metric": true});
    let none = json!({});
    let messages = vec![
        json!({"role": "user", "content": "Weather in Paris, and the time?"}),
        json!({"role": "assistant", "content": "Let me check.", "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "get_weather", "arguments": args.to_string()}},
            {"id": "call_2", "type": "function",
             "function": {"name": "now", "arguments": "{}"}},
        ]}),
        json!({"role": "tool", "tool_call_id": "call_1", "content": "sunny"}),
        json!({"role": "tool", "tool_call_id": "call_2", "content": "noon"}),
    ];
    for thinking in [false, true] {
        let prompt = render(messages.clone(), json!({"enable_thinking": thinking}));
        let written = ToolFormat::Dsml.write_calls(&[("get_weather", &args), ("now", &none)]);
        let turn = format!("</think>Let me check.\n\n{written}<｜end▁of▁sentence｜>");
        assert!(prompt.contains(&turn), "{prompt}");

        let start = prompt.find("</think>").unwrap() + "</think>".len();
        let end = prompt.find("<｜end▁of▁sentence｜>").unwrap();
        let (content, calls) = parse_whole(ToolFormat::Dsml, &tools(), 5, &prompt[start..end]);
        assert_eq!(content, "Let me check.");
        let got: Vec<(&str, Value)> = calls
            .iter()
            .map(|c| (c.name.as_str(), serde_json::from_str(&c.arguments).unwrap()))
            .collect();
        assert_eq!(
            got,
            vec![("get_weather", args.clone()), ("now", none.clone())]
        );
    }
}

/// `answer` to `prompt` pushed in two pieces split at `at` (and whole, `at` past the end).
fn answer(prompt: &str, answer: &str, at: usize) -> Out {
    let mut chain = Chain::new(
        Some(Splitter::for_prompt(prompt, ToolFormat::Dsml, true)),
        Some(CallParser::new(ToolFormat::Dsml, &tools(), 9)),
    );
    let (a, b) = answer.split_at(at.min(answer.len()));
    let mut out = chain.push(a);
    let rest = chain.whole(b);
    out.reasoning.push_str(&rest.reasoning);
    out.content.push_str(&rest.content);
    out.calls.extend(rest.calls);
    assert_eq!(chain.n_calls, out.calls.len());
    out
}

/// Answers to the template's prompts, split at every byte boundary: what comes before
/// `</think>` (or before a call block opened straight from reasoning) is reasoning, never
/// content; a prompt that closed thinking gets no reasoning; a broken call stays content and
/// is no call (the finish reason stays the engine's).
#[test]
fn reasoning_never_leaks_into_content() {
    let hi = || vec![json!({"role": "user", "content": "Weather in Paris?"})];
    let on = render(hi(), json!({"enable_thinking": true}));
    let off = render(hi(), json!({"enable_thinking": false}));
    let block = "<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"get_weather\">\n\
        <｜DSML｜parameter name=\"city\" string=\"true\">Paris</｜DSML｜parameter>\n\
        </｜DSML｜invoke>\n</｜DSML｜tool_calls>";
    let broken = block.replace("string=\"true\">Paris", "string=\"false\">Paris");
    let thought = "The user wants <b>weather</b>; think </thin";
    let cases = [
        (
            &on,
            format!("{thought}</think>Let me check.\n\n{block}"),
            thought.to_string(),
            "Let me check.",
            1,
        ),
        (
            &on,
            format!("{thought}\n\n{block}"),
            format!("{thought}\n\n"),
            "",
            1,
        ),
        (&on, thought.to_string(), thought.to_string(), "", 0),
        (
            &on,
            format!("{thought}</think>\n\n{broken}"),
            thought.to_string(),
            broken.as_str(),
            0,
        ),
        (
            &off,
            format!("Let me check.\n\n{block}"),
            String::new(),
            "Let me check.",
            1,
        ),
        (
            &off,
            "Hello <think>".to_string(),
            String::new(),
            "Hello <think>",
            0,
        ),
    ];
    for (prompt, text, reasoning, content, n_calls) in cases {
        for at in (0..=text.len() + 1).filter(|&at| at > text.len() || text.is_char_boundary(at)) {
            let out = answer(prompt, &text, at);
            assert_eq!(
                (
                    out.reasoning.as_str(),
                    out.content.as_str(),
                    out.calls.len()
                ),
                (reasoning.as_str(), content, n_calls),
                "{text:?} split at {at}"
            );
        }
    }
}
