// The T partials of a column (threads t - l .. t - l + T - 1) summed by a fixed tree in
// workgroup memory: at each level s = T/2, ..., 1, thread l < s adds thread l + s's sum.
// The column's total ends in its thread l = 0.

var<workgroup> part: array<f32, R * WG>;

fn reduce(acc: ptr<function, array<f32, R>>, t: u32, l: u32) {
    for (var r = 0u; r < R; r++) {
        part[r * WG + t] = (*acc)[r];
    }
    workgroupBarrier();
    for (var s = T / 2u; s > 0u; s >>= 1u) {
        if (l < s) {
            for (var r = 0u; r < R; r++) {
                part[r * WG + t] += part[r * WG + t + s];
            }
        }
        workgroupBarrier();
    }
    for (var r = 0u; r < R; r++) {
        (*acc)[r] = part[r * WG + t];
    }
}
