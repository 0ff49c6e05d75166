"""Embeddings with the official `openai` client on Qwen2.5-Coder-0.5B (`--embeddings --pooling
mean`): a text's vector is the same bits alone and in a batch of 8 (computed in the same engine
steps as other requests), unit length; cosine similarity ranks a paraphrase above an unrelated
sentence; base64 is the same floats; token inputs equal their text; llama-server's /embedding
gives unnormalized and per-token vectors; a server without --embeddings answers 501."""

import base64
import math
import struct

import pytest

from conftest import Server

TEXTS = [
    "The cat sat on the mat.",
    "A cat was sitting on the rug.",
    "Quarterly revenue grew by eight percent.",
    "def add(a, b): return a + b",
    "Paris is the capital of France.",
    "The stock market fell sharply today.",
    "Water boils at one hundred degrees Celsius.",
    "She plays the violin every evening.",
]


@pytest.fixture(scope="module")
def qwen():
    s = Server("-c", "4096", "-np", "4", "--embeddings", "--pooling", "mean", model="qwen2.5-coder-0.5b")
    yield s
    s.stop()


def embed(server, input, **kw):
    return server.client().embeddings.create(model="m", input=input, **kw)


def cosine(a, b):
    return sum(x * y for x, y in zip(a, b)) / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))


def test_a_vector_is_the_same_alone_and_in_a_batch_of_8(qwen):
    batch = embed(qwen, TEXTS)
    assert [d.index for d in batch.data] == list(range(8))
    for i in (0, 5):
        assert embed(qwen, TEXTS[i]).data[0].embedding == batch.data[i].embedding
    for d in batch.data:
        assert len(d.embedding) == 896
        assert abs(math.sqrt(sum(x * x for x in d.embedding)) - 1) < 1e-5
    assert batch.usage.prompt_tokens > 8


def test_a_paraphrase_ranks_above_an_unrelated_sentence(qwen):
    cat, paraphrase, revenue = (d.embedding for d in embed(qwen, TEXTS[:3]).data)
    assert cosine(cat, paraphrase) > cosine(cat, revenue)


def test_base64_and_token_inputs(qwen):
    floats = embed(qwen, TEXTS[0]).data[0].embedding
    raw = qwen.post("/v1/embeddings", json={"model": "m", "input": TEXTS[0], "encoding_format": "base64"})
    packed = base64.b64decode(raw.json()["data"][0]["embedding"])
    assert list(struct.unpack(f"<{len(packed) // 4}f", packed)) == floats
    ids = qwen.post("/tokenize", json={"content": TEXTS[0], "add_special": True}).json()["tokens"]
    assert embed(qwen, [ids]).data[0].embedding == floats


def test_llama_servers_embedding_route(qwen):
    plain = qwen.post("/embedding", json={"content": TEXTS[0], "embd_normalize": -1}).json()
    unit = qwen.post("/embedding", json={"content": TEXTS[0]}).json()
    v, u = plain[0]["embedding"][0], unit[0]["embedding"][0]
    norm = math.sqrt(sum(x * x for x in v))
    assert norm > 1.5 and all(abs(x / norm - y) < 1e-5 for x, y in zip(v, u))


@pytest.mark.parametrize("body, field", [
    ({"input": ""}, "input[0]"),
    ({"input": TEXTS[0], "dimensions": 64}, "dimensions"),
    ({"input": TEXTS[0], "encoding_format": "int8"}, "encoding_format"),
    ({"input": [[10 ** 9]]}, "input[0]"),
])
def test_bad_inputs_are_400s_naming_the_field(qwen, body, field):
    r = qwen.post("/v1/embeddings", json={"model": "m", **body})
    assert r.status_code == 400 and r.json()["error"]["param"] == field, r.text


def test_without_embeddings_the_routes_answer_501(server):
    r = server.post("/v1/embeddings", json={"model": "m", "input": "hi"})
    assert r.status_code == 501 and "--embeddings" in r.json()["error"]["message"], r.text


def test_pooling_none_gives_a_vector_per_token_on_embedding_only():
    s = Server("-c", "1024", "-np", "2", "--embeddings")
    try:
        assert "embeddings: pooling None" in s.output()
        r = s.post("/v1/embeddings", json={"model": "m", "input": TEXTS[0]})
        assert r.status_code == 400 and "pooling 'none'" in r.json()["error"]["message"], r.text
        ids = s.post("/tokenize", json={"content": TEXTS[0], "add_special": True}).json()["tokens"]
        vectors = s.post("/embedding", json={"content": TEXTS[0]}).json()[0]["embedding"]
        assert len(vectors) == len(ids) and len(vectors[0]) == 576
    finally:
        s.stop()
