// y[y0 + r, col0 + j] (+)= W[j] · x[x0 + r] (+ bias[col0 + j]) for the rows of one part of W.
//
// A workgroup of 64 threads takes 64 / T output columns and a group of R rows; T threads
// (prepended: chosen per adapter and row length, `Gpu::matmul_threads`) share a column.
// Thread l of a column takes the 32-element chunks l, l + T, ... of W's row in order,
// dequantizes each once and adds its dot with every row of the group (each a sequential
// sum over the chunk, written out for a whole chunk: a loop would spend llvmpipe's budget
// of loop iterations, `gpu::LOOP_BUDGET`) to that row's partial; the
// T partials are then summed by one fixed tree (`reduce`: in workgroup memory, or in
// registers by subgroup shuffles with the same bits). A row's result therefore depends on
// nothing but the row and T: not on the group, the other rows or their number, nor on R.
// Prepended: const BLOCK_BYTES (a padded block), CPB (chunks per block), the type's deq, T,
// R (rows per workgroup: 8 for decode and verification, more for prompt chunks), WG and
// `reduce`.

struct P {
    n: u32,          // columns of this part (W rows)
    k: u32,          // W row length = x row length
    rows: u32,
    row_bytes: u32,  // bytes of a padded W row
    col0: u32,       // first output column of this part
    y_stride: u32,   // floats per y row
    groups_x: u32,
    flags: u32,      // 1: add bias; 2: add into y (the residual)
    x0: u32,         // first row of x
    y0: u32,         // first row of y
    _a: u32,
    _b: u32,
}

@group(0) @binding(0) var<storage, read> w: array<u32>;
@group(0) @binding(1) var<storage, read_write> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
@group(0) @binding(3) var<storage, read_write> bias: array<f32>;
@group(0) @binding(4) var<storage, read> p: P;

const COLS: u32 = WG / T;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let l = t % T;
    let j = (wg.x + wg.y * p.groups_x) * COLS + t / T;
    let r0 = wg.z * R;
    let nr = min(R, p.rows - r0);
    var acc: array<f32, R>;
    var v: array<f32, 32>;
    let n_chunks = select(0u, (p.k + 31u) / 32u, j < p.n);
    for (var ch = l; ch < n_chunks; ch += T) {
        deq(j * p.row_bytes + (ch / CPB) * BLOCK_BYTES, ch % CPB, &v);
        let kk = ch * 32u;
        let m = min(32u, p.k - kk);
        for (var r = 0u; r < nr; r++) {
            let xo = (p.x0 + r0 + r) * p.k + kk;
            var s = 0.0;
            if (m == 32u) {
                s = s + v[0] * x[xo + 0u] + v[1] * x[xo + 1u] + v[2] * x[xo + 2u] + v[3] * x[xo + 3u];
                s = s + v[4] * x[xo + 4u] + v[5] * x[xo + 5u] + v[6] * x[xo + 6u] + v[7] * x[xo + 7u];
                s = s + v[8] * x[xo + 8u] + v[9] * x[xo + 9u] + v[10] * x[xo + 10u] + v[11] * x[xo + 11u];
                s = s + v[12] * x[xo + 12u] + v[13] * x[xo + 13u] + v[14] * x[xo + 14u] + v[15] * x[xo + 15u];
                s = s + v[16] * x[xo + 16u] + v[17] * x[xo + 17u] + v[18] * x[xo + 18u] + v[19] * x[xo + 19u];
                s = s + v[20] * x[xo + 20u] + v[21] * x[xo + 21u] + v[22] * x[xo + 22u] + v[23] * x[xo + 23u];
                s = s + v[24] * x[xo + 24u] + v[25] * x[xo + 25u] + v[26] * x[xo + 26u] + v[27] * x[xo + 27u];
                s = s + v[28] * x[xo + 28u] + v[29] * x[xo + 29u] + v[30] * x[xo + 30u] + v[31] * x[xo + 31u];
            } else {
                for (var i = 0u; i < m; i++) {
                    s += v[i] * x[xo + i];
                }
            }
            acc[r] += s;
        }
    }
    if (T > 1u) {
        reduce(&acc, t, l);
    }
    if (l == 0u && j < p.n) {
        let col = p.col0 + j;
        for (var r = 0u; r < nr; r++) {
            let o = (p.y0 + r0 + r) * p.y_stride + col;
            var val = acc[r];
            if ((p.flags & 1u) != 0u) {
                val += bias[col];
            }
            if ((p.flags & 2u) != 0u) {
                y[o] += val;
            } else {
                y[o] = val;
            }
        }
    }
}
