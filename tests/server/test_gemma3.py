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
