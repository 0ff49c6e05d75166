// Q4_1: d (f16) at 0, m (f16) at 2, nibbles at 4..20 as Q4_0; value d * q + m.
fn deq(b: u32, c: u32, v: ptr<function, array<f32, 32>>) {
    let d = wf16(b);
    let m = wf16(b + 2u);
    for (var i = 0u; i < 4u; i++) {
        let q = w[(b >> 2u) + 1u + i];
        for (var j = 0u; j < 4u; j++) {
            let x = b4(q, j);
            (*v)[4u * i + j] = d * f32(x & 15u) + m;
            (*v)[4u * i + j + 16u] = d * f32(x >> 4u) + m;
        }
    }
}
