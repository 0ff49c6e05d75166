"""Gemma 3 270M through `tandem serve` with the official openai client: its file has no chat
template, so the server chooses Gemma's by architecture and says so; its SentencePiece
vocabulary streams text that is whole UTF-8 and equal to the unstreamed answer; a slot saved
past its sliding window carries that window to the server that restores it."""

from pathlib import Path

import pytest

from conftest import Server


@pytest.fixture(scope="module")
def gemma():
    s = Server("-c", "2048", "-np", "2", model="gemma3-270m")
    yield s
    s.stop()


def test_start_line_names_the_template_chosen_by_architecture(gemma):
    assert "chat template: built-in 'gemma' (the file has none; chosen by architecture)" in gemma.output()


def test_chat_renders_gemma_turns_and_answers(gemma):
    c = gemma.client()
    r = c.chat.completions.create(
        model="gemma3",
        messages=[
            {"role": "system", "content": "You are terse."},
            {"role": "user", "content": "What is the capital of France?"},
        ],
        max_tokens=16,
        temperature=0,
    )
    # <bos> and the turn markers are one token each: the prompt is short.
    assert 15 <= r.usage.prompt_tokens <= 30, r.usage
    assert r.usage.completion_tokens >= 1
    assert r.choices[0].message.content
    assert "<start_of_turn>" not in r.choices[0].message.content


def test_streamed_text_equals_the_whole_answer(gemma):
    c = gemma.client()
    ask = dict(
        model="gemma3",
        messages=[{"role": "user", "content": "Write the word café and a smiling emoji 😀 three times."}],
        max_tokens=40,
        temperature=0,
    )
    whole = c.chat.completions.create(**ask).choices[0].message.content
    parts = [
        ch.choices[0].delta.content or ""
        for ch in c.chat.completions.create(stream=True, **ask)
        if ch.choices
    ]
    assert "".join(parts) == whole
    assert "\ufffd" not in whole


def test_a_slot_is_saved_with_its_last_window_and_restored(tmp_path):
    """Its windowed blocks keep only the last 512 positions: a saved slot holds the whole blocks and
    the windowed layers' last window. A conversation past the window, saved by one server and
    restored by a second, continues there from the whole restored prefix with the text a server
    that kept it computes; with --swa-full (every position kept) the same holds, and a server
    without it refuses that file."""
    prose = (Path(__file__).parent.parent / "data" / "eval-prose.txt").read_text()[:3200]
    for flags in ([], ["--swa-full"]):
        args = ("-c", "2048", "-np", "1", *flags, "--slot-save-path", str(tmp_path))
        s = Server(*args, model="gemma3-270m")
        try:
            prompt = s.post("/tokenize", json={"content": prose, "add_special": True}).json()["tokens"]
            more = s.post("/tokenize", json={"content": " And then", "add_special": False}).json()["tokens"]
            body = {"prompt": prompt, "n_predict": 8, "n_probs": 1, "temperature": 0, "cache_prompt": True}
            first = s.post("/completion", json=body).json()
            answer = [t["id"] for t in first["completion_probabilities"]]
            saved = s.post(f"/slots/{first['id_slot']}?action=save", json={"filename": "g.bin"}).json()
            assert saved["n_saved"] == (len(prompt) + len(answer) - 1) // 16 * 16, saved
            turn2 = {**body, "prompt": prompt + answer + more}
            want = s.post("/completion", json=turn2).json()["content"]
        finally:
            s.stop()
        s = Server(*args, model="gemma3-270m")
        try:
            restored = s.post("/slots/0?action=restore", json={"filename": "g.bin"}).json()
            assert restored["n_restored"] == saved["n_saved"], restored
            again = s.post("/completion", json=turn2).json()
            assert again["tokens_cached"] == saved["n_saved"], (flags, again["tokens_cached"])
            assert again["content"] == want, flags
            erased = s.post("/slots/0?action=erase", json={}).json()
            assert erased["n_erased"] > 0, erased
        finally:
            s.stop()
    # The file saved with --swa-full has another layout: a server keeping windows refuses it.
    s = Server("-c", "2048", "-np", "1", "--slot-save-path", str(tmp_path), model="gemma3-270m")
    try:
        r = s.post("/slots/0?action=restore", json={"filename": "g.bin"})
        assert r.status_code == 400 and "--swa-full" in r.json()["error"]["message"], r.text
    finally:
        s.stop()
