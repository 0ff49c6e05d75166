// Q2_0: d (f16) at 0; element j of the 64 is the 2-bit field q at bits 2(j % 4).. of
// byte 2 + j / 4, value (q - 1) * d. Chunk c holds elements 32c.., the 8 bytes at 2 + 8c.
fn deq(b: u32, c: u32, v: ptr<function, array<f32, 32>>) {
    let d = wf16(b);
    for (var i = 0u; i < 2u; i++) {
        let q = wword(b + 2u + 8u * c + 4u * i);
        for (var j = 0u; j < 16u; j++) {
            (*v)[16u * i + j] = f32(i32((q >> (2u * j)) & 3u) - 1) * d;
        }
    }
}
