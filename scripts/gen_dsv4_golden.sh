#!/usr/bin/env bash
# llama.cpp's reading of a synthetic deepseek4 (DeepSeek-V4) model, as golden data: the model
# `tandem synth` writes with the arguments below (every feature of the architecture on: a
# 16-key window, blocks compressed at ratios 4 and 128 and not at all, the lightning indexer
# picking 8 blocks, 4 hyper-connection streams, 2 hash-routed blocks; f32 weights,
# SmolLM2's tokenizer cut to 320 tokens), scored by llama-perplexity with an f32 KV cache and
# flash attention off at -c 1024 (two chunks) and -c 4096 (one); its log-probabilities at the
# scored positions go to crates/tandem/tests/golden/deepseek4-cCTX-llamacpp.kld, which
# crates/tandem/tests/cli_deepseek4.rs compares tandem with (`tandem perplexity
# --kl-divergence`).
#
# usage: scripts/gen_dsv4_golden.sh TANDEM_BINARY LLAMA_PERPLEXITY_BINARY
# (the arguments must match SYNTH in crates/tandem/tests/cli_deepseek4.rs)
set -euo pipefail
cd "$(dirname "$0")/.."
tandem=$1
perplexity=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$tandem" synth -o "$tmp/d4.gguf" --arch deepseek4 --dsv4-indexer-heads 16 --type f32 \
    --tokenizer smollm2-135m --vocab 320 --seed 7
for run in "1024 2" "4096 1"; do
    set -- $run
    "$perplexity" -m "$tmp/d4.gguf" -f tests/data/eval-prose.txt -c "$1" --chunks "$2" -t 2 \
        -ctk f32 -ctv f32 -fa off \
        --kl-divergence-base "crates/tandem/tests/golden/deepseek4-c$1-llamacpp.kld"
done
