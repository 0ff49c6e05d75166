"""llama-server's /infill on Qwen2.5-Coder-0.5B: the answer is /completion's answer to the FIM prompt
built as llama-server builds it (repo-level pattern: <|repo_name|>myproject, a <|file_sep|> per extra
chunk with its file name, then <|fim_prefix|>prefix<|fim_suffix|>suffix<|fim_middle|>), whole and
streamed; with --spm-infill the suffix comes first; a model without FIM tokens gets a 400 saying so."""

import json

import httpx
import pytest

from conftest import Server

PREFIX = "def add(a, b):\n    "
SUFFIX = "\n\n\nprint(add(2, 3))\n"
EXTRA = [{"filename": "utils.py", "text": "def sub(a, b):\n    return a - b\n"}]


@pytest.fixture(scope="module")
def qwen():
    # A batch of 512 leaves room in a slot of 2048 for the extra context (llama-server takes what is left
    # after a batch and twice n_predict).
    s = Server("-c", "4096", "-np", "2", "-b", "512", model="qwen2.5-coder-0.5b")
    yield s
    s.stop()


def fim_text(extra=()):
    chunks = "".join(f"<|file_sep|>{c['filename']}\n{c['text']}" for c in extra)
    return (f"<|repo_name|>myproject\n{chunks}<|file_sep|>filename\n"
            f"<|fim_prefix|>{PREFIX}<|fim_suffix|>{SUFFIX}<|fim_middle|>")


def test_infill_is_the_completion_of_the_fim_prompt(qwen):
    for extra in ([], EXTRA):
        got = qwen.post("/infill", json={"input_prefix": PREFIX, "input_suffix": SUFFIX, "input_extra": extra,
                                         "n_predict": 16, "temperature": 0}).json()
        want = qwen.post("/completion", json={"prompt": fim_text(extra), "n_predict": 16, "temperature": 0}).json()
        assert got["content"] == want["content"] and got["tokens_evaluated"] == want["tokens_evaluated"], got
        assert got["content"].strip(), got
    assert "return a + b" in got["content"] or "a + b" in got["content"], got["content"]


def test_a_streamed_infill_is_the_whole_one(qwen):
    body = {"input_prefix": PREFIX, "input_suffix": SUFFIX, "n_predict": 16, "temperature": 0}
    whole = qwen.post("/infill", json=body).json()["content"]
    text = ""
    with httpx.stream("POST", qwen.url + "/infill", json={**body, "stream": True}, timeout=60) as r:
        for line in r.iter_lines():
            if line.startswith("data: "):
                text += json.loads(line[6:])["content"]
    assert text == whole


def test_a_model_without_fim_tokens_is_a_400(server):
    r = server.post("/infill", json={"input_prefix": "a", "input_suffix": "b"})
    assert r.status_code == 400 and "fill-in-the-middle" in r.json()["error"]["message"], r.text


def test_extra_context_is_cut_to_fit_the_slot(qwen):
    huge = [{"filename": f"f{i}.py", "text": "x = 1\n" * 2000} for i in range(4)]
    r = qwen.post("/infill", json={"input_prefix": PREFIX * 200, "input_suffix": SUFFIX * 200,
                                   "input_extra": huge, "n_predict": 8, "temperature": 0})
    assert r.status_code == 200, r.text
    # Extra context up to the slot less a batch and twice n_predict, 3/4 of a batch of prefix, the rest of
    # the last quarter of suffix, and the three FIM tokens: 1520 + 384 + 126 + 3.
    assert r.json()["tokens_evaluated"] == 2033


def test_spm_infill_puts_the_suffix_first():
    s = Server("-c", "4096", "-np", "2", "-b", "512", "--spm-infill", model="qwen2.5-coder-0.5b")
    try:
        got = s.post("/infill", json={"input_prefix": PREFIX, "input_suffix": SUFFIX, "n_predict": 12,
                                      "temperature": 0}).json()
        text = (f"<|repo_name|>myproject\n<|file_sep|>filename\n"
                f"<|fim_suffix|>{SUFFIX}<|fim_prefix|>{PREFIX}<|fim_middle|>")
        want = s.post("/completion", json={"prompt": text, "n_predict": 12, "temperature": 0}).json()
        assert got["content"] == want["content"] and got["tokens_evaluated"] == want["tokens_evaluated"]
    finally:
        s.stop()
