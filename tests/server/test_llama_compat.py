"""llama-server's fields and routes that its own test suite reads (scripts/llama-suite): a
request pinned to a slot (id_slot), prompt progress and running timings in streams,
/chat/completions/input_tokens, __verbose, logit_bias in generation_settings, prompt
objects, /rerank, context shift, LoRA adapters, and llama-server's flags tandem does not
implement accepted with a warning."""

import json
import os
import re
import socket
import subprocess
import time

import httpx
import pytest

from conftest import API_KEY, BINARY, Server

PROMPT = "The three primary colors are"
AUTH = {"Authorization": f"Bearer {API_KEY}"}


def stream(server, route, body):
    out = []
    with httpx.stream("POST", server.url + route, headers=AUTH, json=dict(body, stream=True), timeout=120) as r:
        assert r.status_code == 200, r.read()
        for line in r.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                out.append(json.loads(line[6:]))
    return out


def test_id_slot_pins_a_request_and_several_choices_share_it(server):
    r = server.post("/completion", json={"prompt": PROMPT, "n_predict": 2, "id_slot": 5})
    assert r.status_code == 200 and r.json()["id_slot"] == 5
    body = {"messages": [{"role": "user", "content": "Name a book."}], "max_tokens": 6, "n": 2, "id_slot": 0,
            "temperature": 0}
    for _ in range(2):
        r = server.post("/v1/chat/completions", json=body)
        assert r.status_code == 200, r.text
        choices = r.json()["choices"]
        assert len(choices) == 2 and choices[0]["message"]["content"] == choices[1]["message"]["content"]
    r = server.post("/completion", json={"prompt": PROMPT, "id_slot": 8})
    assert r.status_code == 400 and r.json()["error"]["param"] == "id_slot"


def test_prompt_progress_and_running_timings_are_streamed(server):
    prompt = "the quick brown fox jumps over the lazy dog " * 40
    n_prompt = len(server.post("/tokenize", json={"content": prompt, "add_special": True}).json()["tokens"])
    chunks = stream(server, "/completion", {"prompt": prompt, "n_predict": 4, "return_progress": True,
                                            "timings_per_token": True, "cache_prompt": False})
    progress = [c["prompt_progress"] for c in chunks if "prompt_progress" in c]
    assert len(progress) >= 2, chunks[:3]
    assert progress[0]["processed"] == progress[0]["cache"] == 0
    assert progress[-1]["processed"] == progress[-1]["total"] == n_prompt
    assert all(a["processed"] < b["processed"] and a["time_ms"] <= b["time_ms"]
               for a, b in zip(progress, progress[1:]))
    assert all("timings" in c for c in chunks)
    first = next(c["timings"] for c in chunks if "prompt_progress" in c)
    assert first["prompt_n"] == 0 and first["prompt_ms"] == 0.0
    last_progress = [c for c in chunks if "prompt_progress" in c][-1]["timings"]
    assert last_progress["prompt_n"] == n_prompt and last_progress["prompt_ms"] > 0
    generated = [c for c in chunks if c.get("content") and not c["stop"]]
    assert generated and generated[-1]["timings"]["predicted_n"] == generated[-1]["tokens_predicted"]

    plain = stream(server, "/completion", {"prompt": prompt, "n_predict": 2})
    assert not any("prompt_progress" in c for c in plain)
    assert not any("timings" in c for c in plain[:-1]), "timings only in the last chunk by default"

    chat = stream(server, "/v1/chat/completions", {"messages": [{"role": "user", "content": prompt}],
                                                   "max_tokens": 2, "return_progress": True,
                                                   "stream_options": {"include_usage": True}})
    reports = [c for c in chat if "prompt_progress" in c]
    assert reports and all(c["choices"][0]["delta"] == {"role": "assistant", "content": None} for c in reports)
    assert reports[-1]["prompt_progress"]["processed"] == reports[-1]["prompt_progress"]["total"]
    assert "timings" in chat[-1] and chat[-1]["choices"] == [], "the usage chunk carries the timings"


