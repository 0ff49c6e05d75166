// F16: a chunk is 32 halves (64 bytes).
fn deq(b: u32, c: u32, v: ptr<function, array<f32, 32>>) {
    for (var i = 0u; i < 16u; i++) {
        let p = unpack2x16float(w[(b >> 2u) + i]);
        (*v)[2u * i] = p.x;
        (*v)[2u * i + 1u] = p.y;
    }
}
