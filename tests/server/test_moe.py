"""A synthetic mixture of experts (`tandem synth`: qwen3moe, 3 of 32 experts per token, Q4_K,
SmolLM2's tokenizer) through the real server with the official `openai` client: 8 users at
once, plainly and with the model as its own draft at 5 draft tokens per step (48 rows of 3
experts each per verification). Every answer completes, the draft's text is the plain
text, and the draft is accepted whole (the expert-grouped path is batch-invariant)."""

import subprocess
from concurrent.futures import ThreadPoolExecutor

import pytest

from conftest import BINARY, Server

PROMPTS = [f"Tell me about the number {i}." for i in range(8)]


@pytest.fixture(scope="module")
def moe_model(tmp_path_factory):
    path = tmp_path_factory.mktemp("moe") / "qwen3moe-3of32.gguf"
    subprocess.run(
        [
            BINARY, "synth", "-o", str(path), "--arch", "qwen3moe", "--n-embd", "256", "--n-layer", "2",
            "--n-head", "4", "--n-head-kv", "2", "--experts", "32", "--experts-used", "3",
            "--n-ff-exp", "256", "--type", "q4_k", "--tokenizer", "smollm2-135m",
        ],
        check=True,
    )
    return str(path)


def run_users(model, *flags):
    s = Server("-c", "8192", "-np", "8", "--kv-unified", "--metrics", *flags, model=model)
    try:
        client = s.client()

        def ask(prompt):
            r = client.chat.completions.create(
                model="moe",
                messages=[{"role": "user", "content": prompt}],
                max_tokens=48,
                temperature=0,
                extra_body={"ignore_eos": True},
            )
            choice = r.choices[0]
            assert choice.finish_reason == "length"
            assert r.usage.completion_tokens == 48
            return choice.message.content

        with ThreadPoolExecutor(8) as pool:
            texts = list(pool.map(ask, PROMPTS))
        slots = s.get("/slots").json()
        assert all(not slot["is_processing"] for slot in slots)
        return texts, s.get("/metrics").text
    finally:
        s.stop()


def counter(metrics, name):
    line = next(l for l in metrics.splitlines() if l.startswith(name + " "))
    return float(line.split()[1])


def test_moe_serves_8_users_with_5_drafts_each(moe_model):
    plain, _ = run_users(moe_model)
    assert len(set(plain)) > 1, "different prompts should give different answers"
    drafted_texts, metrics = run_users(
        moe_model,
        "-md", moe_model, "--spec-draft-vocab", "0", "--spec-policy", "fixed", "--spec-draft-n-max", "5",
    )
    assert drafted_texts == plain
    drafted = counter(metrics, "vllm:spec_decode_num_draft_tokens")
    accepted = counter(metrics, "vllm:spec_decode_num_accepted_tokens")
    assert drafted >= 8 * 5
    assert accepted == drafted