def test_input_tokens_counts_the_rendered_chat(server):
    messages = [{"role": "system", "content": "Book"}, {"role": "user", "content": "What is the best book"}]
    prompt = server.post("/apply-template", json={"messages": messages}).json()["prompt"]
    tokens = server.post("/tokenize", json={"content": prompt, "add_special": True, "parse_special": True})
    r = server.post("/chat/completions/input_tokens", json={"messages": messages})
    assert r.status_code == 200 and r.json()["input_tokens"] == len(tokens.json()["tokens"])
    assert server.post("/v1/chat/completions/input_tokens", json={}).status_code == 400
    body = {"input": "Hello world", "instructions": "Be brief."}
    n = server.post("/v1/responses/input_tokens", json=body).json()["input_tokens"]
    used = server.post("/v1/responses", json=dict(body, max_output_tokens=2)).json()["usage"]["input_tokens"]
    assert n == used > 0


def test_verbose_and_logit_bias_are_reported(server):
    body = {"messages": [{"role": "system", "content": "Book"}, {"role": "user", "content": "Hi"}], "max_tokens": 2}
    r = server.post("/v1/chat/completions", json=dict(body, verbose=True)).json()
    assert "Book" in r["__verbose"]["prompt"] and r["__verbose"]["content"] == r["choices"][0]["message"]["content"]
    assert "__verbose" not in server.post("/v1/chat/completions", json=body).json()

    g = server.post("/completion", json={"prompt": PROMPT, "n_predict": 2, "ignore_eos": True,
                                         "logit_bias": [[42, 1.5]]}).json()["generation_settings"]
    assert {"token": 42, "bias": 1.5} in g["logit_bias"]
    assert any(b["bias"] is None for b in g["logit_bias"]), "ignore_eos bans the end tokens (-inf, null)"
    g = server.post("/completion", json={"prompt": PROMPT, "n_predict": 2}).json()["generation_settings"]
    assert g["logit_bias"] == []


def test_prompt_objects_read_as_their_text(server):
    base = {"n_predict": 6, "temperature": 0}
    plain = server.post("/completion", json=dict(base, prompt=PROMPT)).json()["content"]
    obj = server.post("/completion", json=dict(base, prompt={"prompt_string": PROMPT})).json()["content"]
    both = server.post("/completion", json=dict(base, prompt=[{"prompt_string": PROMPT}, PROMPT])).json()
    assert obj == plain and [b["content"] for b in both] == [plain, plain]
    r = server.post("/completion", json=dict(base, prompt={"prompt_string": PROMPT, "multimodal_data": ["aGk="]}))
    assert r.status_code == 400 and "multimodal_data" in r.json()["error"]["message"]
    assert server.post("/completions", json=dict(base, prompt=PROMPT)).json()["content"] == plain, \
        "/completions is llama-server's native route"


def test_rerank_scores_are_the_last_states_first_component():
    s = Server("-c", "2048", "-np", "2", "--reranking", "--embeddings", "--pooling", "last")
    try:
        docs = ["A machine is a physical system.", "Machine learning learns from data.", "Paris est une ville."]
        r = s.post("/rerank", json={"query": "Machine learning is", "documents": docs})
        assert r.status_code == 200, r.text
        res = r.json()["results"]
        scores = [x["relevance_score"] for x in res]
        assert sorted(x["index"] for x in res) == [0, 1, 2] and scores == sorted(scores, reverse=True)
        # The score is the first component of the last token's final state of the pair's prompt.
        for x in res:
            ids = (s.post("/tokenize", json={"content": "Machine learning is", "add_special": True}).json()["tokens"]
                   + s.post("/tokenize", json={"content": docs[x["index"]]}).json()["tokens"])
            e = s.post("/embedding", json={"content": ids, "embd_normalize": -1}).json()[0]["embedding"][0]
            assert e[0] == x["relevance_score"], (e[0], x)
        n = sum(len(s.post("/tokenize", json={"content": "Machine learning is" if i == 0 else d,
                                               "add_special": i == 0}).json()["tokens"])
                for d in docs for i in (0, 1))
        assert r.json()["usage"]["prompt_tokens"] == n
        tei = s.post("/rerank", json={"query": "Machine learning is", "texts": docs, "top_n": 2,
                                      "return_text": True}).json()
        assert len(tei) == 2 and tei[0]["text"] == docs[tei[0]["index"]] and tei[0]["score"] == scores[0]
        for bad in [[], None, 123, [1, 2]]:
            r = s.post("/rerank", json={"query": "q", "documents": bad})
            assert r.status_code == 400 and r.json()["error"]["param"] == "documents", bad
        assert s.post("/rerank", json={"documents": ["a"]}).json()["error"]["param"] == "query"
    finally:
        s.stop()


