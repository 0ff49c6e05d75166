// Q1_0: d (f16) at 0; element j of the 128 is +d when bit j % 8 of byte 2 + j / 8 is
// set, -d otherwise. Chunk c holds elements 32c.., the 32 bits at 2 + 4c.
fn deq(b: u32, c: u32, v: ptr<function, array<f32, 32>>) {
    let d = wf16(b);
    let bits = wword(b + 2u + 4u * c);
    for (var j = 0u; j < 32u; j++) {
        (*v)[j] = select(-d, d, ((bits >> j) & 1u) == 1u);
    }
}
