// The step's rows and block tables (`step`, words): row r is at rows_at + 2r (pos, seq);
// the table of sequence s starts at word step[tab_at + s], one block id per 16 positions.
// KV storage of a layer: `[blocks, 16, width]` of f16 (two per word) or f32.
// Prepended: const KV_F16: bool.

fn block_of(tab_at: u32, seq: u32, pos: u32) -> u32 {
    return step[step[tab_at + seq] + pos / 16u];
}

// Element `e` (even) and `e + 1` of position `pos` of a sequence, from `kv`.
fn kv_index(block: u32, pos: u32, width: u32, e: u32) -> u32 {
    return (block * 16u + pos % 16u) * width + e;
}
