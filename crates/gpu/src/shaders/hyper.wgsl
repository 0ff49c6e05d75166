// Hyper-connections (device::hyper): `weights` turns each row's `mix` into its weights in
// place (one thread a row), `pre` mixes a row's streams into its block's input and `post`
// the block's output and the streams into the new streams (one thread a column of a row,
// every stream of that column). Sums run in the order the host's do.

struct P {
    rows: u32,
    streams: u32,
    width: u32,
    mix_width: u32,
    iters: u32,
    merge: u32,
    groups_x: u32,
    eps: f32,
    scale0: f32,
    scale1: f32,
    scale2: f32,
    _a: u32,
}

// The most streams `post` holds a column of.
const MAX_STREAMS: u32 = 16u;

// weights: the mixes; pre: the block's input; post: the streams.
@group(0) @binding(0) var<storage, read_write> a: array<f32>;
@group(0) @binding(1) var<storage, read> p: P;
// weights: the bases; pre: the streams; post: the block's output.
@group(0) @binding(2) var<storage, read> b: array<f32>;
// pre, post: the weights.
@group(0) @binding(3) var<storage, read> c: array<f32>;

fn index(wg: vec3<u32>, t: u32) -> u32 {
    return (wg.x + wg.y * p.groups_x) * 64u + t;
}

fn sigmoid(x: f32) -> f32 {
    return 1.0 / (1.0 + exp(-x));
}

// The Sinkhorn matrix M[dst + n·src] at `m0`: each src column normalized over dst (its
// sum + eps).
fn over_dst(m0: u32, n: u32) {
    for (var src = 0u; src < n; src++) {
        var sum = 0.0;
        for (var dst = 0u; dst < n; dst++) {
            sum += a[m0 + dst + n * src];
        }
        sum += p.eps;
        for (var dst = 0u; dst < n; dst++) {
            a[m0 + dst + n * src] /= sum;
        }
    }
}

// Each dst row normalized over src (its sum + eps).
fn over_src(m0: u32, n: u32) {
    for (var dst = 0u; dst < n; dst++) {
        var sum = 0.0;
        for (var src = 0u; src < n; src++) {
            sum += a[m0 + dst + n * src];
        }
        sum += p.eps;
        for (var src = 0u; src < n; src++) {
            a[m0 + dst + n * src] /= sum;
        }
    }
}

@compute @workgroup_size(64)
fn weights(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let r = index(wg, t);
    if (r >= p.rows) {
        return;
    }
    let n = p.streams;
    let at = r * p.mix_width;
    for (var h = 0u; h < n; h++) {
        a[at + h] = sigmoid(a[at + h] * p.scale0 + b[h]) + p.eps;
    }
    if (p.merge != 0u) {
        return;
    }
    for (var h = 0u; h < n; h++) {
        a[at + n + h] = 2.0 * sigmoid(a[at + n + h] * p.scale1 + b[n + h]);
    }
    let m0 = at + 2u * n;
    for (var i = 0u; i < n * n; i++) {
        a[m0 + i] = a[m0 + i] * p.scale2 + b[2u * n + i];
    }
    for (var src = 0u; src < n; src++) {
        let col = m0 + n * src;
        var top = a[col];
        for (var dst = 1u; dst < n; dst++) {
            top = max(top, a[col + dst]);
        }
        var sum = 0.0;
        for (var dst = 0u; dst < n; dst++) {
            a[col + dst] = exp(a[col + dst] - top);
            sum += a[col + dst];
        }
        for (var dst = 0u; dst < n; dst++) {
            a[col + dst] = a[col + dst] / sum + p.eps;
        }
    }
    over_src(m0, n);
    for (var i = 1u; i < p.iters; i++) {
        over_dst(m0, n);
        over_src(m0, n);
    }
}

@compute @workgroup_size(64)
fn pre(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let i = index(wg, t);
    let d = p.width;
    if (i >= p.rows * d) {
        return;
    }
    let r = i / d;
    let col = i % d;
    let w0 = r * p.mix_width;
    let x0 = r * p.streams * d;
    var acc = b[x0 + col] * c[w0];
    for (var h = 1u; h < p.streams; h++) {
        acc += b[x0 + h * d + col] * c[w0 + h];
    }
    a[r * d + col] = acc;
}

@compute @workgroup_size(64)
fn post(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let i = index(wg, t);
    let n = p.streams;
    let d = p.width;
    if (i >= p.rows * d) {
        return;
    }
    let r = i / d;
    let col = i % d;
    let w0 = r * p.mix_width;
    let x0 = r * n * d;
    var old: array<f32, MAX_STREAMS>;
    for (var src = 0u; src < n; src++) {
        old[src] = a[x0 + src * d + col];
    }
    let y = b[r * d + col];
    for (var dst = 0u; dst < n; dst++) {
        var v = y * c[w0 + n + dst];
        for (var src = 0u; src < n; src++) {
            v += old[src] * c[w0 + 2u * n + dst + n * src];
        }
        a[x0 + dst * d + col] = v;
    }
}
