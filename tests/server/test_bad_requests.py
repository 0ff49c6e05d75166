"""A thousand malformed requests, generated from a fixed seed: wrong types, huge and negative
numbers, empty and broken messages, invalid UTF-8, truncated JSON, bodies that are not
objects, a wrong content type and a 10 MB body. Every one is a 4xx with an OpenAI error
body; afterwards a normal request is served and every slot is idle."""

import json
import random

import httpx

from conftest import API_KEY

VALID = {"model": "m", "messages": [{"role": "user", "content": "Hello there"}], "max_tokens": 4}

# Values that are invalid for each field whatever else the request holds.
BAD_VALUES = {
    "max_tokens": ["ten", -1, 0, 1e30, 10**20, [], {}, True, 2.5],
    "temperature": ["hot", -1, [], {}, True],
    "top_p": ["x", [], -0.5],
    "top_k": ["many", [], 1.5],
    "min_p": ["x", {}],
    "n": [0, 17, "two", -1],
    "stream": ["yes", 5, []],
    "stop": [5, [1, 2], {"a": 1}],
    "seed": ["x", [], 1.5],
    "logprobs": ["yes", [], 5.5],
    "top_logprobs": ["x", -1, 10**6],
    "messages": ["hi", 5, [], {}, [5], [[]], None],
    "stream_options": [5, "x"],
}
BAD_MESSAGES = [
    [{"content": "no role"}],
    [{"role": 5, "content": "x"}],
    [{"role": "wizard", "content": "x"}],
    [{"role": None, "content": "x"}],
    [{"role": "user", "content": 5}],
    [{"role": "user", "content": {"a": 1}}],
    [{"role": "user", "content": [5]}],
    [{"role": "user", "content": [{"type": 5}]}],
]


def malformed(rng):
    """One malformed request: (body bytes, content type)."""
    kind = rng.randrange(6)
    body = dict(VALID)
    if kind == 0:
        field = rng.choice(sorted(BAD_VALUES))
        body[field] = rng.choice(BAD_VALUES[field])
    elif kind == 1:
        body["messages"] = rng.choice(BAD_MESSAGES)
    elif kind == 2:
        text = json.dumps(body).encode()
        return text[: rng.randrange(1, len(text) - 1)], "application/json"
    elif kind == 3:
        text = json.dumps(body).encode().replace(b"Hello", bytes([0xFF, 0xFE, rng.randrange(0x80, 0xC0)]))
        return text, "application/json"
    elif kind == 4:
        return rng.choice([b"[1, 2]", b'"text"', b"42", b"null", b"", b"   "]), "application/json"
    else:
        return json.dumps(body).encode(), rng.choice(["text/plain", "application/x-www-form-urlencoded", "image/png"])
    return json.dumps(body).encode(), "application/json"


def post(server, path, content, content_type):
    return httpx.post(
        server.url + path,
        content=content,
        headers={"Authorization": f"Bearer {API_KEY}", "Content-Type": content_type},
        timeout=60,
    )


def test_a_thousand_malformed_requests_are_4xx_and_lose_nothing(server):
    rng = random.Random(20261130)
    for i in range(1000):
        content, ctype = malformed(rng)
        path = "/v1/chat/completions" if i % 4 else "/chat/completions"
        r = post(server, path, content, ctype)
        assert 400 <= r.status_code < 500, (i, content[:200], ctype, r.status_code, r.text[:300])
        err = r.json()["error"]
        assert set(err) >= {"message", "type", "param", "code"} and err["message"], (i, r.text)
    big = json.dumps({**VALID, "messages": [{"role": "user", "content": "word " * 2_000_000}]}).encode()
    r = post(server, "/v1/chat/completions", big, "application/json")
    assert 400 <= r.status_code < 500 and r.json()["error"]["message"]
    r = post(server, "/v1/chat/completions", json.dumps(VALID).encode(), "application/json")
    assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"] is not None
    assert all(not s["is_processing"] for s in server.get("/slots").json())
