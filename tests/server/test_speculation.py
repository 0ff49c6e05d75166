"""Speculative decoding through the real server: the text at temperature 0 is the text of
plain decoding, alone and with 8 users, with a draft model and with n-gram drafts, under
the adaptive and the fixed policy, and with EAGLE-3 and DFlash drafters of the model's
features (synthetic, `tandem synth`); the target as its own draft accepts every token."""

import subprocess
from concurrent.futures import ThreadPoolExecutor

import pytest

from conftest import BINARY, Server

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
        # The server's own output goes with the metrics, for a failed assertion to show.
        return alone, together, metrics + "\n# server output:\n" + s.output()
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


@pytest.fixture(scope="module")
def feature_drafters(tmp_path_factory):
    """Random EAGLE-3 and DFlash drafters of SmolLM2-135M's shape, using its embeddings and head."""
    d = tmp_path_factory.mktemp("drafters")
    shape = ["--n-embd", "576", "--n-head", "9", "--n-head-kv", "3", "--n-ff", "1536",
             "--target-layers", "2,15,27", "--target-head", "--type", "q8_0", "--tokenizer", "smollm2-135m"]
    paths = {}
    for arch in ("eagle3", "dflash"):
        paths[arch] = str(d / f"{arch}.gguf")
        subprocess.run([BINARY, "synth", "-o", paths[arch], "--arch", arch, *shape], check=True,
                       capture_output=True, timeout=300)
    return paths


@pytest.mark.parametrize("arch", ["eagle3", "dflash"])
def test_feature_drafters_keep_the_plain_text(plain, feature_drafters, arch):
    (alone, _), together, _ = plain
    flags = ["-md", feature_drafters[arch], "--spec-policy", "fixed", "--spec-draft-n-max", "4"]
    (s_alone, t_alone), s_together, metrics = run_arm(flags)
    assert s_alone == alone
    assert [t for t, _ in s_together] == [t for t, _ in together]
    assert counter(metrics, "vllm:spec_decode_num_draft_tokens") > 0, metrics
    assert t_alone["draft_n"] > 0, (t_alone, metrics)


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
