// Shared by the sparse_*.wgsl kernels (DeepSeek-V4's compressed sparse attention,
// device::sparse): a record layer keeps per position a recent part of `recent_w` f32 (in
// the keys' store, through its tables) and a kept part of `kept_w` elements of the pool's
// type (in the values' store, through the full tables). Prepended after step.wgsl.

// The bf16 nearest to `x` (ties to even; NaN quieted), in the low 16 bits.
fn bf16_bits(x: f32) -> u32 {
    let n = bitcast<u32>(x);
    if ((n & 0x7fffffffu) > 0x7f800000u) {
        return (n >> 16u) | 0x40u;
    }
    return (n + 0x7fffu + ((n >> 16u) & 1u)) >> 16u;
}

// `x` rounded to the pool's type, as a key cached in it would be.
fn round_kv(x: f32) -> f32 {
    switch KV {
        case KV_F16: { return unpack2x16float(pack2x16float(vec2<f32>(x, 0.0))).x; }
        case KV_BF16: { return bitcast<f32>(bf16_bits(x) << 16u); }
        default: { return x; }
    }
}

// The word of elements `i` and `i + 1` (`i` even) of the pool's type; f32 stores one.
fn pack_kv(a: f32, b: f32) -> u32 {
    if (KV == KV_F16) {
        return pack2x16float(vec2<f32>(a, b));
    }
    return bf16_bits(a) | (bf16_bits(b) << 16u);
}

// Element `i` of a kept store's words.
fn kept_value(word: u32, i: u32) -> f32 {
    switch KV {
        case KV_F32: { return bitcast<f32>(word); }
        case KV_F16: { return unpack2x16float(word)[i % 2u]; }
        default: {
            if (i % 2u == 1u) {
                return bitcast<f32>(word & 0xffff0000u);
            }
            return bitcast<f32>(word << 16u);
        }
    }
}

// The word holding element `i` of a kept store.
fn kept_word(i: u32) -> u32 {
    if (KV == KV_F32) {
        return i;
    }
    return i / 2u;
}
