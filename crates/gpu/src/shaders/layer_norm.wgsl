// Per row of `width` (EncoderDevice::layer_norm): out = (x - mean) / sqrt(var + eps) · w + b.
// One workgroup per row; thread t sums x[t], x[t + 64], ... in order, then one fixed tree,
// for the mean and then for the squares about it. `out` may be `x`. Prepended: trees.wgsl.

struct P {
    rows: u32,
    width: u32,
    eps: f32,
    groups_x: u32,
}

@group(0) @binding(0) var<storage, read_write> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> w: array<f32>;
@group(0) @binding(2) var<storage, read_write> b: array<f32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;
@group(0) @binding(4) var<storage, read> p: P;

fn total(t: u32, s: f32) -> f32 {
    red[t] = s;
    workgroupBarrier();
    return tree_sum(t);
}

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let r = wg.x + wg.y * p.groups_x;
    if (r >= p.rows) {
        return;
    }
    let base = r * p.width;
    var s = 0.0;
    for (var i = t; i < p.width; i += 64u) {
        s += x[base + i];
    }
    let mean = total(t, s) / f32(p.width);
    var v = 0.0;
    for (var i = t; i < p.width; i += 64u) {
        let d = x[base + i] - mean;
        v += d * d;
    }
    let inv = 1.0 / sqrt(total(t, v) / f32(p.width) + p.eps);
    for (var i = t; i < p.width; i += 64u) {
        out[base + i] = (x[base + i] - mean) * inv * w[i] + b[i];
    }
}
