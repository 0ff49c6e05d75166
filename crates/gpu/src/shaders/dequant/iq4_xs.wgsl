// IQ4_XS, chunk c (sub-block c): d (f16) at 0; the 6-bit scale ls of sub-block c has its
// high 2 bits at bits 2c.. of the u16 at 2 and its low 4 bits in nibble c % 2 of byte
// 4 + c / 2; nibbles of the sub-block at 8 + 16c as IQ4_NL's. Value (d * (ls - 32)) * level.
var<private> LEVELS: array<f32, 16> = array<f32, 16>(
    -127.0, -104.0, -83.0, -65.0, -49.0, -35.0, -22.0, -10.0,
    1.0, 13.0, 25.0, 38.0, 53.0, 69.0, 89.0, 113.0,
);

fn deq(b: u32, c: u32, v: ptr<function, array<f32, 32>>) {
    let high = (wword(b) >> (16u + 2u * c)) & 3u;
    let low = (wbyte(b + 4u + c / 2u) >> (4u * (c % 2u))) & 15u;
    let dl = wf16(b) * f32(i32(low | (high << 4u)) - 32);
    for (var i = 0u; i < 4u; i++) {
        let q = w[((b + 8u + 16u * c) >> 2u) + i];
        for (var j = 0u; j < 4u; j++) {
            let x = b4(q, j);
            (*v)[4u * i + j] = dl * LEVELS[x & 15u];
            (*v)[4u * i + j + 16u] = dl * LEVELS[x >> 4u];
        }
    }
}
