"""The field policy, from a generated list: every request field of OpenAI's chat completions and
completions documentation and of llama-server's /completion documentation, sent alone with a valid
value, is either honored (and where this test can see its effect, the effect is checked) or refused
with a 400 that names it; a field nobody documents is ignored and counted in /metrics."""

import json

import pytest

CHAT = {"model": "m", "messages": [{"role": "user", "content": "Count from one to ten in words."}],
        "max_tokens": 16, "temperature": 0}
COMPLETIONS = {"model": "m", "prompt": "Count from one to ten: one, two,", "max_tokens": 16, "temperature": 0}
NATIVE = {"prompt": "Count from one to ten: one, two,", "n_predict": 16, "temperature": 0}
BASE = {"/v1/chat/completions": CHAT, "/v1/completions": COMPLETIONS, "/completion": NATIVE}
TOOL = {"type": "function", "function": {"name": "f", "description": "d",
                                         "parameters": {"type": "object", "properties": {}}}}


def text(route, body):
    if route == "/v1/chat/completions":
        return body["choices"][0]["message"]["content"] or ""
    if route == "/v1/completions":
        return body["choices"][0]["text"]
    return body["content"]


def differs(route, body, base):
    return text(route, body) != text(route, base)


def n_generated(route, body):
    return body["tokens_predicted"] if route == "/completion" else body["usage"]["completion_tokens"]


