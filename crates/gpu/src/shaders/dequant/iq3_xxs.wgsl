// IQ3_XXS, chunk c (group c): d (f16) at 0; the grid entries (4 values each) of the
// chunk's elements at 2 + 8c, one byte each; at 66 + 4c a u32 `aux` of the KSIGNS
// indices of its 8-value runs (7 bits each) and the scale ls (bits 28..32).
// Value ((d * (0.5 + ls)) * 0.5 * grid) * sign.
// Prepended: `tables` with the word offsets IQ3XXS_GRID (a word an entry) and KSIGNS.
fn deq(b: u32, c: u32, v: ptr<function, array<f32, 32>>) {
    let aux = wword(b + 66u + 4u * c);
    let db = wf16(b) * (0.5 + f32(aux >> 28u)) * 0.5;
    for (var i = 0u; i < 4u; i++) {
        let s = (aux >> (7u * i)) & 127u;
        let signs = b4(tables[KSIGNS + (s >> 2u)], s & 3u);
        for (var h = 0u; h < 2u; h++) {
            let g = tables[IQ3XXS_GRID + wbyte(b + 2u + 8u * c + 2u * i + h)];
            for (var j = 0u; j < 4u; j++) {
                let neg = ((signs >> (4u * h + j)) & 1u) == 1u;
                (*v)[8u * i + 4u * h + j] = db * f32(b4(g, j)) * select(1.0, -1.0, neg);
            }
        }
    }
}
