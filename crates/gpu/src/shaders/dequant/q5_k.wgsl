// Q5_K, chunk c: as Q4_K with qh at 16 (bit c of qh[l]: bit 4 of element 32c + l) and
// qs at 48.
fn deq(b: u32, c: u32, v: ptr<function, array<f32, 32>>) {
    let sm = scale_min(b, c);
    let dl = wf16(b) * f32(sm.x);
    let ml = wf16(b + 2u) * f32(sm.y);
    let shift = 4u * (c % 2u);
    for (var i = 0u; i < 8u; i++) {
        let q = w[((b + 48u + 32u * (c / 2u)) >> 2u) + i];
        let hi = w[((b + 16u) >> 2u) + i];
        for (var j = 0u; j < 4u; j++) {
            let x = ((b4(q, j) >> shift) & 15u) | (((b4(hi, j) >> c) & 1u) << 4u);
            (*v)[4u * i + j] = dl * f32(x) - ml;
        }
    }
}
