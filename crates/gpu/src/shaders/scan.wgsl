// Mamba-2's selective scan (Device::ssm_scan): workgroup (run, head h) walks its run's rows
// in order; invocation t owns rows j = t, t + 64, ... of the head's state `[head_dim,
// d_state]` (a row per head dimension), so no row is shared and no barrier is needed:
//   row = row · exp(a[h] · dt[h]) + (x[j] · dt[h]) · B[g];  out[j] = row·C[g] + d[h] · x[j]
// with the group g = h / (n_head / n_group), the dot product summed in index order. The
// state of a slot is the head-major `[n_head, head_dim, d_state]` from float `at` of its
// slot in the layer's store; each invocation copies its rows into the checkpoint store as
// they are before each of the run's rows `lo..hi` (a `Run`, runs_common.wgsl).

struct P {
    n_head: u32,
    head_dim: u32,
    d_state: u32,
    n_group: u32,
    at: u32,
    n_runs: u32,
    runs: array<u32>,
}

@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read> dt: array<f32>;
@group(0) @binding(2) var<storage, read> a: array<f32>;
@group(0) @binding(3) var<storage, read> b: array<f32>;
@group(0) @binding(4) var<storage, read> c: array<f32>;
@group(0) @binding(5) var<storage, read> d: array<f32>;
@group(0) @binding(6) var<storage, read_write> out: array<f32>;
@group(0) @binding(7) var<storage, read_write> state: array<f32>;
@group(0) @binding(8) var<storage, read_write> checkpoint: array<f32>;
@group(0) @binding(9) var<storage, read> p: P;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let run = wg.x;
    let h = wg.y;
    if (run >= p.n_runs || h >= p.n_head) {
        return;
    }
    let hd = p.head_dim;
    let n = p.d_state;
    let ru = run_at(run);
    let first = ru.first;
    let rows = ru.n;
    let head = p.at + h * hd * n;
    let base = ru.at + head;
    let g = h / (p.n_head / p.n_group);
    for (var i = 0u; i < rows; i++) {
        if (i >= ru.lo && i < ru.hi) {
            let to = checkpoint_at(ru, i) + head;
            for (var j = t; j < hd; j += 64u) {
                for (var e = 0u; e < n; e++) {
                    checkpoint[to + j * n + e] = state[base + j * n + e];
                }
            }
        }
        let r = first + i;
        let bc = (r * p.n_group + g) * n;
        let step = dt[r * p.n_head + h];
        let decay = exp(a[h] * step);
        for (var j = t; j < hd; j += 64u) {
            let xj = x[(r * p.n_head + h) * hd + j];
            let xdt = xj * step;
            let row = base + j * n;
            var o = 0.0;
            for (var e = 0u; e < n; e++) {
                let s = state[row + e] * decay + xdt * b[bc + e];
                state[row + e] = s;
                o += s * c[bc + e];
            }
            out[(r * p.n_head + h) * hd + j] = o + d[h] * xj;
        }
    }
}
