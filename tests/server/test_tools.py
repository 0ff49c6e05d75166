"""Tool calls through the real server with the official openai client, on Qwen2.5-Coder-0.5B
(Hermes format, tools shown by its template) and SmolLM2 (no tool syntax: the generic JSON
format taught by tandem's system prompt): calls parse and validate against the tool's
schema, streamed and not; `none` gives text; `required` and a named function force a valid
call; history with calls and results renders and gets a text answer."""

import json

import jsonschema
import pytest

from conftest import Server

WEATHER = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "unit": {"enum": ["celsius", "fahrenheit"]}},
    "required": ["city"],
}
TIME = {"type": "object", "properties": {"timezone": {"type": "string"}}, "required": ["timezone"]}
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Get the current weather in a city",
                                      "parameters": WEATHER}},
    {"type": "function", "function": {"name": "get_time", "description": "Get the current time in a timezone",
                                      "parameters": TIME}},
]
SCHEMAS = {"get_weather": WEATHER, "get_time": TIME}
ASK = [{"role": "user", "content": "What is the weather like in Paris today?"}]


@pytest.fixture(scope="module")
def qwen():
    s = Server("-c", "8192", "-np", "4", model="qwen2.5-coder-0.5b")
    yield s
    s.stop()


def chat(server, messages, **kw):
    return server.client().chat.completions.create(
        model="m", messages=messages, temperature=0, max_tokens=120, **kw
    )


def valid_calls(calls, names=SCHEMAS):
    assert calls, "no tool calls"
    for c in calls:
        assert c.type == "function" and c.id.startswith("call_")
        assert c.function.name in names, c.function.name
        jsonschema.validate(json.loads(c.function.arguments), SCHEMAS[c.function.name])


def test_auto_calls_the_weather_tool(qwen):
    assert "tool calls: hermes format, tools shown by the chat template" in qwen.output()
    r = chat(qwen, ASK, tools=TOOLS, tool_choice="auto").choices[0]
    assert r.finish_reason == "tool_calls", r.message
    valid_calls(r.message.tool_calls, ["get_weather"])
    assert not r.message.content


def test_auto_calls_the_weather_tool_streamed(qwen):
    stream = chat(qwen, ASK, tools=TOOLS, stream=True)
    calls, finish, content = {}, None, ""
    for chunk in stream:
        if not chunk.choices:
            continue
        choice = chunk.choices[0]
        content += choice.delta.content or ""
        for tc in choice.delta.tool_calls or []:
            c = calls.setdefault(tc.index, {"id": tc.id, "name": tc.function.name, "arguments": ""})
            c["arguments"] += tc.function.arguments or ""
        finish = choice.finish_reason or finish
    assert finish == "tool_calls" and content.strip() == ""
    assert [c["name"] for c in calls.values()] == ["get_weather"]
    jsonschema.validate(json.loads(calls[0]["arguments"]), WEATHER)


def test_none_gives_text(qwen):
    r = chat(qwen, ASK, tools=TOOLS, tool_choice="none").choices[0]
    assert r.finish_reason == "stop" and not r.message.tool_calls
    assert r.message.content.strip()


def test_required_and_named_force_a_valid_call(qwen):
    haiku = [{"role": "user", "content": "Write a haiku about the sea."}]
    r = chat(qwen, haiku, tools=TOOLS, tool_choice="required").choices[0]
    assert r.finish_reason == "tool_calls"
    valid_calls(r.message.tool_calls)
    named = {"type": "function", "function": {"name": "get_time"}}
    for messages in (haiku, ASK):
        r = chat(qwen, messages, tools=TOOLS, tool_choice=named, parallel_tool_calls=False).choices[0]
        assert r.finish_reason == "tool_calls"
        assert len(r.message.tool_calls) == 1
        valid_calls(r.message.tool_calls, ["get_time"])


def test_the_tool_result_gets_a_text_answer(qwen):
    first = chat(qwen, ASK, tools=TOOLS).choices[0].message
    call = first.tool_calls[0]
    history = [
        {"role": "system", "content": "You are a helpful assistant. After a tool returns, answer in plain text."},
        {"role": "user", "content": "What's the weather in Paris right now? Answer in one sentence."},
        {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
        {"role": "tool", "tool_call_id": call.id, "content": json.dumps({"city": "Paris", "weather": "sunny, 18 °C"})},
    ]
    prompt = qwen.post("/apply-template", json={"messages": history, "tools": TOOLS}).json()["prompt"]
    assert '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"' in prompt, prompt
    assert "<tool_response>" in prompt and "get_time" in prompt
    # The 0.5B repeats its call under `auto` here; with the tools withdrawn it answers.
    r = chat(qwen, history, tools=TOOLS, tool_choice="none").choices[0]
    assert r.finish_reason == "stop" and not r.message.tool_calls
    assert "sunny" in r.message.content or "18" in r.message.content, r.message.content


def test_bad_tools_are_a_400_naming_the_field(qwen):
    import openai

    for kw, field in [
        ({"tools": [{"type": "function", "function": {"description": "no name"}}]}, "tools[0].function.name"),
        ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}}, "tool_choice"),
        ({"tools": TOOLS, "response_format": {"type": "json_object"}}, "response_format"),
    ]:
        with pytest.raises(openai.BadRequestError) as e:
            chat(qwen, ASK, **kw)
        assert e.value.body["param"] == field, e.value.body


def test_generic_format_on_a_template_without_tools(server):
    assert "tool calls: generic format, tools shown by tandem's system prompt" in server.output()
    c = server.client()
    r = c.chat.completions.create(model="m", messages=ASK, tools=TOOLS, tool_choice="required",
                                  parallel_tool_calls=False, temperature=0, max_tokens=120).choices[0]
    assert r.finish_reason == "tool_calls", r.message
    valid_calls(r.message.tool_calls)
    call = r.message.tool_calls[0]
    history = ASK + [
        {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
        {"role": "tool", "tool_call_id": call.id, "content": "sunny, 18 °C"},
    ]
    prompt = server.post("/apply-template", json={"messages": history, "tools": TOOLS}).json()["prompt"]
    assert "sunny, 18 °C" in prompt and '"tool_calls"' in prompt, prompt
    r = c.chat.completions.create(model="m", messages=history, tools=TOOLS, temperature=0, max_tokens=60)
    assert r.choices[0].finish_reason in ("stop", "tool_calls", "length")
