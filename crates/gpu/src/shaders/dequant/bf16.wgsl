// BF16: a chunk is 32 bfloat16 (64 bytes); widening shifts the bits up.
fn deq(b: u32, c: u32, v: ptr<function, array<f32, 32>>) {
    for (var i = 0u; i < 16u; i++) {
        let x = w[(b >> 2u) + i];
        (*v)[2u * i] = bitcast<f32>(x << 16u);
        (*v)[2u * i + 1u] = bitcast<f32>(x & 0xffff0000u);
    }
}
