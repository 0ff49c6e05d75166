// IQ4_NL: d (f16) at 0, nibbles at 2..18 (low nibble element j, high nibble element
// j + 16), each an index into the 16 levels; value d * level.
var<private> LEVELS: array<f32, 16> = array<f32, 16>(
    -127.0, -104.0, -83.0, -65.0, -49.0, -35.0, -22.0, -10.0,
    1.0, 13.0, 25.0, 38.0, 53.0, 69.0, 89.0, 113.0,
);

fn deq(b: u32, c: u32, v: ptr<function, array<f32, 32>>) {
    let d = wf16(b);
    for (var i = 0u; i < 4u; i++) {
        let q = wword(b + 2u + 4u * i);
        for (var j = 0u; j < 4u; j++) {
            let x = b4(q, j);
            (*v)[4u * i + j] = d * LEVELS[x & 15u];
            (*v)[4u * i + j + 16u] = d * LEVELS[x >> 4u];
        }
    }
}
