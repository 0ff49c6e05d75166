"""Structured output and the sampler chain through the real server, with the official openai
client: every answer under a JSON schema parses and validates (alone, 8 users at once each
with its own schema, and with a draft model, byte-identical to plain decoding); GBNF, regex
and choices constrain exactly; a grammar that does not compile is a 400 naming its field;
logit_bias keeps a token out; penalties change the text."""

import json
from concurrent.futures import ThreadPoolExecutor

import jsonschema
import openai
import pytest

from conftest import Server

NAME = {"type": "string", "minLength": 1, "maxLength": 24}

SCHEMAS = [
    {
        "type": "object",
        "properties": {
            "name": NAME,
            "age": {"type": "integer", "minimum": 0, "maximum": 130},
            "address": {
                "type": "object",
                "properties": {"city": NAME, "zip": {"type": "string", "pattern": "^[0-9]{5}$"}},
                "required": ["city", "zip"],
            },
        },
        "required": ["name", "age", "address"],
    },
    {
        "type": "object",
        "properties": {
            "items": {
                "type": "array",
                "minItems": 1,
                "maxItems": 3,
                "items": {
                    "type": "object",
                    "properties": {"sku": NAME, "qty": {"type": "integer", "minimum": 1, "maximum": 99}},
                    "required": ["sku", "qty"],
                },
            },
            "status": {"enum": ["open", "paid", "shipped"]},
        },
        "required": ["items", "status"],
    },
    {
        "type": "object",
        "properties": {
            "level": {"enum": ["debug", "info", "warn", "error"]},
            "tags": {"type": "array", "items": NAME, "maxItems": 4},
            "enabled": {"type": "boolean"},
        },
        "required": ["level", "tags", "enabled"],
    },
    {
        "type": "object",
        "properties": {
            "title": NAME,
            "when": {"type": "object", "properties": {"day": {"type": "integer", "minimum": 1, "maximum": 31},
                                                       "month": {"enum": ["jan", "feb", "mar", "apr"]}},
                     "required": ["day", "month"]},
            "guests": {"type": "array", "items": {"type": "object", "properties": {"name": NAME},
                                                  "required": ["name"]}, "maxItems": 3},
        },
        "required": ["title", "when", "guests"],
    },
]

PROMPTS = [
    "Describe a person as JSON.",
    "Write a customer order as JSON.",
    "Give a logging configuration in JSON.",
    "Plan a birthday party, answer in JSON.",
    "Invent a character for a story, as JSON.",
]

def closed(schema):
    """`schema` with additionalProperties false on every object, as OpenAI's strict mode asks."""
    if isinstance(schema, dict):
        schema = {k: closed(v) for k, v in schema.items()}
        if schema.get("type") == "object":
            schema["additionalProperties"] = False
    elif isinstance(schema, list):
        schema = [closed(v) for v in schema]
    return schema


SCHEMAS = [closed(s) for s in SCHEMAS]

CASES = [(p, SCHEMAS[i % len(SCHEMAS)]) for i in range(4) for p in PROMPTS]


def ask(client, model_id, prompt, schema, **kw):
    r = client.chat.completions.create(
        model=model_id,
        messages=[{"role": "user", "content": prompt}],
        max_tokens=300,
        temperature=0,
        response_format={"type": "json_schema", "json_schema": {"name": "answer", "schema": schema, "strict": True}},
        **kw,
    )
    return r.choices[0].message.content, r.choices[0].finish_reason


def check(answer, schema):
    text, finish = answer
    assert finish == "stop", (finish, text)
    jsonschema.validate(json.loads(text), schema)


def test_twenty_schema_answers_validate_alone_and_with_8_users(client, model_id):
    assert len(CASES) == 20
    alone = [ask(client, model_id, p, s) for p, s in CASES]
    for a, (_, s) in zip(alone, CASES):
        check(a, s)
    with ThreadPoolExecutor(8) as pool:
        together = list(pool.map(lambda c: ask(client, model_id, *c), CASES[:8]))
    for a, (_, s) in zip(together, CASES):
        check(a, s)
    assert together == alone[:8]


