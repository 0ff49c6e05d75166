"""Several choices in one answer, with the official `openai` client: `n` choices of a prompt each draw
from their own seed stream (seed + i), hold the first choice's prompt KV blocks instead of computing
the prompt again (their cached tokens), and stream interleaved with one usage chunk and one [DONE];
/v1/completions takes lists of prompts (texts and token lists mixed), choices in OpenAI's order, and
/completion several prompts (an array of answers) and texts and ids mixed in one prompt."""

import json

import httpx
import pytest

ASK = [{"role": "user", "content": "Write a short poem about the sea and the sky."}]


def chat(server, **kw):
    return server.client().chat.completions.create(**{"model": "m", "messages": ASK, "max_tokens": 24, **kw})


def test_n_choices_are_their_own_seeds_and_share_the_prompt(server):
    r = chat(server, n=3, temperature=1.0, seed=40)
    assert [c.index for c in r.choices] == [0, 1, 2]
    texts = [c.message.content for c in r.choices]
    for i, t in enumerate(texts):
        alone = chat(server, temperature=1.0, seed=40 + i, extra_body={"cache_prompt": False})
        assert alone.choices[0].message.content == t
    assert len(set(texts)) > 1
    prompt = chat(server, max_tokens=1, extra_body={"cache_prompt": False}).usage.prompt_tokens
    assert r.usage.prompt_tokens == prompt
    # The second and third choices held the first's full prompt blocks.
    assert r.usage.prompt_tokens_details.cached_tokens >= 2 * ((prompt - 1) // 16 * 16)
    assert r.usage.completion_tokens == sum(
        chat(server, temperature=1.0, seed=40 + i).usage.completion_tokens for i in range(3))


def test_streamed_choices_interleave_and_end_once(server):
    whole = chat(server, n=2, temperature=1.0, seed=7)
    stream = chat(server, n=2, temperature=1.0, seed=7, stream=True, stream_options={"include_usage": True})
    texts, usages = ["", ""], []
    for chunk in stream:
        if chunk.usage:
            usages.append(chunk.usage)
        for c in chunk.choices:
            texts[c.index] += c.delta.content or ""
    assert texts == [c.message.content for c in whole.choices]
    assert len(usages) == 1 and usages[0].completion_tokens == whole.usage.completion_tokens


def test_completions_take_lists_of_prompts(server):
    c = server.client()
    ids = server.post("/tokenize", json={"content": "The moon is"}).json()["tokens"]
    r = c.completions.create(model="m", prompt=["The sea is", ids], n=2, max_tokens=8, temperature=0)
    assert [ch.index for ch in r.choices] == [0, 1, 2, 3]
    first = c.completions.create(model="m", prompt="The sea is", max_tokens=8, temperature=0).choices[0].text
    second = c.completions.create(model="m", prompt="The moon is", max_tokens=8, temperature=0).choices[0].text
    assert [ch.text for ch in r.choices] == [first, first, second, second]


@pytest.mark.parametrize("route, body, field", [
    ("/v1/chat/completions", {"messages": ASK, "n": 17}, "n"),
    ("/v1/completions", {"prompt": ["a"] * 9, "n": 2}, "prompt"),
    ("/completion", {"prompt": "a", "n": 2}, "n"),
    ("/v1/completions", {"prompt": ["a", []]}, "prompt[1]"),
])
def test_too_many_choices_are_400s(server, route, body, field):
    r = server.post(route, json={"model": "m", **body})
    assert r.status_code == 400 and r.json()["error"]["param"] == field, r.text


def test_completion_takes_several_prompts_and_mixed_ones(server):
    one = server.post("/completion", json={"prompt": "The sea is", "n_predict": 6, "temperature": 0}).json()
    two = server.post("/completion", json={"prompt": "The moon is", "n_predict": 6, "temperature": 0}).json()
    both = server.post("/completion", json={"prompt": ["The sea is", "The moon is"], "n_predict": 6,
                                            "temperature": 0}).json()
    assert [b["index"] for b in both] == [0, 1]
    assert [b["content"] for b in both] == [one["content"], two["content"]]
    assert [b["tokens_evaluated"] for b in both] == [one["tokens_evaluated"], two["tokens_evaluated"]]
    # Texts and token ids mixed in one list are one prompt, as llama-server reads it.
    ids = server.post("/tokenize", json={"content": " is"}).json()["tokens"]
    mixed = server.post("/completion", json={"prompt": ["The sea", *ids], "n_predict": 6, "temperature": 0}).json()
    assert mixed["content"] == one["content"] and mixed["tokens_evaluated"] == one["tokens_evaluated"]
    chunks = []
    with httpx.stream("POST", server.url + "/completion", headers={"Authorization": "Bearer test-key-123"},
                      json={"prompt": ["The sea is", "The moon is"], "n_predict": 6, "temperature": 0,
                            "stream": True}, timeout=60) as r:
        for line in r.iter_lines():
            if line.startswith("data: "):
                chunks.append(json.loads(line[6:]))
    texts = ["", ""]
    for c in chunks:
        texts[c["index"]] += c["content"]
    assert texts == [one["content"], two["content"]]
    assert sum(1 for c in chunks if c["stop"]) == 2
