// TQ1_0: five trits per byte as a fixed-point fraction (trit n of byte q is
// ((q * 3^n mod 256) * 3) >> 8): element 32n + j in byte j (j < 32, n < 5), element
// 160 + 16n + j in byte 32 + j (j < 16), element 240 + 4n + j in byte 48 + j (j < 4);
// d (f16) at 52. Value d * (trit - 1).
fn tq1_trit(b: u32, e: u32) -> u32 {
    var at = b + e % 32u;
    var n = e / 32u;
    if (e >= 240u) {
        at = b + 48u + (e - 240u) % 4u;
        n = (e - 240u) / 4u;
    } else if (e >= 160u) {
        at = b + 32u + (e - 160u) % 16u;
        n = (e - 160u) / 16u;
    }
    var powers = array<u32, 5>(1u, 3u, 9u, 27u, 81u);
    let p = powers[n];
    return (((wbyte(at) * p) & 255u) * 3u) >> 8u;
}

fn deq(b: u32, c: u32, v: ptr<function, array<f32, 32>>) {
    let d = wf16(b + 52u);
    for (var j = 0u; j < 32u; j++) {
        (*v)[j] = d * f32(i32(tq1_trit(b, 32u * c + j)) - 1);
    }
}
