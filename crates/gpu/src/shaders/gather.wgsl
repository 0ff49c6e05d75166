// Gathered rows (Device::gather_rows): out[j] = x[rows[j]], rows of `width`; one thread per
// element of the output.

struct P {
    n: u32,
    width: u32,
    groups_x: u32,
    _a: u32,
    rows: array<u32>,
}

@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> out: array<f32>;
@group(0) @binding(2) var<storage, read> p: P;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let i = (wg.x + wg.y * p.groups_x) * 64u + t;
    if (i >= p.n * p.width) {
        return;
    }
    let j = i / p.width;
    out[i] = x[p.rows[j] * p.width + i % p.width];
}
