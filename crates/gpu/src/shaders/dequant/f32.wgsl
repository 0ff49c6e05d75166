// F32: a chunk is 32 floats (128 bytes).
fn deq(b: u32, c: u32, v: ptr<function, array<f32, 32>>) {
    for (var i = 0u; i < 32u; i++) {
        (*v)[i] = bitcast<f32>(w[(b >> 2u) + i]);
    }
}
