#!/usr/bin/env bash
# llama.cpp's reading of a synthetic qwen2 model with a LoRA adapter at scale 0.7, as golden
# data: the model and adapter `tandem synth` writes with the arguments below (f32 weights,
# SmolLM2's tokenizer cut to 320 tokens; a rank-8 adapter of alpha 16 on every attention and
# feed-forward matrix), scored by llama-perplexity at -c 512 over one chunk of eval-prose.txt
# with an f32 KV cache; its log-probabilities go to crates/tandem/tests/golden/lora-llamacpp.kld,
# which crates/tandem/tests/cli_lora.rs compares tandem with.
#
# usage: scripts/gen_lora_golden.sh TANDEM_BINARY LLAMA_PERPLEXITY_BINARY
# (the arguments must match SYNTH_QWEN2 in crates/tandem/tests/common, ADAPTER and SCALED in cli_lora.rs)
set -euo pipefail
cd "$(dirname "$0")/.."
tandem=$1
perplexity=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$tandem" synth -o "$tmp/qwen2.gguf" --arch qwen2 --experts 0 --n-embd 128 --n-layer 2 --n-head 4 \
    --n-head-kv 2 --n-ff 256 --type f32 --tokenizer smollm2-135m --vocab 320 --seed 7
"$tandem" synth --lora-of "$tmp/qwen2.gguf" -o "$tmp/adapter.gguf" --lora-rank 8 --lora-alpha 16 --seed 11
"$perplexity" -m "$tmp/qwen2.gguf" --lora-scaled "$tmp/adapter.gguf:0.7" -f tests/data/eval-prose.txt \
    -c 512 --chunks 1 -t 2 -ctk f32 -ctv f32 --kl-divergence-base crates/tandem/tests/golden/lora-llamacpp.kld
