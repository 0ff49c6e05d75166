// DFlash 2's convolution along a block's rows (Device::block_conv): for row r at place i
// among its sequence's rows, j = t + k * side,
//   out[r, c] = sum_{t = 0..=min(k - 1, i)} (coef[r, c / group + groups * j] + base[c + width * j]) * x[r - t, c],
// the taps summed in that order; one thread per output value. The rows' places follow the
// parameters (p.places).

struct P {
    rows: u32,
    width: u32,
    k: u32,
    group: u32,
    side: u32,
    groups_x: u32,
    _a: u32,
    _b: u32,
    places: array<u32>,
}

@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read> coef: array<f32>;
@group(0) @binding(2) var<storage, read> base: array<f32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;
@group(0) @binding(4) var<storage, read> p: P;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let at = (wg.x + wg.y * p.groups_x) * 64u + t;
    if (at >= p.rows * p.width) {
        return;
    }
    let r = at / p.width;
    let c = at % p.width;
    let groups = p.width / p.group;
    let taps = min(p.k - 1u, p.places[r]);
    var acc = 0.0;
    for (var tap = 0u; tap <= taps; tap++) {
        let j = tap + p.k * p.side;
        let w = coef[r * 2u * p.k * groups + c / p.group + groups * j] + base[c + p.width * j];
        let term = w * x[(r - tap) * p.width + c];
        if (tap == 0u) {
            acc = term;
        } else {
            acc = acc + term;
        }
    }
    out[at] = acc;
}
