"""The official `openai` client against a real `tandem serve` on SmolLM2-135M."""

import httpx
import openai
import pytest

QUESTION = [{"role": "user", "content": "Name three colors of the rainbow."}]


def chat(client, model_id, messages=QUESTION, **kw):
    kw.setdefault("temperature", 0)
    kw.setdefault("max_tokens", 24)
    return client.chat.completions.create(model=model_id, messages=messages, **kw)


def test_chat(client, model_id):
    r = chat(client, model_id)
    choice = r.choices[0]
    assert r.object == "chat.completion"
    assert choice.message.role == "assistant"
    assert choice.message.content.strip()
    assert choice.finish_reason in ("stop", "length")
    assert r.usage.prompt_tokens > 0
    assert r.usage.completion_tokens > 0
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens


def test_completions(client, model_id):
    r = client.completions.create(model=model_id, prompt="The capital of France is", max_tokens=8, temperature=0)
    assert r.object == "text_completion"
    assert r.choices[0].text
    assert r.usage.completion_tokens <= 8


def test_max_tokens(client, model_id):
    r = chat(client, model_id, max_tokens=5, extra_body={"ignore_eos": True})
    assert r.usage.completion_tokens == 5
    assert r.choices[0].finish_reason == "length"


def test_streaming_with_usage_matches_whole_answer(client, model_id):
    whole = chat(client, model_id, max_tokens=32).choices[0].message.content
    chunks = list(chat(client, model_id, max_tokens=32, stream=True, stream_options={"include_usage": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole
    finals = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert len(finals) == 1
    usage = chunks[-1].usage
    assert chunks[-1].choices == [] and usage is not None
    assert usage.completion_tokens > 0 and usage.prompt_tokens > 0
    assert all(c.usage is None for c in chunks[:-1])


def test_streamed_completions(client, model_id):
    whole = client.completions.create(model=model_id, prompt="Once upon a time", max_tokens=16, temperature=0)
    stream = client.completions.create(
        model=model_id, prompt="Once upon a time", max_tokens=16, temperature=0, stream=True
    )
    assert "".join(c.choices[0].text for c in stream if c.choices) == whole.choices[0].text


def test_stop_strings_are_held_back_across_chunks(client, model_id):
    full = chat(client, model_id, max_tokens=40, extra_body={"ignore_eos": True}).choices[0].message.content
    words = full.split()
    assert len(words) > 4, full
    # A stop string of two words spans several tokens, so several stream chunks.
    stop = " ".join(words[2:4])
    want = full[: full.index(stop)]
    r = chat(client, model_id, max_tokens=40, stop=[stop, "@@never@@"])
    assert r.choices[0].message.content == want
    assert r.choices[0].finish_reason == "stop"
    streamed = chat(client, model_id, max_tokens=40, stop=stop, stream=True)
    assert "".join(c.choices[0].delta.content or "" for c in streamed if c.choices) == want


def test_stop_strings_past_the_cap_are_refused_and_the_largest_allowed_work(client, model_id):
    full = chat(client, model_id, max_tokens=40, extra_body={"ignore_eos": True}).choices[0].message.content
    stop = " ".join(full.split()[2:4])
    for stops in (["x" * (1 << 20) + str(i) for i in range(16)], [f"@{i}@" for i in range(17)]):
        with pytest.raises(openai.BadRequestError) as e:
            chat(client, model_id, max_tokens=4, extra_body={"stop": stops})
        assert e.value.body["param"] == "stop", e.value.body
    # 15 strings of 1 KiB and the answer's own stop: near the 16 KiB allowed.
    stops = ["@" * 1023 + str(i % 10) for i in range(15)] + [stop]
    r = chat(client, model_id, max_tokens=40, extra_body={"stop": stops})
    assert r.choices[0].message.content == full[: full.index(stop)]
    assert r.choices[0].finish_reason == "stop"


def test_logprobs(client, model_id):
    r = chat(client, model_id, max_tokens=6, logprobs=True, top_logprobs=3, extra_body={"ignore_eos": True})
    content = r.choices[0].logprobs.content
    assert len(content) == 6
    for t in content:
        assert t.logprob <= 0
        assert len(t.top_logprobs) == 3
        # Greedy: the chosen token is the most likely one.
        assert t.top_logprobs[0].logprob == pytest.approx(t.logprob, abs=1e-6)
        assert t.top_logprobs[0].logprob >= t.top_logprobs[1].logprob >= t.top_logprobs[2].logprob
    assert "".join(t.token for t in content) == r.choices[0].message.content
    c = client.completions.create(model=model_id, prompt="1, 2, 3,", max_tokens=4, temperature=0, logprobs=2)
    lp = c.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == 4
    assert all(len(alts) == 2 for alts in lp.top_logprobs)


def test_invalid_request_names_the_field(client, model_id):
    with pytest.raises(openai.BadRequestError) as e:
        chat(client, model_id, temperature=-1)
    assert e.value.status_code == 400
    assert e.value.param == "temperature"
    assert "temperature" in e.value.message
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=model_id, messages=[{"role": "user"}], max_tokens=3, extra_body={"top_k": "many"})
    assert e.value.param == "top_k"
    with pytest.raises(openai.BadRequestError) as e:
        chat(client, model_id, messages=[{"content": "no role"}])
    assert e.value.param == "messages[0]"
    with pytest.raises(openai.BadRequestError) as e:
        chat(client, model_id, messages=[{"role": "user", "content": "hi"}, {"role": "wizard", "content": "x"}])
    assert e.value.param == "messages[1].role"
    assert "wizard" in e.value.message


@pytest.mark.parametrize("body", [b"{not json", b"[1, 2]", b'"text"', b"42"])
def test_bad_json_is_a_400_with_an_openai_error_body(server, body):
    r = httpx.post(
        server.url + "/v1/chat/completions",
        content=body,
        headers={"Authorization": "Bearer test-key-123", "Content-Type": "application/json"},
    )
    assert r.status_code == 400
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert err["type"] == "invalid_request_error"
    if body != b"{not json":
        assert "JSON object" in err["message"]


def test_wrong_or_missing_api_key_is_401(server, model_id):
    with pytest.raises(openai.AuthenticationError) as e:
        chat(server.client(api_key="wrong"), model_id)
    assert e.value.status_code == 401
    r = httpx.post(server.url + "/v1/completions", json={"prompt": "hi", "max_tokens": 1})
    assert r.status_code == 401 and r.json()["error"]["type"] == "authentication_error"
    r = httpx.post(
        server.url + "/v1/completions", json={"prompt": "hi", "max_tokens": 1}, headers={"X-Api-Key": "test-key-123"}
    )
    assert r.status_code == 200
    assert httpx.get(server.url + "/health").json() == {"status": "ok"}


def test_models(client, model_id):
    assert model_id == "SmolLM2-135M-Instruct.Q4_1"


def test_only_a_prompt_that_does_not_fit_is_refused():
    """As llama-server: max_tokens past the slot's end is not an error (the answer stops there
    with `length`); a prompt that leaves no room is a 400 of type exceed_context_size_error with
    its sizes; n_predict wins over max_tokens on the OpenAI routes too."""
    from conftest import Server

    s = Server("-c", "256", "-np", "1")
    try:
        c = s.client()
        r = c.completions.create(model="m", prompt="Count: 1, 2, 3,", max_tokens=100000, temperature=0,
                                 extra_body={"ignore_eos": True})
        assert r.choices[0].finish_reason == "length"
        assert r.usage.prompt_tokens + r.usage.completion_tokens == 256
        with pytest.raises(openai.BadRequestError) as e:
            c.completions.create(model="m", prompt="word " * 400, max_tokens=1)
        err = e.value.body
        assert err["type"] == "exceed_context_size_error" and err["n_ctx"] == 256, err
        assert err["n_prompt_tokens"] >= 256 and err["param"] == "prompt", err
        r = c.chat.completions.create(model="m", messages=QUESTION, max_tokens=30, temperature=0,
                                      extra_body={"n_predict": 3, "ignore_eos": True})
        assert r.usage.completion_tokens == 3 and r.choices[0].finish_reason == "length"
    finally:
        s.stop()


def test_a_model_by_id_and_json_errors_for_404_and_405(server, client, model_id):
    m = client.models.retrieve(model_id)
    assert m.id == model_id and m.object == "model"
    with pytest.raises(openai.NotFoundError) as e:
        client.models.retrieve("no-such-model")
    assert "no-such-model" in e.value.message
    for method, path, status in [("GET", "/v1/no-such-route", 404), ("GET", "/v1/chat/completions", 405),
                                 ("DELETE", "/v1/models", 405)]:
        r = httpx.request(method, server.url + path, headers={"Authorization": "Bearer test-key-123"}, timeout=30)
        assert r.status_code == status, (method, path, r.status_code)
        assert r.json()["error"]["code"] == status, r.text
