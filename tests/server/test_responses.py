"""OpenAI's Responses API with the official `openai` client: the answer is the chat route's answer to
the same conversation (instructions, text or items), whole and streamed as the Responses events the
client assembles; a short max_output_tokens gives an incomplete response; text.format follows a
JSON schema; on Qwen2.5-Coder-0.5B function tools give function_call items, streamed or not, and
function_call_output items in the input get the chat route's text answer; a stored response is
retrieved, continued with previous_response_id (the chat route's answer to the whole conversation),
deleted, and invisible to another key; what cannot be honored (built-in tools, reasoning options) is a
400 naming the field."""

import json

import jsonschema
import pytest

from conftest import Server
from test_tools import WEATHER

SYSTEM = "You are a terse assistant."
ASK = "Name three colors of the rainbow."


def chat_text(server, messages, max_tokens=32, **kw):
    r = server.client().chat.completions.create(
        model="m", messages=messages, max_tokens=max_tokens, temperature=0, **kw)
    return r.choices[0]


def respond(server, **kw):
    args = dict(model="m", instructions=SYSTEM, input=ASK, max_output_tokens=32, temperature=0, store=False)
    args.update(kw)
    return server.client().responses.create(**args)


def test_a_response_is_the_chat_routes_answer(server):
    r = respond(server)
    want = chat_text(server, [{"role": "system", "content": SYSTEM}, {"role": "user", "content": ASK}])
    assert r.object == "response" and r.id.startswith("resp_")
    assert r.output_text == want.message.content
    assert [o.type for o in r.output] == ["message"]
    assert r.status == {"stop": "completed", "length": "incomplete"}[want.finish_reason]
    assert r.usage.input_tokens > 10 and r.usage.output_tokens > 0
    assert r.instructions == SYSTEM and r.max_output_tokens == 32


def test_input_items_are_the_same_conversation(server):
    items = [{"role": "user", "content": [{"type": "input_text", "text": ASK}]}]
    assert respond(server, input=items).output_text == respond(server).output_text


def test_a_short_limit_gives_an_incomplete_response(server):
    r = respond(server, max_output_tokens=3)
    assert r.status == "incomplete" and r.incomplete_details.reason == "max_output_tokens"


def test_a_streamed_response_is_the_whole_response(server):
    whole = respond(server)
    events = list(respond(server, stream=True))
    kinds = [e.type for e in events]
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[-1] in ("response.completed", "response.incomplete")
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == whole.output_text
    assert events[-1].response.output_text == whole.output_text
    # The client's helper wants response.completed: a limit the answer does not reach.
    whole = respond(server, max_output_tokens=200)
    assert whole.status == "completed"
    with server.client().responses.stream(model="m", instructions=SYSTEM, input=ASK, max_output_tokens=200,
                                          temperature=0) as stream:
        final = stream.get_final_response()
    assert final.output_text == whole.output_text


def test_a_text_format_is_followed(server):
    schema = {"type": "object", "properties": {"colors": {"type": "array", "items": {"type": "string"},
                                                          "minItems": 3, "maxItems": 3}},
              "required": ["colors"], "additionalProperties": False}
    r = respond(server, max_output_tokens=80,
                text={"format": {"type": "json_schema", "name": "colors", "schema": schema}})
    jsonschema.validate(json.loads(r.output_text), schema)


@pytest.mark.parametrize("extra, field", [
    ({"previous_response_id": "resp_1"}, "previous_response_id"),
    ({"tools": [{"type": "web_search"}]}, "tools[0]"),
    ({"reasoning": {"effort": "low"}}, "reasoning"),
    ({"max_output_tokens": 0}, "max_output_tokens"),
])
def test_what_cannot_be_honored_is_a_400_naming_it(server, extra, field):
    r = server.post("/v1/responses", json={"model": "m", "input": ASK, **extra})
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert field in err["message"] and err["param"].startswith(field.split("[")[0]), err


def test_a_stored_response_is_retrieved_continued_and_deleted(server):
    c = server.client()
    first = c.responses.create(model="m", input="My name is Ada. Say hello to me.", max_output_tokens=24,
                               temperature=0)
    assert first.store and c.responses.retrieve(first.id).output_text == first.output_text
    second = c.responses.create(model="m", previous_response_id=first.id, input="What is my name?",
                                max_output_tokens=24, temperature=0)
    assert second.previous_response_id == first.id
    want = chat_text(server, [{"role": "user", "content": "My name is Ada. Say hello to me."},
                              {"role": "assistant", "content": first.output_text},
                              {"role": "user", "content": "What is my name?"}], max_tokens=24)
    assert second.output_text == want.message.content
    c.responses.delete(second.id)
    assert server.get(f"/v1/responses/{second.id}").status_code == 404
    unstored = respond(server, store=False)
    assert server.get(f"/v1/responses/{unstored.id}").status_code == 404


def test_another_key_cannot_see_a_stored_response():
    s = Server("-c", "1024", "-np", "1", "--api-key", "alice,bob")
    try:
        import openai
        alice = openai.OpenAI(base_url=s.url + "/v1", api_key="alice", max_retries=0)
        bob = openai.OpenAI(base_url=s.url + "/v1", api_key="bob", max_retries=0)
        r = alice.responses.create(model="m", input="Hello", max_output_tokens=4)
        assert alice.responses.retrieve(r.id).id == r.id
        with pytest.raises(openai.NotFoundError):
            bob.responses.retrieve(r.id)
        with pytest.raises(openai.BadRequestError):
            bob.responses.create(model="m", input="Hi", previous_response_id=r.id, max_output_tokens=4)
    finally:
        s.stop()


TOOLS = [{"type": "function", "name": "get_weather", "description": "Get the current weather in a city",
          "parameters": WEATHER}]
WEATHER_ASK = "What is the weather like in Paris today?"


@pytest.fixture(scope="module")
def qwen():
    s = Server("-c", "8192", "-np", "2", model="qwen2.5-coder-0.5b")
    yield s
    s.stop()


def test_function_tools_give_function_call_items(qwen):
    r = qwen.client().responses.create(model="m", input=WEATHER_ASK, tools=TOOLS, temperature=0,
                                       max_output_tokens=120)
    calls = [o for o in r.output if o.type == "function_call"]
    assert calls and calls[0].name == "get_weather" and calls[0].call_id
    jsonschema.validate(json.loads(calls[0].arguments), WEATHER)
    with qwen.client().responses.stream(model="m", input=WEATHER_ASK, tools=TOOLS, temperature=0,
                                        max_output_tokens=120) as stream:
        final = stream.get_final_response()
    streamed = [o for o in final.output if o.type == "function_call"]
    assert [(c.name, c.arguments) for c in streamed] == [(c.name, c.arguments) for c in calls]


def test_function_call_output_gets_the_chat_routes_answer(qwen):
    args = json.dumps({"city": "Paris"})
    items = [
        {"role": "user", "content": WEATHER_ASK},
        {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": args},
        {"type": "function_call_output", "call_id": "call_1", "output": "18 degrees celsius, sunny"},
    ]
    r = qwen.client().responses.create(model="m", input=items, tools=TOOLS, tool_choice="none",
                                       temperature=0, max_output_tokens=60)
    history = [
        {"role": "user", "content": WEATHER_ASK},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": args}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "18 degrees celsius, sunny"},
    ]
    chat_tools = [{"type": "function", "function": {k: t[k] for k in ("name", "description", "parameters")}}
                  for t in TOOLS]
    want = chat_text(qwen, history, max_tokens=60, tools=chat_tools, tool_choice="none")
    assert r.output_text == want.message.content
