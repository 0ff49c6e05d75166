"""Ollama's API with the official `ollama` Python client, on Qwen2.5-Coder-0.5B behind an API
key (`--embeddings --pooling mean`): list, show, ps and version describe the served model; chat
and generate, streamed and not, give the greedy text the OpenAI route gives; tool calls come
back with their arguments as objects, and a history with calls and results renders as the
OpenAI form of it does; a JSON schema holds; generate's `context` is the prompt's and answer's
tokens and continues; fill-in-the-middle through `suffix`; embed equals /v1/embeddings;
`keep_alive: 0` unloads and the next request reloads with the same text; `num_ctx` caps the
answer; a model that is not there is a 404 naming it and bad options are 400s naming them."""

import json
import math
import time

import jsonschema
import ollama
import pytest

from conftest import API_KEY, Server

WEATHER = {
    "type": "object",
    "properties": {"city": {"type": "string"}},
    "required": ["city"],
}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Get the current weather in a city",
                                           "parameters": WEATHER}}]
ASK = [{"role": "user", "content": "What is the weather like in Paris today?"}]
GREEDY = {"temperature": 0, "num_predict": 24}


@pytest.fixture(scope="module")
def qwen():
    s = Server("-c", "1024", "-np", "2", "--embeddings", "--pooling", "mean", "--api-key", API_KEY,
               model="qwen2.5-coder-0.5b")
    yield s
    s.stop()


@pytest.fixture(scope="module")
def ol(qwen):
    return ollama.Client(host=qwen.url, headers={"Authorization": f"Bearer {API_KEY}"})


@pytest.fixture(scope="module")
def name(ol):
    return ol.list().models[0].model


def test_list_show_ps_and_version_describe_the_served_model(ol, name, qwen):
    models = ol.list().models
    assert len(models) == 1
    served = qwen.client().models.list().data[0].id
    assert name == served + ":latest"
    assert models[0].details.format == "gguf" and models[0].details.family == "qwen2"
    assert models[0].details.quantization_level == "Q4_K_M"
    assert models[0].details.parameter_size.endswith("M")
    shown = ol.show(name)
    assert {"completion", "tools", "insert", "embedding"} <= set(shown.capabilities)
    assert shown.modelinfo["general.architecture"] == "qwen2"
    assert shown.modelinfo["qwen2.context_length"] == 32768
    assert "<|im_start|>" in shown.template
    assert shown.modelinfo["tokenizer.ggml.tokens"] is None
    verbose = qwen.post("/api/show", {"model": name, "verbose": True}).json()["model_info"]
    assert len(verbose["tokenizer.ggml.tokens"]) == 151936 and verbose["tokenizer.ggml.tokens"][0] == "!"
    running = ol.ps().models
    assert [m.model for m in running] == [name] and running[0].context_length == 512
    assert qwen.get("/api/version").json()["version"].count(".") == 2


def test_chat_streamed_and_whole_give_the_openai_routes_greedy_text(ol, name, qwen):
    msgs = [{"role": "user", "content": "Write a long essay about the history of the sea."}]
    whole = ol.chat(model=name, messages=msgs, options=GREEDY)
    parts = list(ol.chat(model=name, messages=msgs, options=GREEDY, stream=True))
    assert all(not p.done for p in parts[:-1]) and parts[-1].done
    assert "".join(p.message.content for p in parts) == whole.message.content
    assert whole.done_reason == parts[-1].done_reason == "length"
    assert whole.eval_count == 24 and whole.prompt_eval_count > 0 and whole.total_duration > 0
    openai = qwen.client().chat.completions.create(model="m", messages=msgs, temperature=0, max_tokens=24)
    assert whole.message.content == openai.choices[0].message.content
    assert whole.message.role == "assistant"


def test_generate_is_a_one_message_chat_and_its_context_continues(ol, name, qwen):
    prompt = "Name a prime number."
    g = ol.generate(model=name, prompt=prompt, options=GREEDY)
    c = ol.chat(model=name, messages=[{"role": "user", "content": prompt}], options=GREEDY)
    assert g.response == c.message.content
    text = qwen.post("/detokenize", {"tokens": g.context}).json()["content"]
    assert text.endswith(g.response) and prompt in text
    more = ol.generate(model=name, prompt="And another one?", context=g.context, options=GREEDY)
    assert more.response and more.context[: len(g.context)] == g.context
    raw = ol.generate(model=name, prompt="def fib(n):", raw=True, options=GREEDY)
    native = qwen.post("/completion", {"prompt": "def fib(n):", "temperature": 0, "n_predict": 24}).json()
    assert raw.response == native["content"]


