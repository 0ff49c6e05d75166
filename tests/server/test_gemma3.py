"""Gemma 3 270M through `tandem serve` with the official openai client: its file has no chat
template, so the server chooses Gemma's by architecture and says so; its SentencePiece
vocabulary streams text that is whole UTF-8 and equal to the unstreamed answer."""

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


def test_slots_are_saved_only_with_every_position_kept(tmp_path):
    """Its windowed blocks keep only the last 512 positions, so a slot cannot be saved whole:
    refused with a 400 naming --swa-full, which keeps every position and allows it."""
    body = {"prompt": "The old lighthouse keeper climbed the stairs " * 12, "n_predict": 4,
            "temperature": 0, "cache_prompt": True}
    s = Server("-c", "2048", "-np", "1", "--slot-save-path", str(tmp_path), model="gemma3-270m")
    try:
        slot = s.post("/completion", json=body).json()["id_slot"]
        r = s.post(f"/slots/{slot}?action=save", json={"filename": "g.bin"})
        assert r.status_code == 400 and "--swa-full" in r.json()["error"]["message"], r.text
    finally:
        s.stop()
    s = Server("-c", "2048", "-np", "1", "--swa-full", "--slot-save-path", str(tmp_path), model="gemma3-270m")
    try:
        first = s.post("/completion", json=body).json()
        saved = s.post(f"/slots/{first['id_slot']}?action=save", json={"filename": "g.bin"}).json()
        assert saved["n_saved"] >= first["tokens_evaluated"] // 16 * 16 > 0, saved
        erased = s.post(f"/slots/{first['id_slot']}?action=erase", json={}).json()
        assert erased["n_erased"] == saved["n_saved"], erased
        restored = s.post("/slots/0?action=restore", json={"filename": "g.bin"}).json()
        assert restored["n_restored"] == saved["n_saved"], restored
        again = s.post("/completion", json=body).json()
        assert again["content"] == first["content"] and again["tokens_cached"] > 0, again
    finally:
        s.stop()
