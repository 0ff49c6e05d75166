// Stores the step rows' recent fields of a record layer. `raw`: the raw key (`[rows, d]`,
// its last n_rot dimensions turned by pairs at the row's position, angles per row at
// `b`) rounded to the pool's type; `comp`: a compressor's row (`a`, `[rows, w]`) and
// score (`b`) plus its positional bias (`c`, `[ratio, w]`) at the position's place in its
// block. One thread per stored value (per pair of the two fields for `comp`).

struct P {
    rows: u32,
    width: u32,
    recent_w: u32,
    at: u32,
    at2: u32,
    ratio: u32,
    n_rot: u32,
    tab_at: u32,
    groups_x: u32,
    _a: u32,
    _b: u32,
    _c: u32,
}

@group(0) @binding(0) var<storage, read_write> recent: array<f32>;
@group(0) @binding(1) var<storage, read> step: array<u32>;
@group(0) @binding(2) var<storage, read> p: P;
@group(0) @binding(3) var<storage, read> a: array<f32>;
@group(0) @binding(4) var<storage, read> b: array<f32>;
@group(0) @binding(5) var<storage, read> c: array<f32>;

fn index(wg: vec3<u32>, t: u32) -> u32 {
    return (wg.x + wg.y * p.groups_x) * 64u + t;
}

fn slot_of(r: u32) -> u32 {
    let pos = step[2u * r];
    let seq = step[2u * r + 1u];
    return kv_slot(block_of(p.tab_at, seq, pos), pos);
}

@compute @workgroup_size(64)
fn raw(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let i = index(wg, t);
    let d = p.width;
    if (i >= p.rows * d) {
        return;
    }
    let r = i / d;
    let k = i % d;
    let off = d - p.n_rot;
    var x = a[i];
    if (k >= off) {
        let m = (k - off) / 2u;
        let cs = vec2<f32>(b[r * p.n_rot + 2u * m], b[r * p.n_rot + 2u * m + 1u]);
        let x0 = a[r * d + off + 2u * m];
        let x1 = a[r * d + off + 2u * m + 1u];
        if ((k - off) % 2u == 0u) {
            x = x0 * cs.x - x1 * cs.y;
        } else {
            x = x0 * cs.y + x1 * cs.x;
        }
    }
    recent[slot_of(r) * p.recent_w + p.at + k] = round_kv(x);
}

@compute @workgroup_size(64)
fn comp(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let i = index(wg, t);
    let w = p.width;
    if (i >= p.rows * w) {
        return;
    }
    let r = i / w;
    let j = i % w;
    let pos = step[2u * r];
    let at = slot_of(r) * p.recent_w;
    recent[at + p.at + j] = a[i];
    recent[at + p.at2 + j] = b[i] + c[(pos % p.ratio) * w + j];
}
