"""`tandem serve --device gpu` through the openai client: the wgpu backend answers a chat,
and with a draft model (both on the device) gives the same text, every draft accepted when
the draft is the target itself (the device's rows are batch-invariant). CI runs it on Mesa's
lavapipe, a Vulkan device on the CPU: slow, so the context, the physical batch (which bounds
the start-up calibration's forwards) and the answers are small."""

import os

import pytest

from conftest import Server

SMALL = ["--device", "gpu", "-c", "512", "-ub", "8", "-np", "1", "--metrics"]
PROMPT = "What is the capital of France?"


def gpu_server(*flags):
    try:
        return Server(*SMALL, *flags, timeout=600)
    except RuntimeError as e:
        if "no adapter found" in str(e) and not os.environ.get("TANDEM_REQUIRE_GPU"):
            pytest.skip("wgpu finds no adapter (install Mesa's lavapipe: mesa-vulkan-drivers)")
        raise


def chat(server):
    r = server.client().chat.completions.create(
        model="any",
        messages=[{"role": "user", "content": PROMPT}],
        max_tokens=8,
        temperature=0,
    )
    return r


def counter(metrics, name):
    line = next(l for l in metrics.splitlines() if l.startswith(name + " "))
    return float(line.split()[1])


@pytest.fixture(scope="module")
def plain():
    s = gpu_server()
    try:
        assert "device: gpu (" in s.output()
        return chat(s)
    finally:
        s.stop()


def test_the_gpu_answers_a_chat(plain):
    assert "Paris" in plain.choices[0].message.content
    assert plain.choices[0].finish_reason in ("stop", "length")
    assert 0 < plain.usage.completion_tokens <= 8


def test_a_draft_model_on_the_gpu_keeps_the_text_and_is_always_right_about_itself(plain):
    s = gpu_server(
        "-md", "smollm2-135m", "--spec-draft-vocab", "0", "--spec-policy", "fixed", "--spec-draft-n-max", "3"
    )
    try:
        r = chat(s)
        metrics = s.get("/metrics").text
    finally:
        s.stop()
    assert r.choices[0].message.content == plain.choices[0].message.content
    drafted = counter(metrics, "vllm:spec_decode_num_draft_tokens")
    assert drafted > 0
    assert counter(metrics, "vllm:spec_decode_num_accepted_tokens") == drafted
