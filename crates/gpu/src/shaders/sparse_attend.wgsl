// The step rows' attention over their window of raw keys and their compressed blocks
// (device::sparse), one thread per (row, head), with an online softmax whose running
// output lives in `out`: the sink counts in the softmax, not in the output. Row `r`'s words
// at `r · (3 + n_rot)`: how many blocks it sees, where their list starts (u32::MAX: blocks
// 0.. in order), the last raw position it sees (its own; its sequence's last in the step
// where not causal), the angles of its position; lists after them.

struct P {
    rows: u32,
    n_head: u32,
    d: u32,
    window: u32,
    recent_w: u32,
    at_raw: u32,
    kept_w: u32,
    at_kept: u32,
    span: u32,
    ratio: u32,
    n_rot: u32,
    rec_tab: u32,
    kept_tab: u32,
    scale: f32,
    groups_x: u32,
    _a: u32,
}

@group(0) @binding(0) var<storage, read> recent: array<f32>;
@group(0) @binding(1) var<storage, read> kept: array<u32>;
@group(0) @binding(2) var<storage, read> step: array<u32>;
@group(0) @binding(3) var<storage, read> p: P;
@group(0) @binding(4) var<storage, read> q: array<f32>;
@group(0) @binding(5) var<storage, read> sinks: array<f32>;
@group(0) @binding(6) var<storage, read_write> out: array<f32>;
@group(0) @binding(7) var<storage, read> info: array<u32>;

// The running softmax of one invocation: its largest logit so far (the sink's to start)
// and the sum of exponentials over it.
var<private> top: f32;
var<private> total: f32;

// Takes logit `l` in: the factor the output so far is scaled by, and the new key's weight.
fn absorb(l: f32) -> vec2<f32> {
    let t = max(top, l);
    let w = vec2<f32>(exp(top - t), exp(l - t));
    total = total * w.x + w.y;
    top = t;
    return w;
}

// Element `k` of the query at `q0` turned by the angles at `angles`.
fn q_at(q0: u32, k: u32, angles: u32) -> f32 {
    let off = p.d - p.n_rot;
    if (k < off) {
        return q[q0 + k];
    }
    let m = (k - off) / 2u;
    let c = bitcast<f32>(info[angles + 2u * m]);
    let s = bitcast<f32>(info[angles + 2u * m + 1u]);
    let a = q[q0 + off + 2u * m];
    let b = q[q0 + off + 2u * m + 1u];
    if ((k - off) % 2u == 0u) {
        return a * c - b * s;
    }
    return a * s + b * c;
}

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let i = (wg.x + wg.y * p.groups_x) * 64u + t;
    if (i >= p.rows * p.n_head) {
        return;
    }
    let r = i / p.n_head;
    let head = i % p.n_head;
    let pos = step[2u * r];
    let seq = step[2u * r + 1u];
    let d = p.d;
    let base = (r * p.n_head + head) * d;
    let rw = 3u + p.n_rot;
    let end = info[r * rw + 2u];
    let angles = r * rw + 3u;
    for (var k = 0u; k < d; k++) {
        out[base + k] = 0.0;
    }
    top = sinks[head];
    total = 1.0;
    var lo = 0u;
    if (pos + 1u > p.window) {
        lo = pos + 1u - p.window;
    }
    for (var j = lo; j <= end; j++) {
        let kb = kv_slot(block_of(p.rec_tab, seq, j), j) * p.recent_w + p.at_raw;
        var dot = 0.0;
        for (var k = 0u; k < d; k++) {
            dot += q_at(base, k, angles) * recent[kb + k];
        }
        let w = absorb(p.scale * dot);
        for (var k = 0u; k < d; k++) {
            out[base + k] = out[base + k] * w.x + w.y * recent[kb + k];
        }
    }
    let n_blocks = info[r * rw];
    let list = info[r * rw + 1u];
    for (var x = 0u; x < n_blocks; x++) {
        var b = x;
        if (list != 0xffffffffu) {
            b = info[list + x];
        }
        let last = b * p.ratio + p.ratio - 1u;
        let first = last + 1u - p.span;
        let kb = kv_slot(block_of(p.kept_tab, seq, first), first) * p.kept_w + p.at_kept;
        var dot = 0.0;
        for (var k = 0u; k < d; k++) {
            let e = kb + k;
            dot += q_at(base, k, angles) * kept_value(kept[kept_word(e)], e);
        }
        let w = absorb(p.scale * dot);
        for (var k = 0u; k < d; k++) {
            let el = kb + k;
            out[base + k] = out[base + k] * w.x + w.y * kept_value(kept[kept_word(el)], el);
        }
    }
    let off = d - p.n_rot;
    for (var k = 0u; k < off; k++) {
        out[base + k] = out[base + k] / total;
    }
    for (var k = off; k < d; k += 2u) {
        let mm = (k - off) / 2u;
        let c = bitcast<f32>(info[angles + 2u * mm]);
        let s = bitcast<f32>(info[angles + 2u * mm + 1u]);
        let a = out[base + k] / total;
        let b = out[base + k + 1u] / total;
        out[base + k] = a * c + b * s;
        out[base + k + 1u] = b * c - a * s;
    }
}
