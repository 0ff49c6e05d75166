#!/usr/bin/env bash
# llama.cpp's image embeddings from synthetic towers, as golden data: the towers
# `tandem synth --mmproj` writes with 224-pixel images (f32 and f16 blocks), Gemma 3's for
# Gemma 3 270M and LLaVA 1.5's (--projector llava) for SmolLM2-135M, given
# crates/model/tests/fixtures/stripes-150x100.png through llama-mtmd-cli with flash attention
# off; MTMD_DEBUG_EMBEDDINGS dumps the projector's output ([i32 n_tokens][i32 n_embd][f32 ...])
# to crates/model/tests/golden/vision-{gemma3,llava}-{f32,f16}.emb, which
# crates/model/tests/vision.rs compares tandem's towers with. Then greedy answers: Gemma 3 270M
# with the f32 tower of seed 3, the image after the text "Hello! Tell me a story about a cat. "
# in a user turn, 24 tokens; SmolLM2-135M with the f32 LLaVA tower of seed 4, the image before
# "Describe the image.", 16 tokens, its template rendered by Jinja as tandem does:
# tests/server/golden/vision-{gemma3,llava}.json, which tests/server/test_vision.py compares
# `tandem serve --mmproj`'s with (llama-mtmd-cli prints a newline before the answer and two
# after it; they are not part of it). With Gemma 3's, and with a 112-pixel LLaVA tower of seed
# 5 (crates/engine/tests/golden/vision-llava-112.json), llama-mtmd-cli's embeddings of the image
# too (crates/engine/tests/golden/vision-*.emb): crates/engine/tests/images.rs gives them to the
# engine to check the language model's side alone.
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
smol=$("$tandem" pull smollm2-135m)
for ty in f32 f16; do
    "$tandem" synth --mmproj "$text" --image-size 224 --type "$ty" -o "$tmp/tower-$ty.gguf"
    MTMD_DEBUG_EMBEDDINGS="$PWD/crates/model/tests/golden/vision-gemma3-$ty.emb" \
        "$cli" -m "$text" --mmproj "$tmp/tower-$ty.gguf" \
        --image crates/model/tests/fixtures/stripes-150x100.png -p "Describe the image." \
        -n 1 --temp 0 -fa off -t 2 --chat-template gemma > /dev/null
    "$tandem" synth --mmproj "$smol" --projector llava --image-size 224 --type "$ty" \
        -o "$tmp/llava-$ty.gguf"
    MTMD_DEBUG_EMBEDDINGS="$PWD/crates/model/tests/golden/vision-llava-$ty.emb" \
        "$cli" -m "$smol" --mmproj "$tmp/llava-$ty.gguf" \
        --image crates/model/tests/fixtures/stripes-150x100.png -p "Describe the image." \
        -n 1 --temp 0 -fa off -t 2 > /dev/null
done
# answer NAME MODEL TOWER_ARGS TEXT_BEFORE TEXT_AFTER N CLI_ARGS [ROWS]: a golden greedy answer,
# and with ROWS llama-mtmd-cli's embeddings of the image dumped there.
answer() {
    local name=$1 model=$2 tower=$3 before=$4 after=$5 n=$6 extra=$7 rows=${8:-}
    # shellcheck disable=SC2086
    "$tandem" synth --mmproj "$model" $tower -o "$tmp/$name.gguf"
    # shellcheck disable=SC2086
    MTMD_DEBUG_EMBEDDINGS=${rows:+$PWD/$rows} "$cli" -m "$model" --mmproj "$tmp/$name.gguf" \
        --image crates/model/tests/fixtures/stripes-150x100.png -p "$before<__media__>$after" \
        -n "$n" --temp 0 -fa off -t 2 $extra 2> /dev/null > "$tmp/answer.txt"
    python3 - "$tmp/answer.txt" "$tower" "$before" "$after" "$n" "$extra" > "$dir/vision-$name.json" <<'PY'
import json, sys
out = open(sys.argv[1]).read()
assert out.startswith("\n") and out.endswith("\n\n"), repr(out)
print(json.dumps({
    "tower": sys.argv[2].split(),
    "image": "crates/model/tests/fixtures/stripes-150x100.png",
    "text_before_image": sys.argv[3],
    "text_after_image": sys.argv[4],
    "max_tokens": int(sys.argv[5]),
    "llama_mtmd_cli": sys.argv[6].split(),
    "answer": out[1:-2],
}, indent=1))
PY
}
mkdir -p tests/server/golden crates/engine/tests/golden
dir=tests/server/golden
answer gemma3 "$text" "--image-size 224 --type f32 --seed 3" "Hello! Tell me a story about a cat. " "" 24 \
    "--chat-template gemma" crates/engine/tests/golden/vision-gemma3.emb
answer llava "$smol" "--projector llava --image-size 224 --type f32 --seed 4" "" "Describe the image." 16 \
    "--jinja"
dir=crates/engine/tests/golden
answer llava-112 "$smol" "--projector llava --image-size 112 --type f32 --seed 5" "" "Describe the image." \
    16 "--jinja" crates/engine/tests/golden/vision-llava-112.emb
