// Compresses the blocks that the step's rows end (device::sparse's C_b), one workgroup a
// block: per channel, the softmax of the pooled rows' scores weighs their rows (ratio 4:
// the previous block's first halves, then the block's own second halves; else the
// block's rows), the result is RMS-normed times `norm`, its last n_rot dimensions turned
// at the block's first position (angles per job), and stored as the block's kept field
// over the `span` positions ending at its last. Job `j` at words `j · (2 + n_rot)`: its
// sequence, its last position, its angles.

struct P {
    jobs: u32,
    e: u32,
    ratio: u32,
    recent_w: u32,
    at_kv: u32,
    at_score: u32,
    at_kept: u32,
    kept_w: u32,
    span: u32,
    n_rot: u32,
    rec_tab: u32,
    kept_tab: u32,
    eps: f32,
    groups_x: u32,
    _a: u32,
    _b: u32,
}

// The widest compressed row a workgroup pools.
const MAX_E: u32 = 1024u;

@group(0) @binding(0) var<storage, read> recent: array<f32>;
@group(0) @binding(1) var<storage, read_write> kept: array<u32>;
@group(0) @binding(2) var<storage, read> step: array<u32>;
@group(0) @binding(3) var<storage, read> p: P;
@group(0) @binding(4) var<storage, read> norm: array<f32>;
@group(0) @binding(5) var<storage, read> jobs: array<u32>;

var<workgroup> pooled: array<f32, MAX_E>;
var<workgroup> partial: array<f32, 64>;

// Where pooled row `j` of block `block` of `seq` starts in the recent parts (its half: ratio
// 4's first `prev` rows are the previous block's first halves, its own rows their `own`).
fn pooled_at(seq: u32, block: u32, j: u32, prev: u32, own: u32) -> u32 {
    let pos = block * p.ratio + j - prev;
    var half = own;
    if (j < prev) {
        half = 0u;
    }
    return kv_slot(block_of(p.rec_tab, seq, pos), pos) * p.recent_w + half;
}

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let job = wg.x + wg.y * p.groups_x;
    if (job >= p.jobs) {
        return;
    }
    let jw = 2u + p.n_rot;
    let seq = jobs[job * jw];
    let last = jobs[job * jw + 1u];
    let r = p.ratio;
    let e = p.e;
    let block = last / r;
    var prev = 0u;
    if (r == 4u && block > 0u) {
        prev = r;
    }
    var own = 0u;
    if (r == 4u) {
        own = e;
    }
    let n = prev + r;
    var ss = 0.0;
    for (var ch = t; ch < e; ch += 64u) {
        var top = -3.4028235e38;
        for (var j = 0u; j < n; j++) {
            let at = pooled_at(seq, block, j, prev, own) + ch;
            top = max(top, recent[at + p.at_score]);
        }
        var sum = 0.0;
        for (var j = 0u; j < n; j++) {
            let at = pooled_at(seq, block, j, prev, own) + ch;
            sum += exp(recent[at + p.at_score] - top);
        }
        var o = 0.0;
        for (var j = 0u; j < n; j++) {
            let at = pooled_at(seq, block, j, prev, own) + ch;
            o += exp(recent[at + p.at_score] - top) / sum * recent[at + p.at_kv];
        }
        pooled[ch] = o;
        ss += o * o;
    }
    partial[t] = ss;
    workgroupBarrier();
    for (var s = 32u; s > 0u; s >>= 1u) {
        if (t < s) {
            partial[t] += partial[t + s];
        }
        workgroupBarrier();
    }
    let inv = 1.0 / sqrt(partial[0] / f32(e) + p.eps);
    let off = e - p.n_rot;
    let first = last + 1u - p.span;
    let base = kv_slot(block_of(p.kept_tab, seq, first), first) * p.kept_w + p.at_kept;
    let angles = job * jw + 2u;
    for (var ch = 2u * t; ch < e; ch += 128u) {
        var x0 = pooled[ch] * inv * norm[ch];
        var x1 = pooled[ch + 1u] * inv * norm[ch + 1u];
        if (ch >= off) {
            let m = (ch - off) / 2u;
            let c = bitcast<f32>(jobs[angles + 2u * m]);
            let s = bitcast<f32>(jobs[angles + 2u * m + 1u]);
            let y0 = x0 * c - x1 * s;
            let y1 = x0 * s + x1 * c;
            x0 = y0;
            x1 = y1;
        }
        if (KV == KV_F32) {
            kept[base + ch] = bitcast<u32>(x0);
            kept[base + ch + 1u] = bitcast<u32>(x1);
        } else {
            kept[(base + ch) / 2u] = pack_kv(x0, x1);
        }
    }
}
