// Gated DeltaNet's delta rule (Device::delta_net): workgroup (run, value head h) walks its
// run's rows in order; invocation t owns rows j = t, t + 64, ... of the head's state
// `[d, d]` (a row per value dimension), so no row is shared and no barrier is needed:
//   row *= exp(a[h] · g[h]);  δ = (v[j] - row·k) · β[h];  row += δ · k;  out[j] = row·q / √d
// with the key head h % n_k_heads, each dot product summed in index order. The state of a
// slot is the head-major `[n_v_heads, d, d]` from float `at` of its slot in the layer's
// store; each invocation copies its rows into the checkpoint store as they are before each
// of the run's rows `lo..hi` (a `Run`, runs_common.wgsl).

struct P {
    n_k_heads: u32,
    n_v_heads: u32,
    d: u32,
    at: u32,
    n_runs: u32,
    runs: array<u32>,
}

@group(0) @binding(0) var<storage, read> q: array<f32>;
@group(0) @binding(1) var<storage, read> k: array<f32>;
@group(0) @binding(2) var<storage, read> v: array<f32>;
@group(0) @binding(3) var<storage, read> g: array<f32>;
@group(0) @binding(4) var<storage, read> beta: array<f32>;
@group(0) @binding(5) var<storage, read> a: array<f32>;
@group(0) @binding(6) var<storage, read_write> out: array<f32>;
@group(0) @binding(7) var<storage, read_write> state: array<f32>;
@group(0) @binding(8) var<storage, read_write> checkpoint: array<f32>;
@group(0) @binding(9) var<storage, read> p: P;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let run = wg.x;
    let h = wg.y;
    if (run >= p.n_runs || h >= p.n_v_heads) {
        return;
    }
    let d = p.d;
    let ru = run_at(run);
    let first = ru.first;
    let n = ru.n;
    let head = p.at + h * d * d;
    let base = ru.at + head;
    let scale = 1.0 / sqrt(f32(d));
    for (var i = 0u; i < n; i++) {
        if (i >= ru.lo && i < ru.hi) {
            let to = checkpoint_at(ru, i) + head;
            for (var j = t; j < d; j += 64u) {
                for (var e = 0u; e < d; e++) {
                    checkpoint[to + j * d + e] = state[base + j * d + e];
                }
            }
        }
        let r = first + i;
        let kh = (r * p.n_k_heads + h % p.n_k_heads) * d;
        let vh = (r * p.n_v_heads + h) * d;
        let decay = exp(a[h] * g[r * p.n_v_heads + h]);
        let b = beta[r * p.n_v_heads + h];
        for (var j = t; j < d; j += 64u) {
            let row = base + j * d;
            var sk = 0.0;
            for (var e = 0u; e < d; e++) {
                let s = state[row + e] * decay;
                state[row + e] = s;
                sk += s * k[kh + e];
            }
            let delta = (v[vh + j] - sk) * b;
            var o = 0.0;
            for (var e = 0u; e < d; e++) {
                let s = state[row + e] + delta * k[kh + e];
                state[row + e] = s;
                o += s * q[kh + e];
            }
            out[vh + j] = o * scale;
        }
    }
}
