// Q3_K, chunk c: hmask at 0 (bit c of hmask[l]: high bit of element 32c + l), qs at 32
// (low 2 bits of element 128h + 32k + l: bits 2k.. of qs[32h + l]), 12 scale bytes at 96,
// d (f16) at 108. Value (d * scale) * q with q = low2 - 4 where the high bit is clear.
fn q3_scale(b: u32, s: u32) -> i32 {
    var low: u32;
    if (s < 8u) {
        low = wbyte(b + 96u + s) & 15u;
    } else {
        low = wbyte(b + 96u + s - 8u) >> 4u;
    }
    let high = (wbyte(b + 104u + s % 4u) >> (2u * (s / 4u))) & 3u;
    return i32(low | (high << 4u)) - 32;
}

fn deq(b: u32, c: u32, v: ptr<function, array<f32, 32>>) {
    let d = wf16(b + 108u);
    let h = c / 4u;
    let k = c % 4u;
    for (var half = 0u; half < 2u; half++) {
        let dl = d * f32(q3_scale(b, 8u * h + 2u * k + half));
        for (var i = 0u; i < 4u; i++) {
            let l0 = 16u * half + 4u * i;
            let q = w[(b + 32u + 32u * h + l0) >> 2u];
            let m = w[(b + l0) >> 2u];
            for (var j = 0u; j < 4u; j++) {
                let low = i32((b4(q, j) >> (2u * k)) & 3u);
                let hb = i32((b4(m, j) >> c) & 1u);
                (*v)[l0 + j] = dl * f32(low - ((hb ^ 1) << 2u));
            }
        }
    }
}
