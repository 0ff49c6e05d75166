#!/usr/bin/env bash
# llama.cpp's reading of a synthetic qwen2 model with YaRN RoPE scaling, as golden data: the model
# `tandem synth` writes with the arguments below (f32 weights, SmolLM2's tokenizer cut to 320
# tokens), scored by llama-perplexity at -c 512 over one chunk of eval-prose.txt with an f32 KV
# cache and YaRN at factor 4 over an original context of 64 positions (so that most of the
# chunk lies past it); its log-probabilities go to crates/tandem/tests/golden/yarn-llamacpp.kld,
# which crates/tandem/tests/cli_rope.rs compares tandem with.
#
# usage: scripts/gen_rope_golden.sh TANDEM_BINARY LLAMA_PERPLEXITY_BINARY
# (the arguments must match SYNTH_QWEN2 in crates/tandem/tests/common and YARN in cli_rope.rs)
set -euo pipefail
cd "$(dirname "$0")/.."
tandem=$1
perplexity=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$tandem" synth -o "$tmp/qwen2.gguf" --arch qwen2 --experts 0 --n-embd 128 --n-layer 2 --n-head 4 \
    --n-head-kv 2 --n-ff 256 --type f32 --tokenizer smollm2-135m --vocab 320 --seed 7
"$perplexity" -m "$tmp/qwen2.gguf" -f tests/data/eval-prose.txt -c 512 --chunks 1 -t 2 \
    -ctk f32 -ctv f32 --rope-scaling yarn --rope-scale 4 --yarn-orig-ctx 64 \
    --kl-divergence-base crates/tandem/tests/golden/yarn-llamacpp.kld
