// Stores the step rows' keys and values (`[rows, width]`) at their positions. One thread
// per pair of elements.

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

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let n = (wg.x + wg.y * p.groups_x) * 64u + t;
    let pairs = p.width / 2u;
    if (n >= p.rows * pairs) {
        return;
    }
    let r = n / pairs;
    let e = 2u * (n % pairs);
    let pos = step[p.rows_at + 2u * r];
    let seq = step[p.rows_at + 2u * r + 1u];
    let at = kv_index(block_of(p.tab_at, seq, pos), pos, p.width, e);
    let src = r * p.width + e;
    if (KV_F16) {
        kc[at / 2u] = pack2x16float(vec2<f32>(k[src], k[src + 1u]));
        vc[at / 2u] = pack2x16float(vec2<f32>(v[src], v[src + 1u]));
    } else {
        kc[at] = bitcast<u32>(k[src]);
        kc[at + 1u] = bitcast<u32>(k[src + 1u]);
        vc[at] = bitcast<u32>(v[src]);
        vc[at + 1u] = bitcast<u32>(v[src + 1u]);
    }
}
