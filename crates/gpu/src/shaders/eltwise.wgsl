// Element-wise ops over `len` floats: a = f(a, b). One thread per element.

struct P {
    len: u32,
    factor: f32,
    groups_x: u32,
    _a: u32,
}

@group(0) @binding(0) var<storage, read_write> a: array<f32>;
@group(0) @binding(1) var<storage, read> p: P;
@group(0) @binding(2) var<storage, read_write> b: array<f32>;

fn index(wg: vec3<u32>, t: u32) -> u32 {
    return (wg.x + wg.y * p.groups_x) * 64u + t;
}

@compute @workgroup_size(64)
fn swiglu(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let i = index(wg, t);
    if (i < p.len) {
        let g = a[i];
        a[i] = g / (1.0 + exp(-g)) * b[i];
    }
}

// DeepSeek-V4's clamped SwiGLU: silu(min(a, c)) · clamp(b, -c, c), c the factor.
@compute @workgroup_size(64)
fn swiglu_limit(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let i = index(wg, t);
    if (i < p.len) {
        let c = p.factor;
        let g = min(a[i], c);
        a[i] = g / (1.0 + exp(-g)) * clamp(b[i], -c, c);
    }
}

@compute @workgroup_size(64)
fn gelu(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let i = index(wg, t);
    if (i < p.len) {
        let x = a[i];
        let u = clamp(0.7978845608 * (x + 0.044715 * x * x * x), -15.0, 15.0);
        a[i] = 0.5 * x * (1.0 + tanh(u)) * b[i];
    }
}

// GELU (the tanh form, as `gelu`'s) of `a` alone.
@compute @workgroup_size(64)
fn gelu_alone(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let i = index(wg, t);
    if (i < p.len) {
        let x = a[i];
        let u = clamp(0.7978845608 * (x + 0.044715 * x * x * x), -15.0, 15.0);
        a[i] = 0.5 * x * (1.0 + tanh(u));
    }
}

// CLIP's quick GELU: x · sigmoid(1.702 · x).
@compute @workgroup_size(64)
fn gelu_quick(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let i = index(wg, t);
    if (i < p.len) {
        let x = a[i];
        a[i] = x / (1.0 + exp(-1.702 * x));
    }
}

@compute @workgroup_size(64)
fn add(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let i = index(wg, t);
    if (i < p.len) {
        a[i] += b[i];
    }
}

@compute @workgroup_size(64)
fn scale(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let i = index(wg, t);
    if (i < p.len) {
        a[i] *= p.factor;
    }
}

@compute @workgroup_size(64)
fn sigmoid(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let i = index(wg, t);
    if (i < p.len) {
        a[i] = 1.0 / (1.0 + exp(-a[i]));
    }
}

// max(x, 0)² (Nemotron-H's squared ReLU).
@compute @workgroup_size(64)
fn relu_sqr(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let i = index(wg, t);
    if (i < p.len) {
        let r = max(a[i], 0.0);
        a[i] = r * r;
    }
}

// ln(1 + e^x), x itself above 20 (as ggml's softplus).
@compute @workgroup_size(64)
fn softplus(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let i = index(wg, t);
    if (i < p.len && a[i] <= 20.0) {
        a[i] = log(1.0 + exp(a[i]));
    }
}

@compute @workgroup_size(64)
fn mul(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let i = index(wg, t);
    if (i < p.len) {
        a[i] *= b[i];
    }
}
