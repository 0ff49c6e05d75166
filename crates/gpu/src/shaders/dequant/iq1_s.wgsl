// IQ1_S, chunk c (group c): d (f16) at 0; the low 8 bits of the grid entries of its
// 8-value runs at 2 + 4c; the u16 qh at 34 + 2c: bits 3i..3i + 3 bits 8..11 of entry
// i's index, bits 12..15 the scale ls, bit 15 the sign of the shift.
// Value (d * (2 ls + 1)) * (grid + delta), delta ±0.125.
// Prepended: `tables` with the word offset IQ1S_GRID (2 words an entry of i8 values).
fn deq(b: u32, c: u32, v: ptr<function, array<f32, 32>>) {
    let qh = wword(b + 34u + 2u * c) & 0xffffu;
    let dl = wf16(b) * f32(2u * ((qh >> 12u) & 7u) + 1u);
    let delta = select(0.125, -0.125, (qh & 0x8000u) != 0u);
    let low = wword(b + 2u + 4u * c);
    for (var i = 0u; i < 4u; i++) {
        let e = b4(low, i) | (((qh >> (3u * i)) & 7u) << 8u);
        for (var h = 0u; h < 2u; h++) {
            let g = bitcast<i32>(tables[IQ1S_GRID + 2u * e + h]);
            for (var j = 0u; j < 4u; j++) {
                (*v)[8u * i + 4u * h + j] = dl * (f32(extractBits(g, 8u * j, 8u)) + delta);
            }
        }
    }
}
