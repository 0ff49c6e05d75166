#!/usr/bin/env bash
# llama.cpp's reading of a synthetic qwen2 model with each quantized KV cache type llama-server
# takes beyond q8_0 (q4_0, q4_1, iq4_nl, q5_0, q5_1; keys and values alike, flash attention on), as
# golden data: the model `tandem synth` writes with the arguments below (as gen_rope_golden.sh's),
# scored by llama-perplexity at -c 128 over one chunk of eval-prose.txt; the log-probabilities go
# to crates/tandem/tests/golden/kv-TYPE-llamacpp.kld, which crates/tandem/tests/cli_kv_types.rs
# compares tandem with.
#
# usage: scripts/gen_kv_golden.sh TANDEM_BINARY LLAMA_PERPLEXITY_BINARY
# (the arguments must match SYNTH_QWEN2 in crates/tandem/tests/common and TYPES in cli_kv_types.rs)
set -euo pipefail
cd "$(dirname "$0")/.."
tandem=$1
perplexity=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$tandem" synth -o "$tmp/qwen2.gguf" --arch qwen2 --experts 0 --n-embd 128 --n-layer 2 --n-head 4 \
    --n-head-kv 2 --n-ff 256 --type f32 --tokenizer smollm2-135m --vocab 320 --seed 7
for ty in q4_0 q4_1 iq4_nl q5_0 q5_1; do
    "$perplexity" -m "$tmp/qwen2.gguf" -f tests/data/eval-prose.txt -c 128 --chunks 1 -t 2 \
        -ctk "$ty" -ctv "$ty" -fa on --kl-divergence-base "crates/tandem/tests/golden/kv-$ty-llamacpp.kld"
done
# The same model with heads 64 wide (SYNTH_QWEN2_HEADS_64 in cli_kv_types.rs), whose quantized
# cache llama.cpp stores rotated: q8_0 and q4_0, to crates/tandem/tests/golden/kv-rot-TYPE-llamacpp.kld.
"$tandem" synth -o "$tmp/qwen2r.gguf" --arch qwen2 --experts 0 --n-embd 128 --n-layer 2 --n-head 2 \
    --n-head-kv 1 --n-ff 256 --type f32 --tokenizer smollm2-135m --vocab 320 --seed 7
for ty in q8_0 q4_0; do
    "$perplexity" -m "$tmp/qwen2r.gguf" -f tests/data/eval-prose.txt -c 128 --chunks 1 -t 2 \
        -ctk "$ty" -ctv "$ty" -fa on --kl-divergence-base "crates/tandem/tests/golden/kv-rot-$ty-llamacpp.kld"
done
