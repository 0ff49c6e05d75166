// NVFP4, chunk c: sub-blocks 2c and 2c + 1 of 16 elements; sub-block s has the UE4M3
// scale code at byte s and its nibbles at 4 + 8s (low nibble element 16s + j, high
// nibble 16s + 8 + j), each an index into the E2M1 values doubled. Value half the
// scale's value times the level; the codes 0 and 0x7F read as 0.
var<private> LEVELS: array<f32, 16> = array<f32, 16>(
    0.0, 1.0, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0,
    0.0, -1.0, -2.0, -3.0, -4.0, -6.0, -8.0, -12.0,
);

fn ue4m3_half(x: u32) -> f32 {
    if (x == 0u || x == 0x7fu) {
        return 0.0;
    }
    let e = (x >> 3u) & 15u;
    let m = f32(x & 7u);
    if (e == 0u) {
        return ldexp(m, -10);
    }
    return ldexp(1.0 + m / 8.0, i32(e) - 8);
}

fn deq(b: u32, c: u32, v: ptr<function, array<f32, 32>>) {
    for (var h = 0u; h < 2u; h++) {
        let s = 2u * c + h;
        let d = ue4m3_half(wbyte(b + s));
        for (var i = 0u; i < 2u; i++) {
            let q = w[((b + 4u + 8u * s) >> 2u) + i];
            for (var j = 0u; j < 4u; j++) {
                let x = b4(q, j);
                (*v)[16u * h + 4u * i + j] = d * LEVELS[x & 15u];
                (*v)[16u * h + 4u * i + j + 8u] = d * LEVELS[x >> 4u];
            }
        }
    }
}
