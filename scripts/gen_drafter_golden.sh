#!/usr/bin/env bash
# llama.cpp's drafts from drafters of a target's features, EAGLE-3 (`draft-eagle3`) and DFlash
# (`draft-dflash`), on a synthetic llama target, as golden data: the files `tandem synth`
# writes with the arguments below (f32 weights, SmolLM2's tokenizer cut to 320 tokens; each
# drafter reads the inputs of the target's blocks 1, 2 and 3; with its own embeddings and
# output head, with the target's (`--target-head`), and with its own over 160 tokens of the
# 320 (`--draft-vocab 160`: d2t)), served by llama-server with
# `-md DRAFTER --spec-type draft-eagle3 --spec-draft-n-max 3` (DFlash: `draft-dflash`, 4 of
# a block of 8) and f32 KV caches; one completion of PROMPT at temperature 0 for 256
# tokens, its end token ignored. Its debug log gives each draft call's three candidates per
# draft position; they go with the prompt's and the answer's tokens and the completion's
# timings to crates/engine/tests/golden/llama-{eagle3,dflash}{,-target-head,-d2t}.llamacpp.json,
# which crates/engine/tests/feature_drafters.rs compares tandem's drafts with. DSpark
# (`draft-dspark`, 4 drafts of a block of 8, a Markov head of rank 32) three ways: alone
# (llama-dspark), with its confidence head and `--spec-draft-p-min 0.5` (llama-dspark-conf),
# and with a bonus anchor over the reduced vocabulary (llama-dspark-bonus-d2t). DFlash 2
# (`draft-dflash` on a `--dflash2` file, 4 of a block of 8 at `--spec-draft-p-min 0.7`) logs
# no candidates: its golden data (llama-dflash2) is each draft call's length, which the
# selector's probabilities decide. DSpark over a DeepSeek-V4 backbone (`--backbone deepseek4`:
# llama.cpp's `graph_dsv4`; its stages use all 4 of their experts, so that no routing choice
# can tie within the two implementations' rounding, as a random router's otherwise does
# every few hundred tokens): two stages reading blocks 1, 3 and 5 of a llama target as wide
# (256 × 6), alone (deepseek4-dspark) and with its confidence head at
# `--spec-draft-p-min 0.5` (deepseek4-dspark-conf). Not of a deepseek4 target: llama.cpp's
# DeepSeek-V4 reads a token decoded alone otherwise than among a verified block (its greedy
# answer to PROMPT here changes at the 15th token with drafting on), so the features its
# drafter was given depend on how the answer was verified; the same drafter of the deepseek4
# `tandem synth --arch deepseek4` writes by default (f32, seed 3, no NextN block), whose
# features are its streams averaged, is golden data over its first 64 draft calls
# (deepseek4-dspark-of-deepseek4). `ONLY=NAME` makes only that golden file.
#
# usage: scripts/gen_drafter_golden.sh TANDEM_BINARY LLAMA_SERVER_BINARY
# (the arguments must match the shapes in crates/engine/tests/feature_drafters.rs)
set -euo pipefail
cd "$(dirname "$0")/.."
tandem=$1
server=$2
tmp=$(mktemp -d)
port=18932
pid=
trap 'kill $pid 2>/dev/null || true; rm -rf "$tmp"' EXIT
# golden NAME [VAR=VALUE...] -- ARGS...: llama-server on the target and the drafter
# $tmp/d.gguf with ARGS; its drafts (golden_drafts.py, with the variables given) to
# crates/engine/tests/golden/NAME.llamacpp.json.
golden() {
    local name=$1 vars=()
    shift
    if [ -n "${ONLY:-}" ] && [ "$ONLY" != "$name" ]; then
        return
    fi
    while [ "$1" != "--" ]; do
        vars+=("$1")
        shift
    done
    shift
    "$server" -m "$tmp/t.gguf" -md "$tmp/d.gguf" "$@" --port "$port" -np 1 -c 4096 -t 2 \
        -ctk f32 -ctv f32 -ctkd f32 -ctvd f32 -v >"$tmp/log" 2>&1 &
    pid=$!
    for _ in $(seq 1 60); do
        curl -sf "127.0.0.1:$port/health" >/dev/null && break
        sleep 1
    done
    env "${vars[@]}" IGNORE_EOS=1 OUT="crates/engine/tests/golden/$name.llamacpp.json" \
        PORT=$port LOG="$tmp/log" python3 scripts/golden_drafts.py
    kill $pid
    wait $pid 2>/dev/null || true
    pid=
}
# drafter ARGS...: the DFlash-family drafter the tests write, with ARGS.
dflash() {
    "$tandem" synth -o "$tmp/d.gguf" --arch dflash --n-embd 128 --n-layer 2 --n-head 4 \
        --n-head-kv 2 --n-ff 256 --target-layers 1,2,3 --dflash-block 8 --type f32 \
        --tokenizer smollm2-135m --vocab 320 "$@"
}
"$tandem" synth -o "$tmp/t.gguf" --arch llama --experts 0 --n-embd 128 --n-layer 4 \
    --n-head 4 --n-head-kv 2 --n-ff 256 --type f32 --tokenizer smollm2-135m --vocab 320 --seed 7
