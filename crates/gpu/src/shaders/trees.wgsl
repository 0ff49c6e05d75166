// Fixed trees over a workgroup's 64 invocations: each writes its value to `red[t]` and
// passes a barrier, then all call the tree, which halves pairwise down to red[0] and hands
// every invocation the result (red free again on return).

var<workgroup> red: array<f32, 64>;

fn tree_max(t: u32) -> f32 {
    for (var h = 32u; h > 0u; h >>= 1u) {
        if (t < h) {
            red[t] = max(red[t], red[t + h]);
        }
        workgroupBarrier();
    }
    let m = red[0];
    workgroupBarrier();
    return m;
}

fn tree_sum(t: u32) -> f32 {
    for (var h = 32u; h > 0u; h >>= 1u) {
        if (t < h) {
            red[t] += red[t + h];
        }
        workgroupBarrier();
    }
    let s = red[0];
    workgroupBarrier();
    return s;
}
