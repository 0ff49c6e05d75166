// Stores the step rows' keys and values (`[rows, width]`) at their positions. One thread
// per pair of elements (f32, f16, bf16) or per pair of q8_0 blocks (64 elements: 17 words,
// so no two threads write one word). q8_0 rounds as GGUF's quantizer: d = max|x| / 127,
// q = x / d rounded half away from zero.

struct P {
    rows: u32,
    width: u32,
    rows_at: u32,
    tab_at: u32,
    groups_x: u32,
    _a: u32,
    _b: u32,
    _c: u32,
}

@group(0) @binding(0) var<storage, read_write> k: array<f32>;
@group(0) @binding(1) var<storage, read_write> v: array<f32>;
@group(0) @binding(2) var<storage, read_write> kc: array<u32>;
@group(0) @binding(3) var<storage, read_write> vc: array<u32>;
@group(0) @binding(4) var<storage, read> step: array<u32>;
@group(0) @binding(5) var<storage, read> p: P;

// The bf16 nearest to `x` (ties to even; NaN quieted), in the low 16 bits.
fn bf16_bits(x: f32) -> u32 {
    let n = bitcast<u32>(x);
    if ((n & 0x7fffffffu) > 0x7f800000u) {
        return (n >> 16u) | 0x40u;
    }
    return (n + 0x7fffu + ((n >> 16u) & 1u)) >> 16u;
}

fn pack(a: f32, b: f32) -> u32 {
    if (KV == KV_F16) {
        return pack2x16float(vec2<f32>(a, b));
    }
    return bf16_bits(a) | (bf16_bits(b) << 16u);
}

// Two q8_0 blocks of x[src..src + 64] as 17 words.
fn q8_pair(is_key: bool, src: u32) -> array<u32, 17> {
    var out: array<u32, 17>;
    for (var b = 0u; b < 2u; b++) {
        var amax = 0.0;
        for (var i = 0u; i < 32u; i++) {
            var x = v[src + 32u * b + i];
            if (is_key) {
                x = k[src + 32u * b + i];
            }
            amax = max(amax, abs(x));
        }
        let d = amax / 127.0;
        var id = 0.0;
        if (d != 0.0) {
            id = 1.0 / d;
        }
        let at = 34u * b;
        out[at / 4u] |= (pack2x16float(vec2<f32>(d, 0.0)) & 0xffffu) << (8u * (at % 4u));
        for (var i = 0u; i < 32u; i++) {
            var x = v[src + 32u * b + i];
            if (is_key) {
                x = k[src + 32u * b + i];
            }
            let y = x * id;
            let q = i32(clamp(sign(y) * floor(abs(y) + 0.5), -128.0, 127.0));
            let byte = at + 2u + i;
            out[byte / 4u] |= (bitcast<u32>(q) & 0xffu) << (8u * (byte % 4u));
        }
    }
    return out;
}

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let n = (wg.x + wg.y * p.groups_x) * 64u + t;
    let per = select(2u, 64u, KV == KV_Q8_0);
    let units = p.width / per;
    if (n >= p.rows * units) {
        return;
    }
    let r = n / units;
    let e = per * (n % units);
    let pos = step[p.rows_at + 2u * r];
    let seq = step[p.rows_at + 2u * r + 1u];
    let row = kv_slot(block_of(p.tab_at, seq, pos), pos) * kv_row_words(p.width);
    let src = r * p.width + e;
    switch KV {
        case KV_F32: {
            kc[row + e] = bitcast<u32>(k[src]);
            kc[row + e + 1u] = bitcast<u32>(k[src + 1u]);
            vc[row + e] = bitcast<u32>(v[src]);
            vc[row + e + 1u] = bitcast<u32>(v[src + 1u]);
        }
        case KV_Q8_0: {
            let at = row + e / 64u * 17u;
            let kw = q8_pair(true, src);
            let vw = q8_pair(false, src);
            for (var i = 0u; i < 17u; i++) {
                kc[at + i] = kw[i];
                vc[at + i] = vw[i];
            }
        }
        default: {
            kc[row + e / 2u] = pack(k[src], k[src + 1u]);
            vc[row + e / 2u] = pack(v[src], v[src + 1u]);
        }
    }
}
