// Q6_K, chunk c = 4h + t: low 4 bits of element 128h + 32t + l are nibble t / 2 of
// ql[64h + 32(t % 2) + l] (ql at 0), high 2 bits are bits 2t.. of qh[32h + l] (qh at
// 128); sub-block s = element / 16 has the i8 scale scales[s] (at 192); d (f16) at 208.
// Value (d * scale) * (q - 32).
fn deq(b: u32, c: u32, v: ptr<function, array<f32, 32>>) {
    let d = wf16(b + 208u);
    let h = c / 4u;
    let t = c % 4u;
    for (var half = 0u; half < 2u; half++) {
        let sc = extractBits(bitcast<i32>(wbyte(b + 192u + 8u * h + 2u * t + half)), 0u, 8u);
        let dl = d * f32(sc);
        for (var i = 0u; i < 4u; i++) {
            let l0 = 16u * half + 4u * i;
            let ql = w[(b + 64u * h + 32u * (t % 2u) + l0) >> 2u];
            let qh = w[(b + 128u + 32u * h + l0) >> 2u];
            for (var j = 0u; j < 4u; j++) {
                let lo = (b4(ql, j) >> (4u * (t / 2u))) & 15u;
                let hi = (b4(qh, j) >> (2u * t)) & 3u;
                (*v)[l0 + j] = dl * f32(i32(lo | (hi << 4u)) - 32);
            }
        }
    }
}
