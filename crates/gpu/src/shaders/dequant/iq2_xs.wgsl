// IQ2_XS, chunk c: d (f16) at 0; the u16 of entry e (elements 8e..8e + 8) at 2 + 2e, its
// bits 0..9 the grid entry and bits 9..16 a KSIGNS index; the scale byte of chunk c at
// 66 + c, its low nibble ls of the first 16 elements, its high nibble of the next 16.
// Value ((d * (0.5 + ls)) * 0.25 * grid) * sign.
// Prepended: `tables` with the word offsets IQ2XS_GRID (2 words an entry) and KSIGNS.
fn deq(b: u32, c: u32, v: ptr<function, array<f32, 32>>) {
    let d = wf16(b);
    let sc = wbyte(b + 66u + c);
    for (var i = 0u; i < 4u; i++) {
        let q = wword(b + 2u + 8u * c + 2u * i) & 0xffffu;
        let db = d * (0.5 + f32((sc >> (4u * (i / 2u))) & 15u)) * 0.25;
        let e = q & 511u;
        let s = q >> 9u;
        let signs = b4(tables[KSIGNS + (s >> 2u)], s & 3u);
        for (var h = 0u; h < 2u; h++) {
            let g = tables[IQ2XS_GRID + 2u * e + h];
            for (var j = 0u; j < 4u; j++) {
                let neg = ((signs >> (4u * h + j)) & 1u) == 1u;
                (*v)[8u * i + 4u * h + j] = db * f32(b4(g, j)) * select(1.0, -1.0, neg);
            }
        }
    }
}