def test_llama_server_flags_tandem_lacks_start_with_a_warning():
    env = dict(os.environ, LLAMA_ARG_CTX_SIZE="1024", LLAMA_ARG_THREADS_HTTP="3")
    s = Server("-np", "1", "--prio", "2", "--threads-http", "4", "--no-warmup", "--dry-base=1.5",
               "--backend_sampling", "--cors-credentials", env=env)
    try:
        out = s.output()
        for flag in ["--prio", "--threads-http", "--no-warmup", "--dry-base", "--backend-sampling"]:
            assert f"warning: {flag}: a llama-server flag tandem does not implement" in out, flag
        assert "warning: LLAMA_ARG_THREADS_HTTP" not in out, "the command line's flag wins"
        assert s.get("/props").json()["default_generation_settings"]["n_ctx"] == 1024
    finally:
        s.stop()


def test_responses_streams_carry_progress_and_timings(server):
    events = stream(server, "/v1/responses", {"input": "This is a test " * 20, "max_output_tokens": 4,
                                              "return_progress": True, "timings_per_token": True})
    progress = [e for e in events if "prompt_progress" in e]
    assert progress and all(e["type"] == "response.in_progress" for e in progress)
    assert progress[-1]["prompt_progress"]["processed"] == progress[-1]["prompt_progress"]["total"]
    deltas = [e for e in events if e["type"] == "response.output_text.delta"]
    assert deltas and all("predicted_per_second" in e["timings"] for e in deltas)
    done = events[-1]
    assert done["type"] in ("response.completed", "response.incomplete") and "timings" in done


def test_vertex_ai_predict_route_answers_each_instance():
    env = dict(os.environ, AIP_MODE="PREDICTION", AIP_HEALTH_ROUTE="/ping")
    s = Server("-c", "1024", "-np", "2", "--api-key", API_KEY, env=env)
    try:
        r = s.post("/predict", json={"instances": [
            {"@requestFormat": "chatCompletions", "max_tokens": 4, "stream": True,
             "messages": [{"role": "user", "content": "Say hello"}]},
            {"@requestFormat": "/completion", "prompt": PROMPT, "n_predict": 3},
            {"@requestFormat": "nowhere"},
        ]})
        assert r.status_code == 200, r.text
        chat, native, bad = r.json()["predictions"]
        assert chat["object"] == "chat.completion" and chat["choices"][0]["message"]["role"] == "assistant"
        assert native["tokens_predicted"] == 3
        assert "nowhere" in bad["error"]["message"]
        assert s.post("/predict", json={"instances": 1}).json()["error"]["param"] == "instances"
        assert httpx.post(s.url + "/predict", json={"instances": []}).status_code == 401, "the key guards it"
        assert httpx.get(s.url + "/ping").status_code == 200
    finally:
        s.stop()


def test_several_listen_addresses():
    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
    except OSError:
        pytest.skip("IPv6 loopback is unavailable")
    s = Server("-np", "1", "--host", "127.0.0.1,::1")
    try:
        port = s.url.rsplit(":", 1)[1]
        assert httpx.get(f"http://[::1]:{port}/health").status_code == 200
        assert httpx.get(s.url + "/health").status_code == 200
    finally:
        s.stop()


