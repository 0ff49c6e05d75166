// Attention over all of an encoder's rows, no mask, no cache (EncoderDevice::dense_attention):
// one workgroup per (head h, row r), over the key rows in chunks of 64 with an online
// softmax: thread t scores key c + t (a sequential dot over head_dim), the chunk's max and
// sum come from fixed trees, and thread t accumulates dimensions t, t + 64, ... over the
// chunk's keys in order. q, k, v and out are `[rows, heads · head_dim]`; head_dim <= 256.
// Prepended: trees.wgsl.
// A thread runs about head_dim + 4·64 loop iterations a chunk: the host keeps the rows
// within llvmpipe's budget.

struct P {
    rows: u32,
    heads: u32,
    head_dim: u32,
    scale: f32,
}

@group(0) @binding(0) var<storage, read_write> q: array<f32>;
@group(0) @binding(1) var<storage, read_write> k: array<f32>;
@group(0) @binding(2) var<storage, read_write> v: array<f32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;
@group(0) @binding(4) var<storage, read> p: P;

var<workgroup> qs: array<f32, 256>;
var<workgroup> probs: array<f32, 64>;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let h = wg.x;
    let r = wg.y;
    let hd = p.head_dim;
    let w = p.heads * hd;
    for (var d = t; d < hd; d += 64u) {
        qs[d] = q[r * w + h * hd + d];
    }
    workgroupBarrier();
    var m = -3.4e38;
    var l = 0.0;
    var acc = array<f32, 4>(0.0, 0.0, 0.0, 0.0);
    for (var c = 0u; c < p.rows; c += 64u) {
        let j = c + t;
        var s = -3.4e38;
        if (j < p.rows) {
            let ko = j * w + h * hd;
            var dot = 0.0;
            for (var d = 0u; d < hd; d++) {
                dot += qs[d] * k[ko + d];
            }
            s = dot * p.scale;
        }
        red[t] = s;
        workgroupBarrier();
        let m_new = max(m, tree_max(t));
        let e = select(0.0, exp(s - m_new), j < p.rows);
        probs[t] = e;
        red[t] = e;
        workgroupBarrier();
        let f = exp(m - m_new);
        l = l * f + tree_sum(t);
        m = m_new;
        let n = min(64u, p.rows - c);
        for (var i = 0u; i < 4u; i++) {
            let d = t + 64u * i;
            if (d < hd) {
                var a = acc[i] * f;
                for (var jj = 0u; jj < n; jj++) {
                    a += probs[jj] * v[(c + jj) * w + h * hd + d];
                }
                acc[i] = a;
            }
        }
        workgroupBarrier();
    }
    for (var i = 0u; i < 4u; i++) {
        let d = t + 64u * i;
        if (d < hd) {
            out[r * w + h * hd + d] = acc[i] / l;
        }
    }
}
