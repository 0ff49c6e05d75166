// The step's rows and block tables (`step`, words): row r is at rows_at + 2r (pos, seq);
// the table of sequence s starts at word step[tab_at + s], one block id per 16 positions.
// KV storage of a layer: `[blocks, 16, width]` as the pool's type lays a row of `width`
// out: f32; f16 or bf16 (two per word); q8_0 (GGUF blocks of 34 bytes: an f16 scale and 32
// signed bytes; a row holds an even number of them, so rows start on words). A position's
// row is its slot: block · 16 + pos % 16.
// Prepended: const KV: u32 (KV_F32, KV_F16, KV_BF16 or KV_Q8_0).

const KV_F32: u32 = 0u;
const KV_F16: u32 = 1u;
const KV_BF16: u32 = 2u;
const KV_Q8_0: u32 = 3u;

fn block_of(tab_at: u32, seq: u32, pos: u32) -> u32 {
    return step[step[tab_at + seq] + pos / 16u];
}

fn kv_slot(block: u32, pos: u32) -> u32 {
    return block * 16u + pos % 16u;
}

// Words of one position's row of `width` elements.
fn kv_row_words(width: u32) -> u32 {
    switch KV {
        case KV_F32: { return width; }
        case KV_Q8_0: { return width / 32u * 34u / 4u; }
        default: { return width / 2u; }
    }
}
