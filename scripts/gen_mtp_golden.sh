#!/usr/bin/env bash
# llama.cpp's multi-token-prediction drafts on synthetic models with one NextN block, as
# golden data: a qwen35 and a deepseek4 (its streams entering the block) that `tandem synth`
# writes with the arguments below (f32 weights, SmolLM2's tokenizer cut to 320 tokens),
# each served by llama-server with `--spec-type draft-mtp --spec-draft-n-max 3` and an f32
# KV cache; one completion of PROMPT at temperature 0 for 256 tokens. Its debug log gives
# each draft call's three candidates per draft position; they go with the prompt's and the
# answer's tokens and the completion's timings to
# crates/engine/tests/golden/{qwen35,deepseek4}-mtp.llamacpp.json, which
# crates/engine/tests/mtp.rs compares tandem's drafts with.
#
# usage: scripts/gen_mtp_golden.sh TANDEM_BINARY LLAMA_SERVER_BINARY
# (the arguments must match the shapes in crates/engine/tests/mtp.rs)
set -euo pipefail
cd "$(dirname "$0")/.."
tandem=$1
server=$2
tmp=$(mktemp -d)
port=18931
pid=
trap 'kill $pid 2>/dev/null || true; rm -rf "$tmp"' EXIT
# golden NAME SEED SYNTH_ARGS...: the model synth writes with SYNTH_ARGS, served; its
# drafts to crates/engine/tests/golden/NAME-mtp.llamacpp.json.
golden() {
    local name=$1 seed=$2
    shift 2
    "$tandem" synth -o "$tmp/m.gguf" "$@" --nextn 1 --type f32 --tokenizer smollm2-135m \
        --vocab 320 --seed "$seed"
    "$server" -m "$tmp/m.gguf" --spec-type draft-mtp --spec-draft-n-max 3 --port "$port" \
        -np 1 -c 4096 -t 2 -ctk f32 -ctv f32 -v >"$tmp/log" 2>&1 &
    pid=$!
    for _ in $(seq 1 60); do
        curl -sf "127.0.0.1:$port/health" >/dev/null && break
        sleep 1
    done
    OUT="crates/engine/tests/golden/$name-mtp.llamacpp.json" PORT=$port LOG="$tmp/log" \
        python3 scripts/golden_drafts.py
    kill $pid
    wait $pid 2>/dev/null || true
    pid=
}
golden qwen35 7 --arch qwen35 --experts 0 --n-embd 128 --n-layer 4 --n-head 4 --n-head-kv 2 \
    --n-ff 256 --ssm-state-size 32 --ssm-group-count 2 --ssm-time-step-rank 4
# Seed 3: its answer has no near-tie between the two implementations' greedy choices (seed
# 7's two best logits at its eighth token are 0.011 apart, which rounding decides).
golden deepseek4 3 --arch deepseek4
