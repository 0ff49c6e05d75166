"""The details clients read: /completion stream chunks carry the request's slot, the tokens
predicted so far and the prompt's tokens; the last answer carries llama-server's
generation_settings as the request set them; POST /props is refused; post_sampling_probs gives the probabilities of the
distribution each token was drawn from; top_logprobs come ordered by probability; a body
without a Content-Type is read as JSON; --alias takes several names of one model."""

import json

import httpx

from conftest import API_KEY, Server

PROMPT = "The three primary colors are"


def test_completion_chunks_carry_slot_and_counts(server):
    n_prompt = len(server.post("/tokenize", json={"content": PROMPT, "add_special": True}).json()["tokens"])
    chunks = []
    with httpx.stream("POST", server.url + "/completion", headers={"Authorization": f"Bearer {API_KEY}"},
                      json={"prompt": PROMPT, "n_predict": 8, "temperature": 0, "ignore_eos": True,
                            "stream": True}, timeout=60) as r:
        for line in r.iter_lines():
            if line.startswith("data: "):
                chunks.append(json.loads(line[6:]))
    deltas, last = chunks[:-1], chunks[-1]
    assert last["stop"] and last["tokens_predicted"] == 8 and last["tokens_evaluated"] == n_prompt
    assert all(0 <= c["id_slot"] < 8 and c["id_slot"] == last["id_slot"] for c in deltas)
    assert all(c["tokens_evaluated"] == n_prompt for c in deltas)
    counts = [c["tokens_predicted"] for c in deltas]
    assert counts == sorted(counts) and counts[-1] <= 8 and counts[0] >= 1


def test_generation_settings_are_the_requests(server):
    r = server.post("/completion", json={"prompt": PROMPT, "n_predict": 4, "temperature": 0.5, "top_k": 7,
                                         "seed": 11, "samplers": ["top_k", "temperature"], "stop": ["."]}).json()
    g = r["generation_settings"]
    assert (g["n_predict"], g["temperature"], g["top_k"], g["seed"]) == (4, 0.5, 7, 11)
    assert g["samplers"] == ["top_k", "temperature"] and g["stop"] == ["."]
    assert 0 <= r["id_slot"] < 8


def test_post_sampling_probs_are_those_of_the_drawn_distribution(server):
    greedy = server.post("/completion", json={"prompt": PROMPT, "n_predict": 4, "temperature": 0, "n_probs": 3,
                                              "post_sampling_probs": True}).json()
    for p in greedy["completion_probabilities"]:
        assert p["prob"] == 1.0 and [t["id"] for t in p["top_probs"]] == [p["id"]], p
    sampled = server.post("/completion", json={"prompt": PROMPT, "n_predict": 6, "temperature": 1.0, "top_k": 3,
                                               "seed": 5, "n_probs": 5, "post_sampling_probs": True}).json()
    for p in sampled["completion_probabilities"]:
        probs = [t["prob"] for t in p["top_probs"]]
        assert len(probs) <= 3 and abs(sum(probs) - 1) < 1e-4 and probs == sorted(probs, reverse=True), p
        assert p["prob"] in probs and "logprob" not in p
    r = server.post("/v1/chat/completions", json={"model": "m", "messages": [{"role": "user", "content": "Hi"}],
                                                  "post_sampling_probs": True})
    assert r.status_code == 400 and r.json()["error"]["param"] == "post_sampling_probs", r.text


def test_top_logprobs_are_ordered_by_probability(server):
    r = server.client().chat.completions.create(
        model="m", messages=[{"role": "user", "content": PROMPT}], max_tokens=6, logprobs=True, top_logprobs=5)
    for t in r.choices[0].logprobs.content:
        lps = [a.logprob for a in t.top_logprobs]
        assert lps == sorted(lps, reverse=True) and len(lps) == 5


def test_a_body_without_content_type_is_json(server):
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2})
    r = httpx.post(server.url + "/v1/chat/completions", content=body.encode(),
                   headers={"Authorization": f"Bearer {API_KEY}"}, timeout=60)
    assert r.status_code == 200, r.text


def test_several_aliases_name_one_model():
    s = Server("-c", "512", "-np", "1", "--alias", "tiny-chat, small", "--tags", "chat,small")
    try:
        models = s.get("/v1/models").json()["data"]
        assert [m["id"] for m in models] == ["small"], "the alphabetically first, as llama-server"
        assert models[0]["aliases"] == ["small", "tiny-chat"] and models[0]["tags"] == ["chat", "small"]
        assert s.get("/v1/models/tiny-chat").json()["id"] == "small"
        assert s.get("/v1/models/other").status_code == 404
        r = s.client().chat.completions.create(model="tiny-chat", messages=[{"role": "user", "content": "Hi"}],
                                               max_tokens=2)
        assert r.model == "small"
    finally:
        s.stop()


def test_props_cannot_be_changed_and_slots_need_a_save_path(server):
    r = server.post("/props", json={"n_predict": 4})
    assert r.status_code == 501 and "not supported" in r.json()["error"]["message"], r.text
    r = server.post("/slots/0?action=save", json={"filename": "a.bin"})
    assert r.status_code == 501 and "--slot-save-path" in r.json()["error"]["message"], r.text
    assert server.post("/slots/99?action=erase", json={}).status_code == 404
    r = server.post("/slots/0?action=fly", json={})
    assert r.status_code == 400 and r.json()["error"]["param"] == "action", r.text
