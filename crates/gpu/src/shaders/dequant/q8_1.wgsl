// Q8_1 (a test-only type): d (f16) at 0, s (f16) at 2, 32 signed bytes at 4..36; value q * d.
fn deq(b: u32, c: u32, v: ptr<function, array<f32, 32>>) {
    let d = wf16(b);
    for (var i = 0u; i < 8u; i++) {
        let q = wword(b + 4u + 4u * i);
        for (var j = 0u; j < 4u; j++) {
            (*v)[4u * i + j] = f32(extractBits(bitcast<i32>(q), 8u * j, 8u)) * d;
        }
    }
}
