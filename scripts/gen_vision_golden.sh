#!/usr/bin/env bash
# llama.cpp's image embeddings from synthetic Gemma 3 towers, as golden data: the towers
# `tandem synth --mmproj` writes for Gemma 3 270M with 224-pixel images (f32 and f16
# blocks), given crates/model/tests/fixtures/stripes-150x100.png through llama-mtmd-cli with
# flash attention off; MTMD_DEBUG_EMBEDDINGS dumps the projector's output
# ([i32 n_tokens][i32 n_embd][f32 ...]) to crates/model/tests/golden/vision-gemma3-{f32,f16}.emb,
# which crates/model/tests/vision.rs compares tandem's tower with. Then the greedy answer of
# Gemma 3 270M with the f32 tower of seed 3, the image after the text of PROMPT in a user
# turn, 24 tokens: tests/server/golden/vision-gemma3.json, which tests/server/test_vision.py
# compares `tandem serve --mmproj`'s with (llama-mtmd-cli prints a newline before the answer
# and two after it; they are not part of it).
#
# usage: scripts/gen_vision_golden.sh TANDEM_BINARY LLAMA_MTMD_CLI_BINARY
# (the shapes must match crates/model/tests/vision.rs)
set -euo pipefail
cd "$(dirname "$0")/.."
tandem=$1
cli=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
text=$("$tandem" pull gemma3-270m)
for ty in f32 f16; do
    "$tandem" synth --mmproj "$text" --image-size 224 --type "$ty" -o "$tmp/tower-$ty.gguf"
    MTMD_DEBUG_EMBEDDINGS="$PWD/crates/model/tests/golden/vision-gemma3-$ty.emb" \
        "$cli" -m "$text" --mmproj "$tmp/tower-$ty.gguf" \
        --image crates/model/tests/fixtures/stripes-150x100.png -p "Describe the image." \
        -n 1 --temp 0 -fa off -t 2 --chat-template gemma > /dev/null
done
prompt="Hello! Tell me a story about a cat. "
"$tandem" synth --mmproj "$text" --image-size 224 --type f32 --seed 3 -o "$tmp/tower-3.gguf"
"$cli" -m "$text" --mmproj "$tmp/tower-3.gguf" --image crates/model/tests/fixtures/stripes-150x100.png \
    -p "$prompt<__media__>" -n 24 --temp 0 -fa off -t 2 --chat-template gemma 2> /dev/null \
    > "$tmp/answer.txt"
mkdir -p tests/server/golden
python3 - "$tmp/answer.txt" "$prompt" > tests/server/golden/vision-gemma3.json <<'PY'
import json, sys
out = open(sys.argv[1]).read()
assert out.startswith("\n") and out.endswith("\n\n"), repr(out)
print(json.dumps({
    "tower": ["--image-size", "224", "--type", "f32", "--seed", "3"],
    "image": "crates/model/tests/fixtures/stripes-150x100.png",
    "text_before_image": sys.argv[2],
    "max_tokens": 24,
    "answer": out[1:-2],
}, indent=1))
PY
