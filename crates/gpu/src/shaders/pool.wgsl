// A square grid's 2-D average pool (EncoderDevice::avg_pool_2d): one thread per output
// element (cell, channel c); the window's cells summed row by row, then divided by k².

struct P {
    side: u32,
    kernel: u32,
    width: u32,
    groups_x: u32,
}

@group(0) @binding(0) var<storage, read_write> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> out: array<f32>;
@group(0) @binding(2) var<storage, read> p: P;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let o = p.side / p.kernel;
    let i = (wg.x + wg.y * p.groups_x) * 64u + t;
    if (i >= o * o * p.width) {
        return;
    }
    let cell = i / p.width;
    let c = i % p.width;
    let oy = cell / o;
    let ox = cell % o;
    var s = 0.0;
    for (var ky = 0u; ky < p.kernel; ky++) {
        for (var kx = 0u; kx < p.kernel; kx++) {
            s += x[((oy * p.kernel + ky) * p.side + ox * p.kernel + kx) * p.width + c];
        }
    }
    out[i] = s / f32(p.kernel * p.kernel);
}
