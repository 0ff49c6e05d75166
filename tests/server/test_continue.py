"""The end of a chat prompt, as llama-server and vLLM have it: a final assistant message is
continued by default (the conversation before it rendered with the assistant's turn open, its
text appended), `continue_final_message: false` opens a new turn after it, and
`add_generation_prompt: false` leaves the turn closed; asking to continue and to open a new turn
at once, continuing a message that is not the assistant's, or these fields on /v1/completions,
are 400s naming the field."""

USER = {"role": "user", "content": "Tell me a story about a fox."}
PREFILL = {"role": "assistant", "content": "Once upon a time, a fox"}


def prompt(server, messages, **kw):
    r = server.post("/apply-template", json={"messages": messages, **kw})
    assert r.status_code == 200, r.text
    return r.json()["prompt"]


def test_a_final_assistant_message_is_continued(server):
    opened = prompt(server, [USER])
    continued = prompt(server, [USER, PREFILL])
    assert continued == opened + PREFILL["content"]
    assert prompt(server, [USER, PREFILL], continue_final_message=True) == continued
    r = server.client().chat.completions.create(
        model="m", messages=[USER, PREFILL], max_tokens=24, temperature=0)
    raw = server.post("/completion", json={"prompt": continued, "n_predict": 24, "temperature": 0}).json()
    assert r.choices[0].message.content == raw["content"]


def test_a_new_turn_or_none_after_a_final_assistant_message(server):
    closed = prompt(server, [USER, PREFILL], continue_final_message=False, add_generation_prompt=False)
    new_turn = prompt(server, [USER, PREFILL], continue_final_message=False)
    opened = prompt(server, [USER])
    assert closed.startswith(opened + PREFILL["content"]) and len(closed) > len(opened + PREFILL["content"])
    assert new_turn.startswith(closed) and new_turn != closed
    assert new_turn.endswith(opened[len(prompt(server, [USER], add_generation_prompt=False)):])


def test_contradictions_are_400s_naming_the_field(server):
    for body, field in [
        ({"messages": [USER, PREFILL], "continue_final_message": True, "add_generation_prompt": True},
         "continue_final_message"),
        ({"messages": [USER], "continue_final_message": True}, "continue_final_message"),
        ({"messages": [USER, PREFILL, PREFILL]}, "messages[2]"),
    ]:
        r = server.post("/v1/chat/completions", json={"model": "m", "max_tokens": 4, **body})
        assert r.status_code == 400 and field in r.json()["error"]["message"], r.text
    r = server.post("/v1/completions", json={"model": "m", "prompt": "Hi", "continue_final_message": True})
    assert r.status_code == 400 and r.json()["error"]["param"] == "continue_final_message", r.text
