#!/usr/bin/env bash
# llama.cpp's reading of synthetic qwen35 and qwen35moe (Qwen 3.5 hybrids), nemotron_h
# (Nemotron-H: Mamba-2, attention and squared-ReLU blocks, M-M*) and nemotron_h_moe
# (Nemotron 3: mixtures in place of the squared-ReLU blocks, MEM*) models, as golden
# data: the models `tandem synth` writes with the arguments below (f32 weights, SmolLM2's tokenizer cut
# to 320 tokens so that the file stays small), scored by llama-perplexity at -c 2048 over
# one chunk of eval-prose.txt with an f32 KV cache; its log-probabilities at the 1,023
# scored positions go to crates/tandem/tests/golden/ARCH-llamacpp.kld, which
# crates/tandem/tests/cli_hybrid.rs compares tandem with (`tandem perplexity
# --kl-divergence`).
#
# usage: scripts/gen_hybrid_golden.sh TANDEM_BINARY LLAMA_PERPLEXITY_BINARY
# (the arguments must match SYNTH in crates/tandem/tests/cli_hybrid.rs)
set -euo pipefail
cd "$(dirname "$0")/.."
tandem=$1
perplexity=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for arch in qwen35 qwen35moe nemotron_h nemotron_h_moe; do
    shape=(--experts 0)
    case $arch in *moe) shape=(--experts 8 --experts-used 2 --n-ff-exp 64) ;; esac
    "$tandem" synth -o "$tmp/$arch.gguf" --arch "$arch" "${shape[@]}" --n-embd 128 --n-layer 4 \
        --n-head 4 --n-head-kv 2 --n-ff 256 --ssm-state-size 32 --ssm-group-count 2 \
        --ssm-time-step-rank 4 --type f32 --tokenizer smollm2-135m --vocab 320 --seed 7
    "$perplexity" -m "$tmp/$arch.gguf" -f tests/data/eval-prose.txt -c 2048 --chunks 1 -t 2 \
        -ctk f32 -ctv f32 --kl-divergence-base "crates/tandem/tests/golden/$arch-llamacpp.kld"
done
