// A streaming read of `src` for the bandwidth probe: thread i xors the vectors i, i + N, ...
// (N threads in all, adjacent threads reading adjacent vectors) and writes its result, so
// that no read can be left out.

struct P {
    n_vec: u32,
    threads: u32,
    groups_x: u32,
    _a: u32,
}

@group(0) @binding(0) var<storage, read> src: array<vec4<u32>>;
@group(0) @binding(1) var<storage, read_write> out: array<u32>;
@group(0) @binding(2) var<storage, read> p: P;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let i = (wg.x + wg.y * p.groups_x) * 64u + t;
    var acc = vec4<u32>(0u);
    for (var v = i; v < p.n_vec; v += p.threads) {
        acc ^= src[v];
    }
    out[i] = acc.x ^ acc.y ^ acc.z ^ acc.w;
}
