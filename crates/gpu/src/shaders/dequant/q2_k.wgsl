// Q2_K, chunk c (elements 32c..32c+32): element 128h + 32k + l is bits 2k..2k+2 of
// qs[32h + l] (qs at 16); sub-block s = element / 16 has scale nibble / min nibble
// scales[s] (at 0); d (f16) at 80, dmin (f16) at 82.
fn deq(b: u32, c: u32, v: ptr<function, array<f32, 32>>) {
    let d = wf16(b + 80u);
    let dmin = wf16(b + 82u);
    let h = c / 4u;
    let k = c % 4u;
    for (var half = 0u; half < 2u; half++) {
        let sc = wbyte(b + 8u * h + 2u * k + half);
        let dl = d * f32(sc & 15u);
        let ml = dmin * f32(sc >> 4u);
        for (var i = 0u; i < 4u; i++) {
            let q = w[(b + 16u + 32u * h + 16u * half + 4u * i) >> 2u];
            for (var j = 0u; j < 4u; j++) {
                let x = (b4(q, j) >> (2u * k)) & 3u;
                (*v)[16u * half + 4u * i + j] = dl * f32(x) - ml;
            }
        }
    }
}
