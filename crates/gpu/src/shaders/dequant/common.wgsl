// Reading GGUF blocks out of `w` (words; every block starts at a word, padded to one).
// `o` is a byte offset.

fn wbyte(o: u32) -> u32 {
    return (w[o >> 2u] >> ((o & 3u) * 8u)) & 0xffu;
}

// The four bytes at `o` (any alignment, inside a padded block), little-endian.
fn wword(o: u32) -> u32 {
    let s = (o & 3u) * 8u;
    let i = o >> 2u;
    if (s == 0u) {
        return w[i];
    }
    return (w[i] >> s) | (w[i + 1u] << (32u - s));
}

fn wf16(o: u32) -> f32 {
    return unpack2x16float(wword(o) & 0xffffu).x;
}

// Byte `i` (0..4) of `x`.
fn b4(x: u32, i: u32) -> u32 {
    return (x >> (8u * i)) & 0xffu;
}

// Q4_K and Q5_K: scale and min of sub-block `j` from the 12 bytes at b + 4 (ggml's
// get_scale_min_k4).
fn scale_min(b: u32, j: u32) -> vec2<u32> {
    let s = b + 4u;
    if (j < 4u) {
        return vec2<u32>(wbyte(s + j) & 63u, wbyte(s + j + 4u) & 63u);
    }
    return vec2<u32>(
        (wbyte(s + j + 4u) & 15u) | ((wbyte(s + j - 4u) >> 6u) << 4u),
        (wbyte(s + j + 4u) >> 4u) | ((wbyte(s + j) >> 6u) << 4u),
    );
}
