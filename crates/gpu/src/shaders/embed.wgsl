// out[i] = the dequantized row tokens[i] of one part of a matrix (rows row0..row0 + n).
// One workgroup per token; thread t writes chunks t, t + 64, ... Prepended as matmul.wgsl.

struct P {
    n_tokens: u32,
    k: u32,
    row_bytes: u32,
    row0: u32,
    n: u32,
    groups_x: u32,
    _a: u32,
    _b: u32,
}

@group(0) @binding(0) var<storage, read> w: array<u32>;
@group(0) @binding(1) var<storage, read> tokens: array<u32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;
@group(0) @binding(3) var<storage, read> p: P;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let i = wg.x + wg.y * p.groups_x;
    if (i >= p.n_tokens) {
        return;
    }
    let tok = tokens[i];
    if (tok < p.row0 || tok >= p.row0 + p.n) {
        return;
    }
    var v: array<f32, 32>;
    let n_chunks = (p.k + 31u) / 32u;
    for (var ch = t; ch < n_chunks; ch += 64u) {
        deq((tok - p.row0) * p.row_bytes + (ch / CPB) * BLOCK_BYTES, ch % CPB, &v);
        let m = min(32u, p.k - ch * 32u);
        for (var l = 0u; l < m; l++) {
            out[i * p.k + ch * 32u + l] = v[l];
        }
    }
}
