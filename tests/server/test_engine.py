"""Many users at once: batch invariance, cancellation, the prefix cache, llama.cpp's routes."""

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

from conftest import ROOT, Server

PROMPTS = [
    "Write a short poem about the ocean.",
    "Explain what a binary search does.",
    "List three uses of copper.",
    "What is the boiling point of water?",
    "Give me a tip for learning to cook.",
    "Describe a cat in two sentences.",
    "Why is the sky blue?",
    "Name a famous painter and one painting.",
]


def greedy(client, model_id, prompt, max_tokens=48):
    r = client.chat.completions.create(
        model=model_id,
        messages=[{"role": "user", "content": prompt}],
        max_tokens=max_tokens,
        temperature=0,
        extra_body={"cache_prompt": False},
    )
    return r.choices[0].message.content


def test_greedy_text_is_identical_alone_and_with_seven_others(client, model_id):
    alone = [greedy(client, model_id, p) for p in PROMPTS[:2]]
    with ThreadPoolExecutor(8) as pool:
        together = list(pool.map(lambda p: greedy(client, model_id, p), PROMPTS))
    assert together[:2] == alone
    # And a second concurrent round agrees with the first, request by request.
    with ThreadPoolExecutor(8) as pool:
        again = list(pool.map(lambda p: greedy(client, model_id, p), reversed(PROMPTS)))
    assert list(reversed(again)) == together


def idle(server):
    slots = server.get("/slots").json()
    return all(not s["is_processing"] for s in slots), slots


def test_dropped_streams_free_every_slot_within_a_second(server, model_id):
    clients = []
    for i in range(4):
        c = httpx.Client(headers={"Authorization": "Bearer test-key-123"}, timeout=60)
        body = {
            "model": model_id,
            "messages": [{"role": "user", "content": PROMPTS[i]}],
            "max_tokens": 2000,
            "stream": True,
            "extra_body": None,
            "ignore_eos": True,
        }
        ctx = c.stream("POST", server.url + "/v1/chat/completions", json=body)
        resp = ctx.__enter__()
        lines = resp.iter_lines()
        got = 0
        for line in lines:
            if line.startswith("data: "):
                got += 1
            if got >= 3:
                break
        clients.append((c, ctx))
    busy, slots = idle(server)
    assert not busy, "the streams are mid-answer"
    for c, ctx in clients:
        ctx.__exit__(None, None, None)
        c.close()
    t0 = time.monotonic()
    while True:
        ok, slots = idle(server)
        if ok:
            break
        assert time.monotonic() - t0 < 1.0, f"slots still busy after 1 s: {slots}"
        time.sleep(0.02)
    assert greedy(server.client(), model_id, "Say hello.", max_tokens=4)


def test_resumed_conversation_reuses_the_prefix(client, model_id):
    prose = (ROOT / "tests" / "data" / "eval-prose.txt").read_text()
    n = 6600  # characters for roughly 1.5K tokens
    turn1 = [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "Summarize this text:\n\n" + prose[:n]},
    ]
    first = client.chat.completions.create(model=model_id, messages=turn1, max_tokens=16, temperature=0)
    answer = first.choices[0].message.content
    turn2 = turn1 + [
        {"role": "assistant", "content": answer},
        {"role": "user", "content": "Now say it in one sentence."},
    ]

    def ttft(cache_prompt):
        t0 = time.monotonic()
        stream = client.chat.completions.create(
            model=model_id,
            messages=turn2,
            max_tokens=4,
            temperature=0,
            stream=True,
            stream_options={"include_usage": True},
            extra_body={"cache_prompt": cache_prompt},
        )
        first_token = None
        usage = None
        for c in stream:
            if first_token is None and c.choices and c.choices[0].delta.content:
                first_token = time.monotonic() - t0
            if c.usage:
                usage = c.usage
        return first_token, usage

    warm, usage = ttft(True)
    assert usage.prompt_tokens > 1400, usage
    cached = usage.prompt_tokens_details.cached_tokens
    assert cached >= first.usage.prompt_tokens - 16, (cached, first.usage.prompt_tokens)
    cold, cold_usage = ttft(False)
    assert cold_usage.prompt_tokens_details.cached_tokens == 0
    assert warm <= 0.15 * cold, f"warm TTFT {warm:.3f} s vs cold {cold:.3f} s"


def test_native_completion_reports_timings(server):
    body = {"prompt": "The quick brown fox", "n_predict": 8, "temperature": 0, "ignore_eos": True}
    r = server.post("/completion", body).json()
    assert r["stop"] is True and r["stop_type"] == "limit" and r["tokens_predicted"] == 8
    t = r["timings"]
    for k in ["prompt_n", "prompt_ms", "prompt_per_second", "predicted_n", "predicted_ms",
              "predicted_per_second", "cache_n", "draft_n", "draft_n_accepted"]:
        assert k in t, k
    assert t["predicted_n"] == 8
    again = server.post("/completion", body).json()
    assert again["content"] == r["content"]
    assert again["timings"]["cache_n"] > 0 or r["tokens_evaluated"] < 17
    with httpx.stream("POST", server.url + "/completion", json={**body, "stream": True},
                      headers={"Authorization": "Bearer test-key-123"}) as s:
        import json
        events = [json.loads(l[6:]) for l in s.iter_lines() if l.startswith("data: ")]
    assert "".join(e["content"] for e in events) == r["content"]
    assert events[-1]["stop"] is True and "timings" in events[-1]


