#!/usr/bin/env bash
# llama.cpp's multi-token-prediction drafts on a synthetic qwen35 with one NextN block, as
# golden data: the model `tandem synth` writes with the arguments below (f32 weights,
# SmolLM2's tokenizer cut to 320 tokens), served by llama-server with `--spec-type
# draft-mtp --spec-draft-n-max 3` and an f32 KV cache; one completion of PROMPT at
# temperature 0 for 256 tokens. Its debug log gives each draft call's three candidates per
# draft position; they go with the prompt's and the answer's tokens and the completion's
# timings to crates/engine/tests/golden/qwen35-mtp.llamacpp.json, which
# crates/engine/tests/mtp.rs compares tandem's drafts with.
#
# usage: scripts/gen_mtp_golden.sh TANDEM_BINARY LLAMA_SERVER_BINARY
# (the arguments must match SHAPE in crates/engine/tests/mtp.rs)
set -euo pipefail
cd "$(dirname "$0")/.."
tandem=$1
server=$2
tmp=$(mktemp -d)
port=18931
trap 'kill "$pid" 2>/dev/null || true; rm -rf "$tmp"' EXIT
"$tandem" synth -o "$tmp/m.gguf" --arch qwen35 --experts 0 --n-embd 128 --n-layer 4 \
    --n-head 4 --n-head-kv 2 --n-ff 256 --ssm-state-size 32 --ssm-group-count 2 \
    --ssm-time-step-rank 4 --nextn 1 --type f32 --tokenizer smollm2-135m --vocab 320 --seed 7
"$server" -m "$tmp/m.gguf" --spec-type draft-mtp --spec-draft-n-max 3 --port "$port" -np 1 \
    -c 4096 -t 2 -ctk f32 -ctv f32 -v >"$tmp/log" 2>&1 &
pid=$!
for _ in $(seq 1 60); do
    curl -sf "127.0.0.1:$port/health" >/dev/null && break
    sleep 1
done
PORT=$port LOG="$tmp/log" python3 - <<'PY'
import json, os, re, urllib.request

PROMPT = "The quick brown fox jumps over the lazy dog. Once upon a time"
url = f"http://127.0.0.1:{os.environ['PORT']}"

def post(path, body):
    req = urllib.request.Request(url + path, json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    return json.load(urllib.request.urlopen(req))

prompt = post("/tokenize", {"content": PROMPT})["tokens"]
done = post("/completion", {"prompt": PROMPT, "n_predict": 256, "temperature": 0,
                            "return_tokens": True})
cand = re.compile(r"draft candidate +(\d+), pos +(\d+): +(\d+) \( *([0-9.]+)\)")
step = re.compile(r"generate_draft: id=(\d+), #tokens=(\d+), #draft=(\d+)")
steps, pending = [], {}
for line in open(os.environ["LOG"], errors="replace"):
    if m := cand.search(line):
        k, pos, tok, p = int(m[1]), int(m[2]), int(m[3]), float(m[4])
        pending.setdefault(pos, []).append([tok, p])
    elif m := step.search(line):
        drafts = [pending[pos] for pos in sorted(pending)]
        steps.append({"n_past": int(m[2]), "id_last": int(m[1]), "candidates": drafts})
        pending = {}
t = done["timings"]
out = {
    "prompt": PROMPT,
    "prompt_tokens": prompt,
    "answer_tokens": done["tokens"],
    "draft_n": t["draft_n"],
    "draft_n_accepted": t["draft_n_accepted"],
    "steps": steps,
}
path = "crates/engine/tests/golden/qwen35-mtp.llamacpp.json"
with open(path, "w") as f:
    json.dump(out, f, separators=(",", ":"))
    f.write("\n")
print(f"{path}: {len(steps)} draft calls, {t['draft_n_accepted']} of {t['draft_n']} accepted")
PY
