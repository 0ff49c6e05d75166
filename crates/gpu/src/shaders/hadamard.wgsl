// The orthonormal Walsh–Hadamard transform of a quantized KV pool (kv::Rotation), in place
// over each block of `n` consecutive values of `x` (`n` a power of two): scaled by `scale`
// (1/√n, from the host), then log2(n) butterfly passes, as the CPU backend's `hadamard`.
// One thread per block.

struct P {
    blocks: u32,
    n: u32,
    scale: f32,
    groups_x: u32,
    _a: u32,
    _b: u32,
    _c: u32,
    _d: u32,
}

@group(0) @binding(0) var<storage, read_write> x: array<f32>;
@group(0) @binding(1) var<storage, read> p: P;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let b = (wg.x + wg.y * p.groups_x) * 64u + t;
    if (b >= p.blocks) {
        return;
    }
    let base = b * p.n;
    for (var i = 0u; i < p.n; i++) {
        x[base + i] *= p.scale;
    }
    for (var len = 1u; len < p.n; len <<= 1u) {
        for (var i = 0u; i < p.n; i += 2u * len) {
            for (var j = i; j < i + len; j++) {
                let u = x[base + j];
                let w = x[base + j + len];
                x[base + j] = u + w;
                x[base + j + len] = u - w;
            }
        }
    }
}