# (route, field, value, check): check is None for a refusal (400 naming the field), else a function of
# (the answer, the answer without the field) that says the field took effect, or True where no
# effect shows in one answer (an opaque id, a value equal to the default).
OPENAI_CHAT = [
    ("messages", CHAT["messages"], lambda b, _: True),
    ("model", "anything", lambda b, _: True),
    ("audio", {"voice": "alloy", "format": "wav"}, None),
    ("frequency_penalty", 2.0, lambda b, base: differs("/v1/chat/completions", b, base)),
    ("function_call", "auto", None),
    ("functions", [TOOL["function"]], None),
    ("logit_bias", {"1": -100}, lambda b, _: True),
    ("logprobs", True, lambda b, _: len(b["choices"][0]["logprobs"]["content"]) > 0),
    ("max_completion_tokens", 3, lambda b, _: b["usage"]["completion_tokens"] <= 3),
    ("max_tokens", 3, lambda b, _: b["usage"]["completion_tokens"] <= 3),
    ("metadata", {"k": "v"}, lambda b, _: True),
    ("modalities", ["text", "audio"], None),
    ("n", 2, lambda b, _: [c["index"] for c in b["choices"]] == [0, 1]),
    ("parallel_tool_calls", False, lambda b, _: True),
    ("prediction", {"type": "content", "content": "one"}, None),
    ("presence_penalty", 2.0, lambda b, base: differs("/v1/chat/completions", b, base)),
    ("prompt_cache_key", "k", lambda b, _: True),
    ("reasoning_effort", "low", None),
    ("response_format", {"type": "json_object"},
     lambda b, _: isinstance(json.loads(b["choices"][0]["message"]["content"]), dict)),
    ("safety_identifier", "u1", lambda b, _: True),
    ("seed", 7, lambda b, _: True),
    ("service_tier", "flex", None),
    ("stop", [" "], lambda b, _: " " not in b["choices"][0]["message"]["content"]),
    ("store", True, None),
    ("stream", False, lambda b, _: b["object"] == "chat.completion"),
    ("stream_options", None, lambda b, _: True),
    ("temperature", 0.0, lambda b, base: not differs("/v1/chat/completions", b, base)),
    ("tool_choice", "none", lambda b, _: True),
    ("tools", [TOOL], lambda b, _: True),
    ("top_logprobs", 2, lambda b, _: all(len(t["top_logprobs"]) == 2
                                         for t in b["choices"][0]["logprobs"]["content"])),
    ("top_p", 0.5, lambda b, _: True),
    ("user", "u1", lambda b, _: True),
    ("verbosity", "low", None),
    ("web_search_options", {}, None),
]
OPENAI_COMPLETIONS = [
    ("best_of", 2, None),
    ("echo", True, None),
    ("logprobs", 2, lambda b, _: all(len(t) == 2 for t in b["choices"][0]["logprobs"]["top_logprobs"])),
    ("n", 3, lambda b, _: len(b["choices"]) == 3),
    ("suffix", " eleven", None),
    ("user", "u1", lambda b, _: True),
]
LLAMA = [
    ("dynatemp_range", 0.5, None),
    ("dynatemp_exponent", 1.0, lambda b, _: True),
    ("top_k", 1, lambda b, base: not differs("/completion", b, base)),
    ("min_p", 0.1, lambda b, _: True),
    ("n_predict", 2, lambda b, _: b["tokens_predicted"] <= 2),
    ("n_indent", 4, None),
    ("n_keep", 8, None),
    ("n_discard", 8, None),
    ("stream", False, lambda b, _: "content" in b),
    ("typical_p", 0.5, lambda b, _: True),
    ("repeat_penalty", 1.5, lambda b, base: differs("/completion", b, base)),
    ("repeat_last_n", 8, lambda b, _: True),
    ("dry_multiplier", 0.8, lambda b, _: True),
    ("dry_base", 1.75, lambda b, _: True),
    ("dry_allowed_length", 2, lambda b, _: True),
    ("dry_penalty_last_n", -1, lambda b, _: True),
    ("dry_sequence_breakers", ["\n"], lambda b, _: True),
    ("xtc_probability", 0.5, None),
    ("xtc_threshold", 0.1, lambda b, _: True),
    ("mirostat", 2, None),
    ("mirostat_tau", 5.0, lambda b, _: True),
    ("mirostat_eta", 0.1, lambda b, _: True),
    ("grammar", 'root ::= "yes" | "no"', lambda b, _: b["content"] in ("yes", "no")),
    ("json_schema", {"type": "object", "properties": {"a": {"enum": [1, 2, 3]}}, "required": ["a"],
                     "additionalProperties": False},
     lambda b, _: json.loads(b["content"])["a"] in (1, 2, 3)),
    ("seed", 3, lambda b, _: True),
    ("ignore_eos", True, lambda b, _: b["tokens_predicted"] == 16),
    ("logit_bias", [[1, False]], lambda b, _: True),
    ("n_probs", 2, lambda b, _: all(len(p["top_logprobs"]) == 2 for p in b["completion_probabilities"])),
    ("min_keep", 2, None),
    ("t_max_predict_ms", 60000, lambda b, _: b["generation_settings"]["t_max_predict_ms"] == 60000),
    ("id_slot", 3, lambda b, _: b["id_slot"] == 3),
    ("cache_prompt", False, lambda b, _: b["tokens_cached"] == 0),
    ("return_tokens", True, lambda b, _: len(b["tokens"]) == b["tokens_predicted"]),
    ("samplers", ["top_k", "temperature"], lambda b, _: True),
    ("timings_per_token", True, lambda b, _: b["generation_settings"]["timings_per_token"] is True),
    ("post_sampling_probs", True, lambda b, _: all(0 <= p["prob"] <= 1 for p in b["completion_probabilities"])),
    ("response_fields", ["content"], None),
    ("lora", [], lambda b, _: b["generation_settings"]["lora"] == []),
    ("top_n_sigma", 1.0, None),
    ("reasoning_format", "none", lambda b, _: True),
    ("speculative.n_max", 4, lambda b, _: True),
    ("speculative.n_min", 0, lambda b, _: True),
    ("cache_salt", "s", lambda b, _: b["tokens_cached"] == 0),
    ("n_cache_reuse", 256, None),
    ("multimodal_data", ["aGk="], None),
]
# What a field needs beside it to show its effect: its companion field, or room for a whole JSON value.
NEEDS = {"top_logprobs": {"logprobs": True}, "post_sampling_probs": {"n_probs": 2}, "response_format": {"max_tokens": 64}, "json_schema": {"n_predict": 64}}
CASES = ([("/v1/chat/completions", *c) for c in OPENAI_CHAT] + [("/v1/completions", *c) for c in OPENAI_COMPLETIONS]
         + [("/completion", *c) for c in LLAMA])


@pytest.fixture(scope="module")
def baselines(server):
    return {route: server.post(route, json=body).json() for route, body in BASE.items()}


@pytest.mark.parametrize("route, field, value, check", CASES, ids=[f"{c[0]} {c[1]}" for c in CASES])
def test_each_documented_field_is_honored_or_refused(server, baselines, route, field, value, check):
    body = dict(BASE[route], **NEEDS.get(field, {}))
    body[field] = value
    r = server.post(route, json=body)
    if check is None:
        assert r.status_code == 400, f"{field}: {r.status_code} {r.text}"
        err = r.json()["error"]
        assert err["param"] == field and field in err["message"], err
    else:
        assert r.status_code == 200, f"{field}: {r.text}"
        assert check(r.json(), baselines[route]), f"{field} had no effect: {r.text}"


def test_a_field_nobody_documents_is_ignored_and_counted(server):
    def count():
        line = next(l for l in server.get("/metrics").text.splitlines()
                    if l.startswith("tandem:request_unknown_fields_total "))
        return float(line.split()[1])

    before = count()
    r = server.post("/v1/chat/completions", json={**CHAT, "x_vendor_extra": 1, "another_sdk_field": "v"})
    assert r.status_code == 200, r.text
    assert count() == before + 2
