// RoPE of every head of every step row, with the (cos, sin) of each row and pair the host
// computed (`[rows, n_rot / 2]`, as the CPU backend's angles). One thread per pair.

struct P {
    rows: u32,
    heads: u32,
    head_dim: u32,
    half: u32,      // n_rot / 2
    neox: u32,
    groups_x: u32,
    _a: u32,
    _b: u32,
}

@group(0) @binding(0) var<storage, read_write> x: array<f32>;
@group(0) @binding(1) var<storage, read> cs: array<vec2<f32>>;
@group(0) @binding(2) var<storage, read> p: P;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let n = (wg.x + wg.y * p.groups_x) * 64u + t;
    if (n >= p.rows * p.heads * p.half) {
        return;
    }
    let i = n % p.half;
    let rh = n / p.half;
    let r = rh / p.heads;
    let base = rh * p.head_dim;
    var a = base + 2u * i;
    var b = a + 1u;
    if (p.neox != 0u) {
        a = base + i;
        b = a + p.half;
    }
    let c = cs[r * p.half + i];
    let x0 = x[a];
    let x1 = x[b];
    x[a] = x0 * c.x - x1 * c.y;
    x[b] = x0 * c.y + x1 * c.x;
}
