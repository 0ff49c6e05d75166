// IQ3_S, chunk c: d (f16) at 0; entry e (elements 4e..4e + 4) has the low 8 bits of its
// grid entry at 2 + e and bit 8 at bit e % 8 of byte 66 + e / 8; the sign bits of
// elements 8k..8k + 8 at 74 + k; the scale ls of chunk c at nibble c % 2 of byte
// 106 + c / 2. Value ((d * (1 + 2 ls)) * grid) * sign.
// Prepended: `tables` with the word offset IQ3S_GRID (a word an entry).
fn deq(b: u32, c: u32, v: ptr<function, array<f32, 32>>) {
    let ls = (wbyte(b + 106u + c / 2u) >> (4u * (c % 2u))) & 15u;
    let db = wf16(b) * f32(1u + 2u * ls);
    let qh = wbyte(b + 66u + c);
    let signs4 = wword(b + 74u + 4u * c);
    for (var i = 0u; i < 4u; i++) {
        let signs = b4(signs4, i);
        for (var h = 0u; h < 2u; h++) {
            let k = 2u * i + h;
            let e = wbyte(b + 2u + 8u * c + k) | (((qh >> k) & 1u) << 8u);
            let g = tables[IQ3S_GRID + e];
            for (var j = 0u; j < 4u; j++) {
                let neg = ((signs >> (4u * h + j)) & 1u) == 1u;
                (*v)[8u * i + 4u * h + j] = db * f32(b4(g, j)) * select(1.0, -1.0, neg);
            }
        }
    }
}
