// The T partials of a column summed by the same tree as reduce_shared.wgsl's, in
// registers: a column's T threads are consecutive lanes of one subgroup (the device checked
// it, and its subgroups hold at least T lanes), and lane l adds lane l + s's sum at each
// level. Lanes l >= s compute sums nobody reads, so the column's total in lane l = 0 has
// the same bits as the shared tree's.

fn reduce(acc: ptr<function, array<f32, R>>, t: u32, l: u32) {
    for (var s = T / 2u; s > 0u; s >>= 1u) {
        for (var r = 0u; r < R; r++) {
            (*acc)[r] += subgroupShuffleDown((*acc)[r], s);
        }
    }
}
