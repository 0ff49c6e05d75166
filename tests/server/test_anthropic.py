"""Anthropic's Messages API with the official `anthropic` client: the answer is the chat route's
answer to the same conversation (system, blocks, stop sequences, a final assistant message
continued), whole and streamed as Anthropic's events; count_tokens counts the prompt; the key
comes in x-api-key; errors come in Anthropic's shape naming the Anthropic field; on
Qwen2.5-Coder-0.5B tools give tool_use blocks whose input fits the schema, streamed or not, and
a tool_result in history gets a text answer."""

import json

import anthropic
import httpx
import jsonschema
import pytest

from conftest import API_KEY, Server
from test_tools import WEATHER

SYSTEM = "You are a terse assistant."
ASK = [{"role": "user", "content": "Name three colors of the rainbow."}]
TOOLS = [{"name": "get_weather", "description": "Get the current weather in a city", "input_schema": WEATHER}]


def claude(server, key=API_KEY):
    return anthropic.Anthropic(base_url=server.url, api_key=key, max_retries=0)


# The current client has no sampling parameters; the server still takes the older ones.
GREEDY = {"extra_body": {"temperature": 0}}


def create(server, **kw):
    args = dict(model="m", max_tokens=32, system=SYSTEM, messages=ASK, **GREEDY)
    args.update(kw)
    return claude(server).messages.create(**args)


def chat_text(server, messages, max_tokens=32, **kw):
    r = server.client().chat.completions.create(
        model="m", messages=messages, max_tokens=max_tokens, temperature=0, **kw)
    return r.choices[0]


def test_an_answer_is_the_chat_routes_answer(server):
    m = create(server)
    assert m.type == "message" and m.role == "assistant" and m.id.startswith("msg_")
    assert [b.type for b in m.content] == ["text"]
    want = chat_text(server, [{"role": "system", "content": SYSTEM}, *ASK])
    assert m.content[0].text == want.message.content
    assert m.stop_reason == {"stop": "end_turn", "length": "max_tokens"}[want.finish_reason]
    assert m.usage.output_tokens > 0
    assert m.usage.input_tokens + m.usage.cache_read_input_tokens > 10


def test_content_blocks_and_system_blocks_are_the_same_conversation(server):
    blocks = create(server, system=[{"type": "text", "text": SYSTEM}],
                    messages=[{"role": "user", "content": [{"type": "text", "text": ASK[0]["content"]}]}])
    assert blocks.content[0].text == create(server).content[0].text


def test_a_streamed_answer_is_the_whole_answer_in_anthropics_events(server):
    whole = create(server)
    with claude(server).messages.stream(model="m", max_tokens=32, system=SYSTEM, messages=ASK,
                                        **GREEDY) as stream:
        kinds = [e.type for e in stream]
        final = stream.get_final_message()
    assert final.content[0].text == whole.content[0].text
    assert final.stop_reason == whole.stop_reason
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    assert kinds.index("content_block_start") < kinds.index("content_block_stop") < kinds.index("message_delta")
    assert final.usage.output_tokens == whole.usage.output_tokens


def test_a_stop_sequence_ends_the_answer_and_is_named(server):
    text = create(server).content[0].text
    word = text.split()[1]
    m = create(server, stop_sequences=["zzz-never", word])
    assert m.stop_reason == "stop_sequence" and m.stop_sequence == word, m
    assert word not in m.content[0].text and text.startswith(m.content[0].text)


def test_a_final_assistant_message_is_continued(server):
    prefill = "The three colors are"
    m = create(server, messages=[*ASK, {"role": "assistant", "content": prefill}])
    want = chat_text(server, [{"role": "system", "content": SYSTEM}, *ASK, {"role": "assistant", "content": prefill}])
    assert m.content[0].text == want.message.content


def test_an_output_format_is_followed(server):
    schema = {"type": "object", "properties": {"colors": {"type": "array", "items": {"type": "string"},
                                                          "minItems": 3, "maxItems": 3}},
              "required": ["colors"], "additionalProperties": False}
    m = create(server, max_tokens=80, output_config={"format": {"type": "json_schema", "schema": schema}})
    jsonschema.validate(json.loads(m.content[0].text), schema)


def test_count_tokens_counts_the_prompt(server):
    n = claude(server).messages.count_tokens(model="m", system=SYSTEM, messages=ASK).input_tokens
    m = create(server)
    assert n == m.usage.input_tokens + m.usage.cache_read_input_tokens