for drafter in eagle3 dflash; do
for variant in own target-head d2t; do
case $variant in
own) flag=() name=llama-$drafter ;;
target-head) flag=(--target-head) name=llama-$drafter-target-head ;;
d2t) flag=(--draft-vocab 160) name=llama-$drafter-d2t ;;
esac
case $drafter in
eagle3)
    "$tandem" synth -o "$tmp/d.gguf" --arch eagle3 --n-embd 128 --n-head 4 --n-head-kv 2 \
        --n-ff 256 --target-layers 1,2,3 --type f32 --tokenizer smollm2-135m --vocab 320 \
        --seed 9 "${flag[@]}"
    golden "$name" -- --spec-type draft-eagle3 --spec-draft-n-max 3 ;;
dflash)
    dflash --seed 11 "${flag[@]}"
    golden "$name" -- --spec-type draft-dflash --spec-draft-n-max 4 ;;
esac
done
done
dspark=(--spec-type draft-dspark --spec-draft-n-max 4)
dflash --seed 13 --dspark-rank 32
golden llama-dspark -- "${dspark[@]}"
dflash --seed 13 --dspark-rank 32 --dspark-confidence
golden llama-dspark-conf -- "${dspark[@]}" --spec-draft-p-min 0.5
dflash --seed 13 --dspark-rank 32 --dspark-bonus-anchor --draft-vocab 160
golden llama-dspark-bonus-d2t -- "${dspark[@]}"
dflash --seed 17 --dflash2
golden llama-dflash2 DRAFT_LENGTHS=1 -- --spec-type draft-dflash --spec-draft-n-max 4 \
    --spec-draft-p-min 0.7
"$tandem" synth -o "$tmp/t.gguf" --arch llama --experts 0 --n-embd 256 --n-layer 6 --n-head 4 \
    --n-head-kv 2 --n-ff 512 --type f32 --tokenizer smollm2-135m --vocab 320 --seed 7
for conf in "" --dspark-confidence; do
    "$tandem" synth -o "$tmp/d.gguf" --arch dflash --backbone deepseek4 --n-layer 2 \
        --target-layers 1,3,5 --experts 4 --experts-used 4 --dflash-block 8 --dspark-rank 32 \
        $conf --type f32 --tokenizer smollm2-135m --vocab 320 --seed 19
    case $conf in
    "") golden deepseek4-dspark -- "${dspark[@]}" ;;
    *) golden deepseek4-dspark-conf -- "${dspark[@]}" --spec-draft-p-min 0.5 ;;
    esac
done
"$tandem" synth -o "$tmp/t.gguf" --arch deepseek4 --nextn 0 --type f32 \
    --tokenizer smollm2-135m --vocab 320 --seed 3
"$tandem" synth -o "$tmp/d.gguf" --arch dflash --backbone deepseek4 --n-layer 2 \
    --target-layers 1,3,5 --experts 4 --experts-used 4 --dflash-block 8 --dspark-rank 32 \
    --type f32 --tokenizer smollm2-135m --vocab 320 --seed 19
golden deepseek4-dspark-of-deepseek4 -- "${dspark[@]}"