def test_fill_in_the_middle_through_suffix(ol, name, qwen):
    g = ol.generate(model=name, prompt="def add(a, b):\n    ", suffix="\n\nprint(add(1, 2))\n",
                    options={"temperature": 0, "num_predict": 12})
    infill = qwen.post("/infill", {"input_prefix": "def add(a, b):\n    ", "input_suffix": "\n\nprint(add(1, 2))\n",
                                   "temperature": 0, "n_predict": 12}).json()
    assert g.response == infill["content"] and "return" in g.response


def test_tool_calls_come_back_as_objects(ol, name):
    r = ol.chat(model=name, messages=ASK, tools=TOOLS, options={"temperature": 0, "num_predict": 120})
    calls = r.message.tool_calls
    assert calls and calls[0].function.name == "get_weather", r.message
    assert isinstance(calls[0].function.arguments, dict)
    jsonschema.validate(calls[0].function.arguments, WEATHER)
    parts = list(ol.chat(model=name, messages=ASK, tools=TOOLS, stream=True,
                         options={"temperature": 0, "num_predict": 120}))
    streamed = [c for p in parts for c in (p.message.tool_calls or [])]
    assert [c.function.arguments for c in streamed] == [c.function.arguments for c in calls]


def test_a_history_with_calls_and_results_renders_as_its_openai_form(ol, name, qwen):
    args = {"city": "Paris"}
    history = ASK + [
        {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "get_weather", "arguments": args}}]},
        {"role": "tool", "tool_name": "get_weather", "content": "18 C and sunny"},
    ]
    r = ol.chat(model=name, messages=history, tools=TOOLS, options=GREEDY)
    openai_form = ASK + [
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "call_1_0", "type": "function", "function": {"name": "get_weather", "arguments": json.dumps(args)}}]},
        {"role": "tool", "tool_call_id": "call_1_0", "name": "get_weather", "content": "18 C and sunny"},
    ]
    o = qwen.client().chat.completions.create(model="m", messages=openai_form, tools=TOOLS, temperature=0,
                                              max_tokens=24)
    theirs = o.choices[0].message
    assert (r.message.content or None) == theirs.content
    mine = [(c.function.name, c.function.arguments) for c in r.message.tool_calls or []]
    assert mine == [(c.function.name, json.loads(c.function.arguments)) for c in theirs.tool_calls or []]


def test_a_json_schema_format_holds(ol, name):
    schema = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
              "required": ["name", "age"]}
    r = ol.chat(model=name, messages=[{"role": "user", "content": "Invent a person as JSON."}], format=schema,
                options={"temperature": 0, "num_predict": 80})
    jsonschema.validate(json.loads(r.message.content), schema)
    j = ol.generate(model=name, prompt="Give a JSON object with a key x.", format="json",
                    options={"temperature": 0, "num_predict": 60})
    assert isinstance(json.loads(j.response), dict)


def test_embed_equals_the_openai_route(ol, name, qwen):
    texts = ["The cat sat on the mat.", "Paris is the capital of France."]
    e = ol.embed(model=name, input=texts)
    assert len(e.embeddings) == 2 and e.prompt_eval_count > 0
    o = qwen.client().embeddings.create(model="m", input=texts)
    for mine, theirs in zip(e.embeddings, o.data):
        assert mine == theirs.embedding
        assert math.isclose(math.sqrt(sum(x * x for x in mine)), 1.0, rel_tol=1e-4)
    legacy = ol.embeddings(model=name, prompt=texts[0]).embedding
    norm = math.sqrt(sum(x * x for x in legacy))
    assert abs(norm - 1.0) > 1e-3, "the legacy route gives the vector as pooled, not normalized"
    assert all(abs(x / norm - y) < 1e-6 for x, y in zip(legacy, e.embeddings[0]))


