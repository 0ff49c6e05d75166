// Causal convolution over positions with a recurrent state (Device::conv1d): invocation
// (channel c, run) walks its run's rows in order, keeping the channel's last k - 1 inputs;
// out = Σ_j w[c·k + j] · in(j) over the taps in order, plus bias[c] when asked, then SiLU
// when asked. The state of a
// slot is `[k - 1, width]` (oldest first) from float `at` of the layer's store, written back
// after the run's last row, and into the checkpoint store as it is before each of the run's
// rows `lo..hi` (a `Run`, runs_common.wgsl).

struct P {
    width: u32,
    k: u32,
    silu: u32,
    biased: u32,
    n_runs: u32,
    runs: array<u32>,
}

@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read> w: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;
@group(0) @binding(3) var<storage, read_write> state: array<f32>;
@group(0) @binding(4) var<storage, read_write> checkpoint: array<f32>;
@group(0) @binding(5) var<storage, read> p: P;
@group(0) @binding(6) var<storage, read> bias: array<f32>;

// Taps at most (ssm.conv_kernel is 4 in every model so far).
const K_MAX: u32 = 8u;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let c = gid.x;
    let run = gid.y;
    if (c >= p.width || run >= p.n_runs) {
        return;
    }
    let ru = run_at(run);
    let first = ru.first;
    let n = ru.n;
    let at = ru.at;
    let held = p.k - 1u;
    var window: array<f32, K_MAX>;
    for (var j = 0u; j < held; j++) {
        window[j] = state[at + j * p.width + c];
    }
    for (var i = 0u; i < n; i++) {
        if (i >= ru.lo && i < ru.hi) {
            let to = checkpoint_at(ru, i);
            for (var j = 0u; j < held; j++) {
                checkpoint[to + j * p.width + c] = window[j];
            }
        }
        let r = first + i;
        let input = x[r * p.width + c];
        window[held] = input;
        var acc = 0.0;
        for (var j = 0u; j <= held; j++) {
            acc += w[c * p.k + j] * window[j];
        }
        for (var j = 0u; j < held; j++) {
            window[j] = window[j + 1u];
        }
        if (p.biased != 0u) {
            acc += bias[c];
        }
        if (p.silu != 0u) {
            acc = acc / (1.0 + exp(-acc));
        }
        out[r * p.width + c] = acc;
    }
    for (var j = 0u; j < held; j++) {
        state[at + j * p.width + c] = window[j];
    }
}
