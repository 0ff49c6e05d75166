// Per row of `width`: out = x · (1 / sqrt(mean(x²) + eps)) · g. One workgroup per row;
// thread t sums x[t], x[t + 64], ... in order, then one fixed tree. `out` may be `x`.

struct P {
    rows: u32,
    width: u32,
    eps: f32,
    groups_x: u32,
}

@group(0) @binding(0) var<storage, read_write> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> g: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;
@group(0) @binding(3) var<storage, read> p: P;

var<workgroup> part: array<f32, 64>;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) t: u32) {
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
    workgroupBarrier();
    for (var h = 32u; h > 0u; h >>= 1u) {
        if (t < h) {
            part[t] += part[t + h];
        }
        workgroupBarrier();
    }
    let scale = 1.0 / sqrt(part[0] / f32(p.width) + p.eps);
    for (var i = t; i < p.width; i += 64u) {
        out[base + i] = x[base + i] * scale * g[i];
    }
}