def test_the_key_comes_in_x_api_key(server):
    with pytest.raises(anthropic.AuthenticationError):
        claude(server, key="not-the-key").messages.create(model="m", max_tokens=4, messages=ASK)


@pytest.mark.parametrize("body, field", [
    ({"messages": ASK}, "max_tokens"),
    ({"max_tokens": 8, "messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]},
     "messages[0].content[0]"),
    ({"max_tokens": 8, "messages": ASK, "thinking": {"type": "enabled"}}, "thinking.budget_tokens"),
    ({"max_tokens": 8, "messages": ASK, "thinking": {"type": "sometimes"}}, "thinking"),
    ({"max_tokens": 8, "messages": ASK, "output_config": {"effort": "high"}}, "output_config.effort"),
    ({"max_tokens": 8, "messages": ASK, "speed": "fast"}, "speed"),
    ({"max_tokens": 8, "messages": ASK, "temperature": 1.5}, "temperature"),
    ({"max_tokens": 8, "messages": ASK, "stop_sequences": ["x"] * 17}, "stop_sequences"),
    ({"max_tokens": 8, "messages": ASK, "mcp_servers": [{"type": "url", "url": "http://x", "name": "x"}]},
     "mcp_servers"),
    ({"max_tokens": 8, "messages": [{"role": "system", "content": "x"}]}, "messages[0].role"),
])
def test_errors_come_in_anthropics_shape_naming_the_field(server, body, field):
    r = httpx.post(server.url + "/v1/messages", json={"model": "m", **body},
                   headers={"x-api-key": API_KEY, "anthropic-version": "2023-06-01"}, timeout=60)
    assert r.status_code == 400, r.text
    err = r.json()
    assert err["type"] == "error" and err["error"]["type"] == "invalid_request_error", err
    assert field in err["error"]["message"], err


@pytest.fixture(scope="module")
def qwen():
    s = Server("-c", "8192", "-np", "2", model="qwen2.5-coder-0.5b")
    yield s
    s.stop()


WEATHER_ASK = [{"role": "user", "content": "What is the weather like in Paris today?"}]


def test_tools_give_tool_use_blocks(qwen):
    m = claude(qwen).messages.create(model="m", max_tokens=120, tools=TOOLS, **GREEDY, messages=WEATHER_ASK)
    assert m.stop_reason == "tool_use", m
    use = [b for b in m.content if b.type == "tool_use"]
    assert use and use[0].name == "get_weather"
    jsonschema.validate(use[0].input, WEATHER)
    with claude(qwen).messages.stream(model="m", max_tokens=120, tools=TOOLS, **GREEDY,
                                      messages=WEATHER_ASK) as stream:
        final = stream.get_final_message()
    streamed = [b for b in final.content if b.type == "tool_use"]
    assert final.stop_reason == "tool_use" and streamed[0].input == use[0].input


def test_a_tool_result_gets_the_chat_routes_text_answer(qwen):
    history = [
        *WEATHER_ASK,
        {"role": "assistant", "content": [
            {"type": "tool_use", "id": "call_1", "name": "get_weather", "input": {"city": "Paris"}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "call_1", "content": "18 degrees celsius, sunny"}]},
    ]
    m = claude(qwen).messages.create(model="m", max_tokens=60, tools=TOOLS, tool_choice={"type": "none"},
                                     messages=history, **GREEDY)
    assert m.stop_reason in ("end_turn", "max_tokens"), m
    openai_history = [
        *WEATHER_ASK,
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "get_weather", "arguments": json.dumps({"city": "Paris"})}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "18 degrees celsius, sunny"},
    ]
    want = chat_text(qwen, openai_history, max_tokens=60, tool_choice="none",
                     tools=[{"type": "function", "function": {"name": t["name"], "description": t["description"],
                                                              "parameters": t["input_schema"]}} for t in TOOLS])
    assert [b.text for b in m.content] == [want.message.content]
    forced = claude(qwen).messages.create(model="m", max_tokens=120, tools=TOOLS,
                                          tool_choice={"type": "tool", "name": "get_weather"},
                                          messages=[{"role": "user", "content": "Hello!"}], **GREEDY)
    assert [b.name for b in forced.content if b.type == "tool_use"] == ["get_weather"]