def test_an_idle_server_sleeps_and_a_request_wakes_it():
    s = Server("-c", "1024", "-np", "1", "--metrics", "--sleep-idle-seconds", "1")
    try:
        body = {"prompt": PROMPT, "n_predict": 6, "temperature": 0}
        before = s.post("/completion", json=body).json()["content"]

        def sleeping():
            return s.get("/props").json()["is_sleeping"]

        deadline = time.monotonic() + 15
        while not sleeping():
            assert time.monotonic() < deadline, "the server never went to sleep"
            time.sleep(0.1)
        assert "engine: idle, asleep" in s.output()
        assert s.get("/v1/models").status_code == 200 and s.get("/metrics").status_code == 200
        assert sleeping(), "reading /props, /models or /metrics does not wake it"
        assert s.post("/completion", json=body).json()["content"] == before
        assert not sleeping()
        deadline = time.monotonic() + 15
        while not sleeping():
            assert time.monotonic() < deadline, "the server never went to sleep again"
            time.sleep(0.1)
        assert s.post("/tokenize", json={"content": "hi"}).status_code == 200
        assert not sleeping(), "any request but the status reads wakes it"
    finally:
        s.stop()


def test_t_max_predict_ms_ends_the_answer_after_a_newline(server):
    body = {"prompt": PROMPT, "n_predict": 200, "temperature": 0, "ignore_eos": True, "grammar": 'root ::= ("ab\\n")+'}
    r = server.post("/completion", json=dict(body, t_max_predict_ms=1)).json()
    assert r["stop_type"] == "limit" and r["tokens_predicted"] < 200, r
    assert "\n" in r["content"] and r["content"].startswith("ab")
    full = server.post("/completion", json=body).json()
    assert full["tokens_predicted"] == 200 and full["content"].startswith(r["content"])


def test_a_reasoning_budget_forces_the_end_of_reasoning():
    template = "{% for m in messages %}{{ m['content'] }}\n{% endfor %}<think>"
    ask = [{"role": "user", "content": "Think about the sea."}]

    def chat(s, **kw):
        body = {"messages": ask, "max_tokens": 40, "temperature": 0, "ignore_eos": True, **kw}
        return s.post("/v1/chat/completions", json=body).json()["choices"][0]["message"]

    s = Server("-c", "1024", "-np", "1", "--chat-template", template, "--reasoning", "on",
               "--reasoning-budget-message", " Enough.")
    try:
        free = chat(s)
        assert free["content"] == "", "without a budget, it thinks on"
        prompt = s.post("/apply-template", json={"messages": ask}).json()["prompt"]
        first6 = s.post("/completion", json={"prompt": prompt, "n_predict": 6, "temperature": 0,
                                             "ignore_eos": True}).json()["content"]
        capped = chat(s, reasoning_budget_tokens=6)
        assert capped["reasoning_content"] == first6 + " Enough.", (capped, first6)
        assert free["reasoning_content"].startswith(first6)
        assert capped["content"], "the answer goes on after </think>"
        none = chat(s, thinking_budget_tokens=0, reasoning_budget_message="")
        assert not none.get("reasoning_content") and none["content"]
        r = httpx.post(s.url + "/v1/messages", json={
            "model": "m", "max_tokens": 30, "temperature": 0,
            "thinking": {"type": "enabled", "budget_tokens": 6},
            "messages": ask}, timeout=60).json()
        block = r["content"][0]
        assert block["type"] == "thinking" and block["thinking"] == first6 + " Enough.", r
    finally:
        s.stop()
    s = Server("-c", "1024", "-np", "1", "--chat-template", template, "--reasoning", "on",
               "--reasoning-budget", "6")
    try:
        assert chat(s)["reasoning_content"] == first6, "the server's budget, with no message"
    finally:
        s.stop()


def test_messages_may_be_empty_on_anthropics_route_only(server):
    r = server.post("/v1/messages", json={"model": "m", "max_tokens": 4, "messages": []})
    assert r.status_code == 200 and r.json()["type"] == "message", r.text
    r = server.post("/v1/chat/completions", json={"max_tokens": 4, "messages": []})
    assert r.status_code == 400 and r.json()["error"]["param"] == "messages"
    assert server.post("/v1/messages", json={"model": "m", "max_tokens": 4}).status_code == 400


