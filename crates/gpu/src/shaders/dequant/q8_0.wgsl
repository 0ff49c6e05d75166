// Q8_0: d (f16) at 0, 32 signed bytes at 2..34; value q * d.
fn deq(b: u32, c: u32, v: ptr<function, array<f32, 32>>) {
    let d = wf16(b);
    for (var i = 0u; i < 8u; i++) {
        let q = wword(b + 2u + 4u * i);
        for (var j = 0u; j < 4u; j++) {
            (*v)[4u * i + j] = f32(extractBits(bitcast<i32>(q), 8u * j, 8u)) * d;
        }
    }
}
