// Q4_K, chunk c (sub-block c): d (f16) at 0, dmin (f16) at 2, 12 scale bytes at 4,
// qs at 16: element 64p + l is the low nibble of qs[32p + l], element 64p + 32 + l the
// high one. Value (d * sc) * q - (dmin * m).
fn deq(b: u32, c: u32, v: ptr<function, array<f32, 32>>) {
    let sm = scale_min(b, c);
    let dl = wf16(b) * f32(sm.x);
    let ml = wf16(b + 2u) * f32(sm.y);
    let shift = 4u * (c % 2u);
    for (var i = 0u; i < 8u; i++) {
        let q = w[((b + 16u + 32u * (c / 2u)) >> 2u) + i];
        for (var j = 0u; j < 4u; j++) {
            (*v)[4u * i + j] = dl * f32((b4(q, j) >> shift) & 15u) - ml;
        }
    }
}
