// TQ2_0: element e is bits 2((e / 32) % 4).. of byte 32(e / 128) + e % 32; d (f16) at
// 64. Value d * (q - 1).
fn deq(b: u32, c: u32, v: ptr<function, array<f32, 32>>) {
    let d = wf16(b + 64u);
    let shift = 2u * (c % 4u);
    for (var i = 0u; i < 8u; i++) {
        let q = w[((b + 32u * (c / 4u)) >> 2u) + i];
        for (var j = 0u; j < 4u; j++) {
            (*v)[4u * i + j] = d * f32(i32((b4(q, j) >> shift) & 3u) - 1);
        }
    }
}