def test_a_reasoning_budget_is_refused_where_no_chat_answer_is(server):
    for field, value in [("reasoning_budget_tokens", 4), ("thinking_budget_tokens", 4),
                         ("reasoning_budget_message", "x")]:
        r = server.post("/completion", json={"prompt": PROMPT, "n_predict": 2, field: value})
        assert r.status_code == 400 and r.json()["error"]["param"] == field, r.text


def test_context_shift_lets_an_answer_run_past_its_slot():
    env = dict(os.environ, LLAMA_ARG_CONTEXT_SHIFT="1")
    s = Server("-c", "128", "-np", "2", "--api-key", API_KEY, "--metrics", env=env)
    try:
        body = {"prompt": PROMPT, "n_predict": 160, "ignore_eos": True, "temperature": 0, "n_keep": -1}
        r = s.post("/completion", json=body)
        assert r.status_code == 200, r.text
        b = r.json()
        assert b["tokens_predicted"] == 160 and b["truncated"] is True and b["stop_type"] == "limit"
        assert b["generation_settings"]["n_keep"] == -1
        shifts = re.search(r"^tandem:context_shifts_total (\d+)", s.get("/metrics").text, re.M)
        assert int(shifts.group(1)) >= 2
        r = s.post("/completion", json=dict(body, n_discard=-2))
        assert r.status_code == 400 and "n_discard" in r.text
    finally:
        s.stop()
    s = Server("-c", "128", "-np", "2", "--api-key", API_KEY, "--keep", "4")
    try:
        assert "warning: --keep: without --context-shift" in s.output()
        n_ctx = s.get("/props").json()["default_generation_settings"]["n_ctx"]
        b = s.post("/completion", json={"prompt": PROMPT, "n_predict": 160, "ignore_eos": True}).json()
        assert b["truncated"] is True and b["tokens_evaluated"] + b["tokens_predicted"] == n_ctx
    finally:
        s.stop()


def test_lora_adapters_are_listed_scaled_and_chosen_per_request(tmp_path):
    adapter = tmp_path / "adapter.gguf"
    subprocess.run([BINARY, "synth", "--lora-of", "smollm2-135m", "-o", str(adapter), "--seed", "3"], check=True)
    s = Server("-c", "1024", "-np", "4", "--api-key", API_KEY, "--lora-init-without-apply", "--lora", str(adapter))
    try:
        listed = s.get("/lora-adapters").json()
        assert listed == [{"id": 0, "path": str(adapter), "scale": 0.0, "task_name": "", "prompt_prefix": ""}]
        body = {"prompt": PROMPT, "n_predict": 12, "temperature": 0, "cache_prompt": False}
        plain = s.post("/completion", json=body).json()
        assert plain["generation_settings"]["lora"] == []
        own = s.post("/completion", json=dict(body, lora=[{"id": 0, "scale": 1.0}])).json()
        assert own["generation_settings"]["lora"] == [{"id": 0, "scale": 1.0}]
        assert own["content"] != plain["content"]
        assert s.post("/lora-adapters", json=[{"id": 0, "scale": 1.0}]).json() == {"success": True}
        assert s.get("/lora-adapters").json()[0]["scale"] == 1.0
        assert s.post("/completion", json=body).json()["content"] == own["content"]
        off = s.post("/completion", json=dict(body, lora=[{"id": 0, "scale": 0.0}])).json()
        assert off["content"] == plain["content"]
        for bad, field in [([{"id": 1, "scale": 1}], "lora[0].id"), ([{"id": 0}], "lora[0]"), ({"id": 0}, "lora")]:
            r = s.post("/completion", json=dict(body, lora=bad))
            assert r.status_code == 400 and field in r.text, r.text
        r = s.post("/lora-adapters", json=[{"id": 3, "scale": 1}])
        assert r.status_code == 400 and "body[0].id" in r.text
    finally:
        s.stop()
