// IQ2_S, chunk c: d (f16) at 0; entry e (elements 8e..8e + 8) has the low 8 bits of its
// grid entry at 2 + e, bits 8..10 at bits 2(e % 4).. of byte 66 + e / 4, and its sign
// bits at 34 + e; the scale byte of chunk c at 74 + c, its low nibble ls of the first 16
// elements, its high nibble of the next 16. Value ((d * (0.5 + ls)) * 0.25 * grid) * sign.
// Prepended: `tables` with the word offset IQ2S_GRID (2 words an entry).
fn deq(b: u32, c: u32, v: ptr<function, array<f32, 32>>) {
    let d = wf16(b);
    let sc = wbyte(b + 74u + c);
    let low = wword(b + 2u + 4u * c);
    let signs4 = wword(b + 34u + 4u * c);
    let qh = wbyte(b + 66u + c);
    for (var i = 0u; i < 4u; i++) {
        let db = d * (0.5 + f32((sc >> (4u * (i / 2u))) & 15u)) * 0.25;
        let e = b4(low, i) | (((qh >> (2u * i)) & 3u) << 8u);
        let signs = b4(signs4, i);
        for (var h = 0u; h < 2u; h++) {
            let g = tables[IQ2S_GRID + 2u * e + h];
            for (var j = 0u; j < 4u; j++) {
                let neg = ((signs >> (4u * h + j)) & 1u) == 1u;
                (*v)[8u * i + 4u * h + j] = db * f32(b4(g, j)) * select(1.0, -1.0, neg);
            }
        }
    }
}
