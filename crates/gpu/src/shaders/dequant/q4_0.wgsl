// Q4_0: d (f16) at 0, nibbles at 2..18: low nibble element j, high nibble element j + 16.
fn deq(b: u32, c: u32, v: ptr<function, array<f32, 32>>) {
    let d = wf16(b);
    for (var i = 0u; i < 4u; i++) {
        let q = wword(b + 2u + 4u * i);
        for (var j = 0u; j < 4u; j++) {
            let x = b4(q, j);
            (*v)[4u * i + j] = d * f32(i32(x & 15u) - 8);
            (*v)[4u * i + j + 16u] = d * f32(i32(x >> 4u) - 8);
        }
    }
}
