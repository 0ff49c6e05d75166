// IQ2_XXS, chunk c (group c): d (f16) at 0; at 2 + 8c a u32 of the 4 grid entries of the
// chunk's 8-value runs (one byte each) and a u32 `aux` of their KSIGNS indices (7 bits
// each) and the scale ls (bits 28..32). Value ((d * (0.5 + ls)) * 0.25 * grid) * sign.
// Prepended: `tables` with the word offsets IQ2XXS_GRID (2 words an entry) and KSIGNS.
fn deq(b: u32, c: u32, v: ptr<function, array<f32, 32>>) {
    let o = b + 2u + 8u * c;
    let entries = wword(o);
    let aux = wword(o + 4u);
    let db = wf16(b) * (0.5 + f32(aux >> 28u)) * 0.25;
    for (var i = 0u; i < 4u; i++) {
        let e = b4(entries, i);
        let s = (aux >> (7u * i)) & 127u;
        let signs = b4(tables[KSIGNS + (s >> 2u)], s & 3u);
        for (var h = 0u; h < 2u; h++) {
            let g = tables[IQ2XXS_GRID + 2u * e + h];
            for (var j = 0u; j < 4u; j++) {
                let neg = ((signs >> (4u * h + j)) & 1u) == 1u;
                (*v)[8u * i + 4u * h + j] = db * f32(b4(g, j)) * select(1.0, -1.0, neg);
            }
        }
    }
}
