// A mixture's rows summed: hidden[r] += Σ_j w[r, j] · out[slot[r, j]] (+ g_r · shared[r]),
// the chosen experts' outputs in the order row r chose them, then the shared expert's output
// times g_r = sigmoid(gate · x[r]) (1 without a gate vector). One workgroup per row: the
// gate's dot is one fixed tree, and every element's sum is in the same order whatever the
// rows, so a row's bits depend on nothing but the row.

struct P {
    rows: u32,
    k: u32,
    width: u32,
    flags: u32,      // 1: a shared expert; 2: with a gate vector
    groups_x: u32,
    _a: u32,
    _b: u32,
    _c: u32,
}

@group(0) @binding(0) var<storage, read_write> hidden: array<f32>;
@group(0) @binding(1) var<storage, read_write> out: array<f32>;
@group(0) @binding(2) var<storage, read> picks: array<u32>;   // per row k (slot, weight bits)
@group(0) @binding(3) var<storage, read> p: P;
@group(0) @binding(4) var<storage, read_write> shared_out: array<f32>;
@group(0) @binding(5) var<storage, read_write> gate: array<f32>;
@group(0) @binding(6) var<storage, read_write> x: array<f32>;

var<workgroup> red: array<f32, 64>;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let r = wg.x + wg.y * p.groups_x;
    let live = r < p.rows;
    var g = 1.0;
    if ((p.flags & 2u) != 0u) {
        var s = 0.0;
        if (live) {
            for (var d = t; d < p.width; d += 64u) {
                s += gate[d] * x[r * p.width + d];
            }
        }
        red[t] = s;
        workgroupBarrier();
        for (var h = 32u; h > 0u; h >>= 1u) {
            if (t < h) {
                red[t] += red[t + h];
            }
            workgroupBarrier();
        }
        g = 1.0 / (1.0 + exp(-red[0]));
    }
    if (!live) {
        return;
    }
    for (var d = t; d < p.width; d += 64u) {
        var acc = 0.0;
        for (var j = 0u; j < p.k; j++) {
            let at = 2u * (r * p.k + j);
            acc += bitcast<f32>(picks[at + 1u]) * out[picks[at] * p.width + d];
        }
        if ((p.flags & 1u) != 0u) {
            acc += g * shared_out[r * p.width + d];
        }
        hidden[r * p.width + d] += acc;
    }
}