def test_schema_answers_with_a_draft_model_are_the_plain_ones(client, model_id):
    plain = [ask(client, model_id, p, s) for p, s in CASES[:8]]
    # The fixed policy drafts every step (the adaptive one may judge drafting not to pay at 8
    # users and draft nothing), so every answer is verified under its grammar.
    s = Server("-c", "8192", "-np", "8", "--kv-unified", "--metrics", "-md", "smollm2-135m",
               "--spec-draft-vocab", "0", "--spec-policy", "fixed", "--spec-draft-n-max", "4")
    try:
        c = s.client()
        with ThreadPoolExecutor(8) as pool:
            drafted = list(pool.map(lambda case: ask(c, model_id, *case), CASES[:8]))
        metrics = s.get("/metrics").text
    finally:
        s.stop()
    assert drafted == plain
    accepted = next(l for l in metrics.splitlines() if l.startswith("vllm:spec_decode_num_accepted_tokens "))
    assert float(accepted.split()[1]) > 0, metrics


def native(server, **body):
    r = server.post("/completion", json={"temperature": 0, "n_predict": 24, **body})
    return r


def test_gbnf_repetition_gives_exactly_five(server):
    r = native(server, prompt="Say something:", grammar='root ::= "a"{5,5}')
    assert r.status_code == 200, r.text
    assert r.json()["content"] == "aaaaa"


def test_regex_and_choice_constrain_the_answer(client, model_id):
    r = client.chat.completions.create(
        model=model_id, messages=[{"role": "user", "content": "Is water wet?"}], max_tokens=20, temperature=0,
        extra_body={"guided_regex": "(yes|no), [a-z]{2,10}\\."},
    )
    text = r.choices[0].message.content
    assert text.split(",")[0] in ("yes", "no") and text.endswith("."), text
    r = client.chat.completions.create(
        model=model_id, messages=[{"role": "user", "content": "Pick a fruit."}], max_tokens=20, temperature=0,
        extra_body={"guided_choice": ["apple", "banana", "cherry"]},
    )
    assert r.choices[0].message.content in ("apple", "banana", "cherry")


@pytest.mark.parametrize(
    "extra, field",
    [
        ({"grammar": 'root ::= "a'}, "grammar"),
        ({"grammar": "root ::= undefined-rule"}, "grammar"),
        ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "nonsense"}}}},
         "response_format.json_schema.schema"),
        ({"json_schema": {"type": "object", "properties": {"a": {"type": 7}}}}, "json_schema"),
        ({"guided_regex": "(unclosed"}, "guided_regex"),
        ({"response_format": {"type": "xml"}}, "response_format.type"),
        ({"grammar": 'root ::= "a"', "guided_regex": "a"}, "guided_regex"),
        ({"xtc_probability": 0.5}, "xtc_probability"),
        ({"dry_multiplier": 0.8, "dry_allowed_length": 0}, "dry_allowed_length"),
        ({"logit_bias": {"99999999": 1}}, "logit_bias"),
    ],
)
def test_what_does_not_compile_is_a_400_naming_the_field(client, model_id, extra, field):
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(
            model=model_id, messages=[{"role": "user", "content": "Hi"}], max_tokens=4, extra_body=extra
        )
    assert e.value.body["param"] == field, e.value.body


def test_logit_bias_keeps_a_token_out(server):
    prompt = "The capital of France is"
    base = native(server, prompt=prompt).json()["tokens"]
    banned = base[0]
    for bias in ({str(banned): -100}, [[banned, -100]], [[banned, False]]):
        r = native(server, prompt=prompt, logit_bias=bias)
        assert r.status_code == 200, r.text
        tokens = r.json()["tokens"]
        assert banned not in tokens and tokens != base, (bias, tokens)


def test_penalties_change_a_repetitive_answer(server):
    prompt = "Repeat the word 'cat' ten times: cat cat cat"
    plain = native(server, prompt=prompt).json()["content"]
    for field in ({"presence_penalty": 2.0}, {"frequency_penalty": 2.0}, {"repeat_penalty": 1.8}):
        changed = native(server, prompt=prompt, **field).json()["content"]
        assert changed != plain, field
        assert changed.count("cat") < plain.count("cat"), (field, plain, changed)
