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
# engine to check the language model's side alone. Idefics3's tower (--projector idefics3,
# 128-pixel tiles, the image resized to a longest edge of 256: 2 × 2 tiles and an overview)
# needs a model whose vocabulary has the tokens its images are placed with: SmolLM2-135M
# with them added (scripts/add_tokens.py, as SmolVLM's vocabulary is SmolLM2's and its
# added tokens); every tile's embeddings are dumped (through a FIFO: llama-mtmd-cli
# rewrites the file per tile) to crates/model/tests/golden/vision-idefics3-{f32,f16}.emb, and
# its greedy answer (tower seed 4) to tests/server/golden/vision-idefics3.json, with the
# added tokens (and with --image-max-tokens 48, vision-idefics3-max48-f32.emb). LLaVA 1.6's tiles likewise (a 112-pixel tower with pinpoints: two tiles and an
# overview) to crates/model/tests/golden/vision-llava16-{f32,f16}.emb, and its answer (tower
# seed 4) on SmolLM2-135M to tests/server/golden/vision-llava16.json.
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
added="<fake_token_around_image> <global-img> <row_1_col_1> <row_1_col_2> <row_2_col_1> <row_2_col_2>"
idefics_tower_args="--projector idefics3 --image-size 128 --image-merge 2 --image-longest-edge 256"
llava16_tower_args="--projector llava --image-size 112 --n-layer 3 --image-feature-layer 3 \
--image-grid-pinpoints 224,112,112,224,224,224"
# shellcheck disable=SC2086
python3 scripts/add_tokens.py "$smol" "$tmp/idefics-text.gguf" $added
# every_tile OUT CLI_ARGS...: llama-mtmd-cli's embeddings of each encoded tile, in order, to OUT.
every_tile() {
    local out=$1
    shift
    rm -f "$tmp/fifo" && mkfifo "$tmp/fifo"
    python3 - "$tmp/fifo" "$out" <<'PY' &
import sys
with open(sys.argv[2], "wb") as out:
    while True:
        with open(sys.argv[1], "rb") as f:
            dump = f.read()
        if dump == b"END":
            break
        out.write(dump)
PY
    MTMD_DEBUG_EMBEDDINGS="$tmp/fifo" "$cli" "$@" > /dev/null
    printf END > "$tmp/fifo"
    wait
}
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
    # shellcheck disable=SC2086
    "$tandem" synth --mmproj "$smol" $llava16_tower_args --type "$ty" -o "$tmp/llava16-$ty.gguf"
    every_tile "$PWD/crates/model/tests/golden/vision-llava16-$ty.emb" \
        -m "$smol" --mmproj "$tmp/llava16-$ty.gguf" \
        --image crates/model/tests/fixtures/stripes-150x100.png -p "Describe the image." \
        -n 1 --temp 0 -fa off -t 2 --jinja
    # shellcheck disable=SC2086
    "$tandem" synth --mmproj "$tmp/idefics-text.gguf" $idefics_tower_args --type "$ty" \
        -o "$tmp/idefics-$ty.gguf"
    every_tile "$PWD/crates/model/tests/golden/vision-idefics3-$ty.emb" \
        -m "$tmp/idefics-text.gguf" --mmproj "$tmp/idefics-$ty.gguf" \
        --image crates/model/tests/fixtures/stripes-150x100.png -p "Describe the image." \
        -n 1 --temp 0 -fa off -t 2 --jinja
done
# A tower without a longest edge (older files; mtmd's LLaVA-UHD branch: 150 × 100 rounded to one
# 128-pixel tile) to vision-idefics3-noedge-f32.emb.
"$tandem" synth --mmproj "$tmp/idefics-text.gguf" --projector idefics3 --image-size 128 --image-merge 2 \
    --image-longest-edge 0 --type f32 -o "$tmp/idefics-noedge.gguf"
every_tile "$PWD/crates/model/tests/golden/vision-idefics3-noedge-f32.emb" \
    -m "$tmp/idefics-text.gguf" --mmproj "$tmp/idefics-noedge.gguf" \
    --image crates/model/tests/fixtures/stripes-150x100.png -p "Describe the image." \
    -n 1 --temp 0 -fa off -t 2 --jinja
# With --image-max-tokens 48 (mtmd's LLaVA-UHD branch: the image fitted into 2 × 1 tiles).
every_tile "$PWD/crates/model/tests/golden/vision-idefics3-max48-f32.emb" \
    -m "$tmp/idefics-text.gguf" --mmproj "$tmp/idefics-f32.gguf" --image-max-tokens 48 \
    --image crates/model/tests/fixtures/stripes-150x100.png -p "Describe the image." \
    -n 1 --temp 0 -fa off -t 2 --jinja
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
    python3 - "$tmp/answer.txt" "$tower" "$before" "$after" "$n" "$extra" "${added_tokens:-}" \
        > "$dir/vision-$name.json" <<'PY'
import json, sys
out = open(sys.argv[1]).read()
assert out.startswith("\n") and out.endswith("\n\n"), repr(out)
print(json.dumps({
    **({"added_tokens": sys.argv[7].split()} if sys.argv[7] else {}),
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
added_tokens=$added answer idefics3 "$tmp/idefics-text.gguf" \
    "$idefics_tower_args --type f32 --seed 4" "" "Describe the image." 16 "--jinja"
answer llava16 "$smol" "$llava16_tower_args --type f32 --seed 4" "" "Describe the image." 16 "--jinja"
dir=crates/engine/tests/golden
answer llava-112 "$smol" "--projector llava --image-size 112 --type f32 --seed 5" "" "Describe the image." \
    16 "--jinja" crates/engine/tests/golden/vision-llava-112.emb
