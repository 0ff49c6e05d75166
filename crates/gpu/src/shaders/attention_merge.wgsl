// The parts of attention.wgsl combined, one workgroup per step row and query head: with M
// the largest of the parts' maxima, out = Σ_i acc_i · exp(m_i - M) / Σ_i l_i · exp(m_i - M),
// each sum over the row's parts in order (thread t: dimensions t, t + 64, ...).
// Prepended: attention_common.wgsl.

@group(0) @binding(0) var<storage, read_write> parts: array<f32>;
@group(0) @binding(1) var<storage, read_write> out: array<f32>;
@group(0) @binding(2) var<storage, read> step: array<u32>;
@group(0) @binding(3) var<storage, read> p: P;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let h = wg.x;
    let r = p.row0 + wg.y;
    let hd = p.head_dim;
    let pos = step[p.rows_at + 2u * r];
    let first = span_start(pos) / PART;
    let last = span_last(r) / PART;
    let base = (wg.y * p.n_head + h) * p.n_parts;
    var mx = -3.4028235e38;
    for (var i = first; i <= last; i++) {
        mx = max(mx, parts[(base + i) * (2u + hd)]);
    }
    var l = 0.0;
    for (var i = first; i <= last; i++) {
        let o = (base + i) * (2u + hd);
        l += parts[o + 1u] * exp(parts[o] - mx);
    }
    for (var d = t; d < hd; d += 64u) {
        var a = 0.0;
        for (var i = first; i <= last; i++) {
            let o = (base + i) * (2u + hd);
            a += parts[o + 2u + d] * exp(parts[o] - mx);
        }
        out[(r * p.n_head + h) * hd + d] = a / l;
    }
}
