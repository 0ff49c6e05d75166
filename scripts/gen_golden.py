#!/usr/bin/env python3
"""Reference data from a llama-server for a model, in the layout of ../shared/data/golden.

usage: scripts/gen_golden.py LLAMA_SERVER MODEL.gguf OUT.json --hard GOLDEN.json
           [--chat-template NAME (llama.cpp's built-in, for a file without one)] [--extra-hard TEXT ...] [--port 8097]

Writes `tokenize` (the two evaluation texts of tests/data and the hard strings of GOLDEN.json
plus any --extra-hard, each `plain` = add_special false, parse_special false, and `special` =
both true), `templates` (three conversations rendered by the server's template, with the
generation prompt) and `greedy` (three chat prompts: 64 greedy tokens and each position's top
5 [id, logprob]). The server runs on CPU with 2 threads at 127.0.0.1 and is stopped at the end.
"""
import argparse
import json
import os
import subprocess
import sys
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONVERSATIONS = [
    [{"role": "user", "content": "Hello!"}],
    [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "What is 2+2?"}],
    [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello, how can I help?"},
        {"role": "user", "content": "Tell me a joke."},
    ],
]
GREEDY_USERS = [
    "Write a Python function that checks whether a number is prime.",
    "Explain in three sentences why the sky is blue.",
    "List five fruits and their colors.",
]


def post(port, path, body):
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.loads(r.read())


def wait_ready(port, proc):
    for _ in range(600):
        if proc.poll() is not None:
            sys.exit(f"llama-server exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.5)
    sys.exit("llama-server did not become ready")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("server")
    ap.add_argument("model")
    ap.add_argument("out")
    ap.add_argument("--hard", required=True)
    ap.add_argument("--chat-template")
    ap.add_argument("--extra-hard", nargs="*", default=[])
    ap.add_argument("--port", type=int, default=8097)
    a = ap.parse_args()

    hard = json.load(open(a.hard))["tokenize"]
    texts = {name: open(os.path.join(ROOT, "tests/data", name)).read()
             for name in ("eval-prose.txt", "eval-code.txt")}
    hard_texts = [c["text"] for c in hard.values() if c.get("text") is not None] + a.extra_hard

    cmd = [a.server, "-m", a.model, "-t", "2", "-c", "4096", "--port", str(a.port),
           "--host", "127.0.0.1", "-np", "1"]
    if a.chat_template:
        cmd += ["--chat-template", a.chat_template, "--no-jinja"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_ready(a.port, proc)
        tok = lambda t, sp: post(a.port, "/tokenize", {
            "content": t, "add_special": sp, "parse_special": sp})["tokens"]
        tokenize = {}
        for name, t in texts.items():
            tokenize[name] = {"plain": tok(t, False), "special": tok(t, True)}
        for i, t in enumerate(hard_texts):
            tokenize[f"hard-{i}"] = {"text": t, "plain": tok(t, False), "special": tok(t, True)}
        render = lambda msgs: post(a.port, "/apply-template", {"messages": msgs})["prompt"]
        templates = [{"messages": m, "prompt": render(m)} for m in CONVERSATIONS]
        greedy = []
        for user in GREEDY_USERS:
            prompt = render([{"role": "user", "content": user}])
            r = post(a.port, "/completion", {
                "prompt": prompt, "n_predict": 64, "temperature": 0, "n_probs": 5,
                "cache_prompt": False, "return_tokens": True})
            probs = r["completion_probabilities"]
            greedy.append({
                "user": user,
                "prompt": prompt,
                "prompt_tokens": tok(prompt, True),
                "text": r["content"],
                "tokens": [p["id"] for p in probs],
                "top5": [[[t["id"], round(t["logprob"], 5)] for t in p["top_logprobs"]]
                         for p in probs],
            })
    finally:
        proc.terminate()
        proc.wait()
    version = subprocess.run([a.server, "--version"], capture_output=True, text=True)
    producer = (version.stdout + version.stderr).strip().splitlines()[0:1]
    json.dump({
        "model": os.path.basename(a.model),
        "producer": f"llama-server (CPU, -t 2): {' '.join(producer)}",
        "tokenize": tokenize,
        "templates": templates,
        "greedy": greedy,
    }, open(a.out, "w"), ensure_ascii=False, indent=1)


if __name__ == "__main__":
    main()
