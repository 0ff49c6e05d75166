// Q5_1: d (f16) at 0, m (f16) at 2, qh (u32) at 4, nibbles at 8..24; value d * q + m.
fn deq(b: u32, c: u32, v: ptr<function, array<f32, 32>>) {
    let d = wf16(b);
    let m = wf16(b + 2u);
    let qh = w[(b >> 2u) + 1u];
    for (var i = 0u; i < 4u; i++) {
        let q = w[(b >> 2u) + 2u + i];
        for (var j = 0u; j < 4u; j++) {
            let e = 4u * i + j;
            let x = b4(q, j);
            let lo = (x & 15u) | (((qh >> e) & 1u) << 4u);
            let hi = (x >> 4u) | (((qh >> (e + 16u)) & 1u) << 4u);
            (*v)[e] = d * f32(lo) + m;
            (*v)[e + 16u] = d * f32(hi) + m;
        }
    }
}