def test_embed_truncates_a_long_input_unless_told_not_to(ol, name, qwen):
    text = "The quick brown fox jumps over the lazy dog. " * 300
    ids = qwen.post("/tokenize", {"content": text}).json()["tokens"]
    slot = qwen.get("/props").json()["default_generation_settings"]["n_ctx"]
    assert len(ids) > slot
    cut = qwen.client().embeddings.create(model="m", input=[ids[:slot - 1]]).data[0].embedding
    assert ol.embed(model=name, input=text).embeddings[0] == cut
    with pytest.raises(ollama.ResponseError) as e:
        ol.embed(model=name, input=text, truncate=False)
    assert e.value.status_code == 400


def test_keep_alive_zero_unloads_and_the_next_request_reloads_with_the_same_text(ol, name, qwen):
    msgs = [{"role": "user", "content": "Count to five."}]
    before = ol.chat(model=name, messages=msgs, options=GREEDY).message.content
    unloaded = ol.generate(model=name, keep_alive=0)
    assert unloaded.done and unloaded.done_reason == "unload"
    for _ in range(100):
        if not ol.ps().models:
            break
        time.sleep(0.05)
    assert ol.ps().models == []
    assert qwen.get("/props").json()["is_sleeping"] is True
    after = ol.chat(model=name, messages=msgs, options=GREEDY, keep_alive="5m")
    assert after.message.content == before
    expires = ol.ps().models[0].expires_at
    assert expires is not None
    ol.embed(model=name, input="hello", keep_alive=0)
    for _ in range(100):
        if not ol.ps().models:
            break
        time.sleep(0.05)
    assert ol.ps().models == [], "an embed request's keep_alive 0 unloads too"
    loaded = ol.chat(model=name, messages=[])
    assert loaded.done_reason == "load"
    ol.chat(model=name, messages=msgs, options=GREEDY, keep_alive=-1)
    assert ol.ps().models[0].expires_at.year > 2200


def test_num_ctx_caps_the_answer(ol, name):
    msgs = [{"role": "user", "content": "Tell me a long story."}]
    full = ol.chat(model=name, messages=msgs, options={"temperature": 0, "num_predict": 40})
    n = full.prompt_eval_count
    capped = ol.chat(model=name, messages=msgs, options={"temperature": 0, "num_predict": 40, "num_ctx": n + 5})
    assert capped.eval_count == 5 and capped.done_reason == "length"
    assert full.message.content.startswith(capped.message.content)


@pytest.mark.parametrize("call, status, named", [
    (lambda ol, name: ol.chat(model="nope:7b", messages=ASK), 404, "nope:7b"),
    (lambda ol, name: ol.chat(model=name, messages=ASK, options={"temperature": 9}), 400, "options.temperature"),
    (lambda ol, name: ol.chat(model=name, messages=ASK, options={"num_gpu": 99}), 400, "options.num_gpu"),
    (lambda ol, name: ol.chat(model=name, messages=ASK, options={"num_ctx": 10 ** 6}), 400, "options.num_ctx"),
    (lambda ol, name: ol.chat(model=name, messages=ASK, think="high"), 400, "think"),
    (lambda ol, name: ol.chat(model=name, messages=[{"role": "user", "content": "x", "images": [b"\x89PNG"]}]),
     400, "messages[0].images"),
    (lambda ol, name: ol.generate(model=name, prompt="x", template="{{ .Prompt }}"), 400, "template"),
    (lambda ol, name: ol.generate(model=name, prompt="x", keep_alive="soon"), 400, "keep_alive"),
    (lambda ol, name: ol.pull("no-such-model"), 404, "no-such-model"),
    (lambda ol, name: ol.delete(name), 501, "tandem serves the models it was started with"),
])
def test_bad_requests_are_refused_naming_the_field(ol, name, call, status, named):
    with pytest.raises(ollama.ResponseError) as e:
        call(ol, name)
    assert e.value.status_code == status and named in str(e.value.error), e.value


def test_a_format_that_is_neither_json_nor_a_schema_is_refused(name, qwen):
    r = qwen.post("/api/chat", {"model": name, "messages": ASK, "format": "yaml"})
    assert r.status_code == 400 and "format" in r.json()["error"]


def test_pull_of_the_served_model_succeeds_and_the_key_is_required(ol, name, qwen):
    assert ol.pull(name).status == "success"
    assert [p.status for p in ol.pull(name, stream=True)][-1] == "success"
    with pytest.raises(ollama.ResponseError) as e:
        ollama.Client(host=qwen.url).list()
    assert e.value.status_code == 401
