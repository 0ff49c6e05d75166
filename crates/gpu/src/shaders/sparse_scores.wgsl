// The lightning indexer's scores (device::sparse's I(b)) of the step's rows that see more
// compressed blocks than the indexer picks: entry `j` (words `j · (4 + n_rot)`: its row,
// sequence, position, visible blocks, the angles of its position) scores block `b` as
// Σ_h w_h · norm · relu(turn(qi_h) · K^I_b) into `scores[j · max_visible + b]`. One thread
// per (entry, block).

struct P {
    entries: u32,
    max_visible: u32,
    n_head: u32,
    c: u32,
    kept_w: u32,
    at_kept: u32,
    span: u32,
    n_rot: u32,
    kept_tab: u32,
    norm: f32,
    groups_x: u32,
    _a: u32,
}

@group(0) @binding(0) var<storage, read> kept: array<u32>;
@group(0) @binding(1) var<storage, read> step: array<u32>;
@group(0) @binding(2) var<storage, read> p: P;
@group(0) @binding(3) var<storage, read> qi: array<f32>;
@group(0) @binding(4) var<storage, read> w: array<f32>;
@group(0) @binding(5) var<storage, read> sel: array<u32>;
@group(0) @binding(6) var<storage, read_write> scores: array<f32>;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let i = (wg.x + wg.y * p.groups_x) * 64u + t;
    if (i >= p.entries * p.max_visible) {
        return;
    }
    let j = i / p.max_visible;
    let b = i % p.max_visible;
    let ew = 4u + p.n_rot;
    let row = sel[j * ew];
    let seq = sel[j * ew + 1u];
    let visible = sel[j * ew + 3u];
    if (b >= visible) {
        scores[i] = -3.4028235e38;
        return;
    }
    let c = p.c;
    let last = b * 4u + 3u;
    let first = last + 1u - p.span;
    let kbase = kv_slot(block_of(p.kept_tab, seq, first), first) * p.kept_w + p.at_kept;
    let off = c - p.n_rot;
    let angles = j * ew + 4u;
    var score = 0.0;
    for (var h = 0u; h < p.n_head; h++) {
        let q0 = (row * p.n_head + h) * c;
        var dot = 0.0;
        for (var k = 0u; k < c; k++) {
            var q = qi[q0 + k];
            if (k >= off) {
                let m = (k - off) / 2u;
                let cs = bitcast<f32>(sel[angles + 2u * m]);
                let sn = bitcast<f32>(sel[angles + 2u * m + 1u]);
                let a = qi[q0 + off + 2u * m];
                let bb = qi[q0 + off + 2u * m + 1u];
                if ((k - off) % 2u == 0u) {
                    q = a * cs - bb * sn;
                } else {
                    q = a * sn + bb * cs;
                }
            }
            let e = kbase + k;
            dot += q * kept_value(kept[kept_word(e)], e);
        }
        score += w[row * p.n_head + h] * p.norm * max(dot, 0.0);
    }
    scores[i] = score;
}