def test_tokenize_detokenize_template_props_metrics(server):
    toks = server.post("/tokenize", {"content": "Hello world"}).json()["tokens"]
    assert toks and all(isinstance(t, int) for t in toks)
    assert server.post("/detokenize", {"tokens": toks}).json()["content"] == "Hello world"
    r = server.post("/detokenize", {"tokens": [10**9]})
    assert r.status_code == 400 and r.json()["error"]["param"] == "tokens[0]"
    prompt = server.post("/apply-template", {"messages": [{"role": "user", "content": "hi"}]}).json()["prompt"]
    assert "hi" in prompt and prompt.rstrip().endswith("assistant")
    props = server.get("/props").json()
    assert props["total_slots"] == 8 and props["default_generation_settings"]["n_ctx"] == 8192
    assert len(server.get("/slots").json()) == 8
    m = server.get("/metrics").text
    for name in ["llamacpp:prompt_tokens_total", "llamacpp:tokens_predicted_total", "llamacpp:requests_processing",
                 "llamacpp:kv_cache_usage_ratio", "vllm:spec_decode_num_accepted_tokens"]:
        assert f"\n{name} " in m, name


def test_full_queue_is_503_with_retry_after_and_big_bodies_413():
    s = Server("-c", "512", "-np", "1", "--queue-limit", "1", "--body-limit", "4096")
    try:
        body = {"prompt": "Count: 1, 2,", "max_tokens": 200, "ignore_eos": True, "stream": True}
        with ThreadPoolExecutor(4) as pool:
            streams = [httpx.Client(timeout=60) for _ in range(2)]
            ctxs = [c.stream("POST", s.url + "/v1/completions", json=body) for c in streams]
            resps = [ctx.__enter__() for ctx in ctxs]
            assert all(r.status_code == 200 for r in resps)
            r = httpx.post(s.url + "/v1/completions", json=body)
            assert r.status_code == 503, r.text
            assert r.headers["retry-after"] == "1"
            assert r.json()["error"]["code"] == 503
            for ctx, c in zip(ctxs, streams):
                ctx.__exit__(None, None, None)
                c.close()
        r = httpx.post(s.url + "/v1/completions", json={"prompt": "x" * 5000, "max_tokens": 1})
        assert r.status_code == 413 and "error" in r.json()
    finally:
        s.stop()


def test_dropped_non_streaming_request_frees_its_slot(server, model_id):
    body = {"model": model_id, "prompt": "Count: 1, 2,", "max_tokens": 1500, "ignore_eos": True}
    try:
        server.post("/v1/completions", body, timeout=0.5)
        raise AssertionError("a 1500-token answer came back in 0.5 s")
    except httpx.TimeoutException:
        pass
    t0 = time.monotonic()
    while not idle(server)[0]:
        assert time.monotonic() - t0 < 1.0, f"slot still busy after 1 s: {idle(server)[1]}"
        time.sleep(0.02)


def test_reasoning_is_split_out_when_the_template_marks_it():
    template = "{% for m in messages %}{{ m['content'] }}\n{% endfor %}<think>"
    s = Server("-c", "1024", "-np", "1", "--chat-template", template, "--reasoning", "on")
    try:
        c = s.client(api_key="unused")
        msgs = [{"role": "user", "content": "Think about the sea."}]
        r = c.chat.completions.create(model="m", messages=msgs, max_tokens=12, temperature=0)
        m = r.choices[0].message
        assert m.content == "" and m.model_extra["reasoning_content"]
        chunks = list(c.chat.completions.create(model="m", messages=msgs, max_tokens=12, temperature=0, stream=True))
        streamed = "".join(
            (ch.choices[0].delta.model_extra or {}).get("reasoning_content") or "" for ch in chunks if ch.choices
        )
        assert streamed == m.model_extra["reasoning_content"]
    finally:
        s.stop()


# The llama-server command line of a published benchmark, with our model as target and
# draft and the context sized to this machine (host as in every test: loopback).
PUBLISHED_FLAGS = (
    "--model-draft smollm2-135m --spec-type draft-dspark --spec-draft-n-max 7 --parallel 8 "
    "--kv-unified -c 8192 -b 2048 -ub 512 -ctk bf16 -ctv bf16 -ngl -1 --flash-attn on "
    "--no-context-shift --jinja --reasoning on --temp 1.0 --top-p 1.0 --min-p 0.0 --top-k 0 "
    "--host 127.0.0.1"
).split()


def test_published_llama_server_command_line_starts_and_serves_a_chat():
    s = Server(*PUBLISHED_FLAGS)
    try:
        r = s.client(api_key="none").chat.completions.create(
            model="any", messages=[{"role": "user", "content": "Say hello."}], max_tokens=8
        )
        assert r.choices[0].message.content
        assert r.usage.completion_tokens > 0
        log = s.output()
        assert log.count("-ngl") == 1, log
    finally:
        s.stop()


def test_overload_gets_503_with_retry_after_at_once_and_admitted_requests_finish():
    s = Server("--parallel", "2", "--queue-limit", "4", "-c", "2048")
    try:
        def one(i):
            t = time.monotonic()
            r = httpx.post(
                s.url + "/v1/completions",
                json={"prompt": f"Request {i}: once upon a time", "max_tokens": 32, "temperature": 0},
                timeout=120,
            )
            return r, time.monotonic() - t

        with ThreadPoolExecutor(50) as pool:
            results = list(pool.map(one, range(50)))
        ok = [r for r, _ in results if r.status_code == 200]
        busy = [(r, dt) for r, dt in results if r.status_code == 503]
        assert len(ok) + len(busy) == 50, [r.status_code for r, _ in results]
        assert len(ok) >= 2 and busy
        for r in ok:
            assert r.json()["usage"]["completion_tokens"] == 32
        for r, dt in busy:
            assert int(r.headers["retry-after"]) >= 1
            assert r.json()["error"]["message"]
            assert dt < 5.0
        assert all(not slot["is_processing"] for slot in s.get("/slots").json())
    finally:
        s.stop()
