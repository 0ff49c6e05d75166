#!/usr/bin/env python3
"""What a JSON-schema constraint costs: `tandem serve` answers the same prompts plainly and
under a 20-field schema (response_format json_schema), 1 and 8 users at once, in one run per
model. Reported per arm: served tok/s (all completion tokens over the wall time), the mean
decode tok/s of a request (its own timings), and for the schema arm the time the grammar's
took per token (timings.grammar_ms / predicted_n: the mask and advancing past the token),
times the users (each decoding user's mask is computed in every step), against the decode
step time at the same number of users (1000 / the plain arm's per-request decode tok/s). Schema answers end
where their JSON does; each plain answer is then made exactly as long (ignore_eos), so that
both arms attend over the same lengths.

usage: scripts/bench_constraint.py BINARY [--models smollm2-135m,qwen2.5-coder-1.5b]
       [--users 1,8] [--threads 2] [--json OUT]
"""
import argparse
import json
import os
import re
import signal
import subprocess
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor

S = {"type": "string", "minLength": 1, "maxLength": 16}
FIELDS = {
    "name": S, "email": S, "city": S, "country": S, "company": S, "title": S,
    "age": {"type": "integer", "minimum": 0, "maximum": 120},
    "score": {"type": "number"},
    "active": {"type": "boolean"},
    "verified": {"type": "boolean"},
    "plan": {"enum": ["free", "pro", "team"]},
    "level": {"enum": ["low", "mid", "high"]},
    "tags": {"type": "array", "items": S, "maxItems": 3},
    "langs": {"type": "array", "items": {"enum": ["en", "fr", "de", "es"]}, "maxItems": 3},
    "address": {"type": "object", "properties": {"street": S, "zip": {"type": "string", "pattern": "^[0-9]{5}$"}},
                "required": ["street", "zip"], "additionalProperties": False},
    "manager": S, "team": S,
    "joined": {"type": "integer", "minimum": 1990, "maximum": 2030},
    "rating": {"type": "integer", "minimum": 1, "maximum": 5},
    "notes": {"type": "string", "maxLength": 40},
}
SCHEMA = {"type": "object", "properties": FIELDS, "required": list(FIELDS), "additionalProperties": False}
assert len(FIELDS) == 20

PROMPTS = [
    "Describe a new employee of a software company as a JSON record.",
    "Write the profile of a customer of a bakery, as JSON.",
    "Invent a user account for a music streaming service, in JSON.",
    "Create a JSON record for a volunteer at a library.",
    "Give a JSON profile of a teacher at a primary school.",
    "Describe a member of a climbing club as a JSON object.",
    "Write a JSON record for an engineer at a train company.",
    "Make up a JSON profile for a doctor in a small town.",
]


def post(url, body):
    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=1800) as r:
        return json.loads(r.read())


def start(binary, model, threads):
    log = tempfile.NamedTemporaryFile(prefix="bench-constraint-", suffix=".log", delete=False).name
    proc = subprocess.Popen(
        [binary, "serve", "-m", model, "--port", "0", "-t", str(threads), "-np", "8", "-c", "16384",
         "--kv-unified"],
        stdout=open(log, "w"), stderr=subprocess.STDOUT)
    deadline = time.time() + 600
    while time.time() < deadline:
        text = open(log).read()
        m = re.search(r"listening on (http://[\d.]+:\d+)", text)
        if m and "ready in" in text:
            return proc, m.group(1)
        if proc.poll() is not None:
            raise RuntimeError(text)
        time.sleep(0.2)
    raise RuntimeError(open(log).read())


def run(url, users, lengths, schema):
    """`users` requests at once; plain ones generate `lengths[i]` tokens (ignore_eos), schema
    ones until their JSON ends (at most 1024)."""
    def one(i):
        body = {"messages": [{"role": "user", "content": PROMPTS[i % len(PROMPTS)]}],
                "temperature": 0, "cache_prompt": False}
        if schema:
            body["response_format"] = {"type": "json_schema", "json_schema": {"name": "r", "schema": SCHEMA}}
            body["max_tokens"] = 1024
        else:
            body["ignore_eos"] = True
            body["max_tokens"] = lengths[i]
        return post(url + "/v1/chat/completions", body)

    post(url + "/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4})
    t0 = time.time()
    with ThreadPoolExecutor(users) as pool:
        answers = list(pool.map(one, range(users)))
    wall = time.time() - t0
    n = sum(a["usage"]["completion_tokens"] for a in answers)
    decode = [a["timings"]["predicted_per_second"] for a in answers]
    grammar_ms = sum(a["timings"].get("grammar_ms", 0.0) for a in answers)
    if schema:
        for a in answers:
            assert a["choices"][0]["finish_reason"] == "stop", a
            json.loads(a["choices"][0]["message"]["content"])
    return {"users": users, "schema": schema, "lengths": [a["usage"]["completion_tokens"] for a in answers],
            "tokens": n, "wall_s": wall, "served_tok_s": n / wall,
            "decode_tok_s": sum(decode) / len(decode), "grammar_ms_per_token": grammar_ms / n}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binary")
    ap.add_argument("--models", default="smollm2-135m,qwen2.5-coder-1.5b")
    ap.add_argument("--users", default="1,8")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json")
    a = ap.parse_args()
    rows = []
    for model in a.models.split(","):
        proc, url = start(a.binary, model, a.threads)
        try:
            for users in [int(u) for u in a.users.split(",")]:
                constrained = run(url, users, None, True)
                plain = run(url, users, constrained["lengths"], False)
                # Every decoding user's mask is computed on the engine thread in each step.
                step_ms = 1000.0 / plain["decode_tok_s"]
                share = users * constrained["grammar_ms_per_token"] / step_ms
                rows.append({"model": model, "plain": plain, "schema": constrained, "step_ms": step_ms,
                             "mask_share_of_step": share})
                print(f"{model} {users} user(s): served tok/s plain {plain['served_tok_s']:.1f} schema "
                      f"{constrained['served_tok_s']:.1f} ({constrained['served_tok_s'] / plain['served_tok_s']:.3f}x); "
                      f"decode tok/s per request {plain['decode_tok_s']:.1f} / {constrained['decode_tok_s']:.1f}; "
                      f"grammar {constrained['grammar_ms_per_token']:.3f} ms/token, x{users} per step = "
                      f"{100 * share:.2f}% of a {step_ms:.1f} ms step", flush=True)
        finally:
            os.kill(proc.pid, signal.SIGTERM)
            proc.wait()
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"schema_fields": len(FIELDS), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
