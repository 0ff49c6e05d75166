// Copied columns (Device::copy_cols): out[r, out_at + c] = x[r, x_at + c] for c < width,
// rows of x_width and out_width floats; one thread per copied value.

struct P {
    rows: u32,
    width: u32,
    x_width: u32,
    x_at: u32,
    out_width: u32,
    out_at: u32,
    groups_x: u32,
    _a: u32,
}

@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> out: array<f32>;
@group(0) @binding(2) var<storage, read> p: P;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let i = (wg.x + wg.y * p.groups_x) * 64u + t;
    if (i >= p.rows * p.width) {
        return;
    }
    let r = i / p.width;
    let c = i % p.width;
    out[r * p.out_width + p.out_at + c] = x[r * p.x_width + p.x_at + c];
}
