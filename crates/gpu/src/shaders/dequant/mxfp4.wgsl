// MXFP4: the E8M0 exponent e at 0, nibbles at 1..17 (low nibble element j, high nibble
// element j + 16), each an index into the E2M1 values doubled; value 2^(e - 128) * level.
var<private> LEVELS: array<f32, 16> = array<f32, 16>(
    0.0, 1.0, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0,
    0.0, -1.0, -2.0, -3.0, -4.0, -6.0, -8.0, -12.0,
);

fn deq(b: u32, c: u32, v: ptr<function, array<f32, 32>>) {
    let e = wbyte(b);
    let d = bitcast<f32>(select((e - 1u) << 23u, 0x00200000u << e, e < 2u));
    for (var i = 0u; i < 4u; i++) {
        let q = wword(b + 1u + 4u * i);
        for (var j = 0u; j < 4u; j++) {
            let x = b4(q, j);
            (*v)[4u * i + j] = d * LEVELS[x & 15u];
            (*v)[4u * i + j + 16u] = d * LEVELS[x >> 4u];
        }
    }
}
