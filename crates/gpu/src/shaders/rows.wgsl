// Row reductions, one workgroup of 64 per row of `width`: thread t reduces x[t], x[t + 64],
// ... in order, then one fixed tree combines the 64 partials, so a row's bits depend on
// nothing but the row.
//   softmax: x = e^(x - max) / Σ e^(x - max), in place.
//   l2_norm: out = x / max(sqrt(Σ x²), eps) (ggml's l2_norm); `out` may be `x`.

struct P {
    rows: u32,
    width: u32,
    eps: f32,
    groups_x: u32,
}

@group(0) @binding(0) var<storage, read_write> x: array<f32>;
@group(0) @binding(1) var<storage, read> p: P;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;

var<workgroup> part: array<f32, 64>;

// The identity of max short of -∞ (which WGSL cannot write): a row holds a finite value.
const LOWEST: f32 = -3.4028235e38;

// The 64 partials in `part` summed (`is_max`: maxed) by the fixed tree, read by every
// thread before `part` is written again.
fn tree(t: u32, is_max: bool) -> f32 {
    workgroupBarrier();
    for (var h = 32u; h > 0u; h >>= 1u) {
        if (t < h) {
            if (is_max) {
                part[t] = max(part[t], part[t + h]);
            } else {
                part[t] += part[t + h];
            }
        }
        workgroupBarrier();
    }
    let total = part[0];
    workgroupBarrier();
    return total;
}

@compute @workgroup_size(64)
fn softmax(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let r = wg.x + wg.y * p.groups_x;
    if (r >= p.rows) {
        return;
    }
    let base = r * p.width;
    var m = LOWEST;
    for (var i = t; i < p.width; i += 64u) {
        m = max(m, x[base + i]);
    }
    part[t] = m;
    let top = tree(t, true);
    var s = 0.0;
    for (var i = t; i < p.width; i += 64u) {
        let e = exp(x[base + i] - top);
        x[base + i] = e;
        s += e;
    }
    part[t] = s;
    let sum = tree(t, false);
    for (var i = t; i < p.width; i += 64u) {
        x[base + i] = x[base + i] / sum;
    }
}

@compute @workgroup_size(64)
fn l2_norm(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let r = wg.x + wg.y * p.groups_x;
    if (r >= p.rows) {
        return;
    }
    let base = r * p.width;
    var s = 0.0;
    for (var i = t; i < p.width; i += 64u) {
        s += x[base + i] * x[base + i];
    }
    part[t] = s;
    let scale = 1.0 / max(sqrt(tree(t, false)), p.eps);
    for (var i = t; i < p.width; i += 64u) {
        out[base + i] = x[base + i] * scale;
    }
}
