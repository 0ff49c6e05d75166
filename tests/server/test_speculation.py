"""Speculative decoding through the real server: the text at temperature 0 is the text of
plain decoding, alone and with 8 users, with a draft model and with n-gram drafts, under
the adaptive and the fixed policy; the target as its own draft accepts every token."""

from concurrent.futures import ThreadPoolExecutor

import pytest

from conftest import Server

PROMPTS = [
    "Write a Python function that adds two numbers.",
    "Explain what a binary search does.",
    "List three uses of copper, then list them again.",
    "What is the boiling point of water?",
    "Repeat after me: the cat sat on the mat, the cat sat on the mat.",
    "Describe a cat in two sentences.",
    "Why is the sky blue?",
    "Name a famous painter and one painting.",
]

ARMS = {
    "plain": [],
    # The whole vocabulary in the draft's head, so that the draft is the target itself.
    "self-draft adaptive": ["-md", "smollm2-135m", "--spec-draft-vocab", "0", "--spec-draft-n-max", "6"],
    "self-draft fixed": [
        "-md", "smollm2-135m", "--spec-draft-vocab", "0", "--spec-policy", "fixed", "--spec-draft-n-max", "4",
    ],
    "reduced-head draft fixed": ["-md", "smollm2-135m", "--spec-policy", "fixed", "--spec-draft-n-max", "4"],
    "ngram adaptive": ["--spec-type", "ngram", "--spec-draft-n-max", "6"],
    "ngram fixed": ["--spec-type", "ngram", "--spec-policy", "fixed", "--spec-draft-n-max", "6"],
}


def complete(server, prompt, max_tokens=40):
    r = server.post(
        "/v1/chat/completions",
        json={
            "messages": [{"role": "user", "content": prompt}],
            "max_tokens": max_tokens,
            "temperature": 0,
        },
    )
    assert r.status_code == 200, r.text
    body = r.json()
    return body["choices"][0]["message"]["content"], body["timings"]


def run_arm(flags):
    s = Server("-c", "8192", "-np", "8", "--kv-unified", "--metrics", *flags)
    try:
        alone = complete(s, PROMPTS[0])
        with ThreadPoolExecutor(8) as pool:
            together = list(pool.map(lambda p: complete(s, p), PROMPTS))
        metrics = s.get("/metrics").text
        return alone, together, metrics
    finally:
        s.stop()


def counter(metrics, name):
    line = next(l for l in metrics.splitlines() if l.startswith(name + " "))
    return float(line.split()[1])


@pytest.fixture(scope="module")
def plain():
    return run_arm(ARMS["plain"])


@pytest.mark.parametrize("arm", [a for a in ARMS if a != "plain"])
def test_speculation_keeps_the_plain_text(plain, arm):
    (alone, _), together, _ = plain
    (s_alone, t_alone), s_together, metrics = run_arm(ARMS[arm])
    assert s_alone == alone
    assert [t for t, _ in s_together] == [t for t, _ in together]
    drafted = counter(metrics, "vllm:spec_decode_num_draft_tokens")
    accepted = counter(metrics, "vllm:spec_decode_num_accepted_tokens")
    assert "tandem:spec_target_forward_seconds{rows=\"1\"}" in metrics
    if arm.startswith("self-draft"):
        assert accepted == drafted, metrics
        assert all(t["draft_n_accepted"] == t["draft_n"] for _, t in s_together)
    if arm != "self-draft adaptive":
        # A self-draft costs as much as the target: the adaptive policy rightly (almost)
        # never starts it, so only the other arms must have drafted.
        assert drafted > 0, metrics
        assert sum(t["draft_n"] for _, t in s_together) + t_alone["draft_n"] > 0
        assert "vllm:spec_decode_num_accepted_tokens_per_pos{position=\"0\"}" in metrics
        steps = {p: counter(metrics, f'tandem:step_seconds_total{{part="{p}"}}') for p in ("draft", "verify", "decode", "sample")}
        assert all(v > 0 for v in steps.values()), steps
        assert steps["sample"] < steps["decode"] + steps["verify"], steps


def test_a_request_can_turn_speculation_off_and_a_bad_bound_is_a_400():
    s = Server("-c", "4096", "-np", "2", "--spec-type", "ngram")
    try:
        r = s.post(
            "/completion",
            json={"prompt": "a b c a b c a b c", "n_predict": 24, "temperature": 0, "speculative.n_max": 0},
        )
        assert r.status_code == 200, r.text
        assert r.json()["timings"]["draft_n"] == 0
        r = s.post("/completion", json={"prompt": "hi", "speculative": {"n_max": -1}})
        assert r.status_code == 400 and "speculative.n_max" in r.text, r.text
    finally:
        s.stop()
