// Q5_0: d (f16) at 0, qh (u32) at 2 (bit j: bit 4 of element j), nibbles at 6..22.
fn deq(b: u32, c: u32, v: ptr<function, array<f32, 32>>) {
    let d = wf16(b);
    let qh = wword(b + 2u);
    for (var i = 0u; i < 4u; i++) {
        let q = wword(b + 6u + 4u * i);
        for (var j = 0u; j < 4u; j++) {
            let e = 4u * i + j;
            let x = b4(q, j);
            let lo = (x & 15u) | (((qh >> e) & 1u) << 4u);
            let hi = (x >> 4u) | (((qh >> (e + 16u)) & 1u) << 4u);
            (*v)[e] = d * f32(i32(lo) - 16);
            (*v)[e + 16u] = d * f32(i32(hi) - 16);
        }
    }
}
