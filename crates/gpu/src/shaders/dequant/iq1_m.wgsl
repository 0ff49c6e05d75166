// IQ1_M, chunk c: the low 8 bits of the grid entries of its 8-value runs at 4c; entry e's
// nibble at bits 4(e % 2).. of byte 32 + e / 2: bits 0..3 bits 8..11 of its index, bit 3
// the sign of its shift; the u16 sc[t] at 48 + 2t: bits 3i..3i + 3 the scale ls of
// elements 64t + 16i..+16, bits 12..16 bits 4t..4t + 4 of d (an f16).
// Value (d * (2 ls + 1)) * (grid + delta), delta ±0.125.
// Prepended: `tables` with the word offset IQ1S_GRID (2 words an entry of i8 values).
fn deq(b: u32, c: u32, v: ptr<function, array<f32, 32>>) {
    let s0 = wword(b + 48u);
    let s1 = wword(b + 52u);
    let bits = ((s0 >> 12u) & 15u) | ((s0 >> 28u) << 4u) | (((s1 >> 12u) & 15u) << 8u)
        | ((s1 >> 28u) << 12u);
    let d = unpack2x16float(bits).x;
    let sw = select(s0, s1, c >= 4u) >> (16u * ((c / 2u) % 2u));
    let low = wword(b + 4u * c);
    let qh = wword(b + 32u + 2u * c);
    for (var i = 0u; i < 4u; i++) {
        let s = 2u * c + i / 2u;
        let dl = d * f32(2u * ((sw >> (3u * (s % 4u))) & 7u) + 1u);
        let nib = (qh >> (4u * i)) & 15u;
        let delta = select(0.125, -0.125, (nib & 8u) != 0u);
        let e = b4(low, i) | ((nib & 7u) << 8u);
        for (var h = 0u; h < 2u; h++) {
            let g = bitcast<i32>(tables[IQ1S_GRID + 2u * e + h]);
            for (var j = 0u; j < 4u; j++) {
                (*v)[8u * i + 4u * h + j] = dl * (f32(extractBits(g, 8u * j, 8u)) + delta);
            }
        }
    }
}
