// Whether a workgroup's subgroups are runs of consecutive invocations: out[t] is 1 where
// invocation t is lane t % subgroup_size of its subgroup, else 0.

@group(0) @binding(0) var<storage, read_write> out: array<u32>;

@compute @workgroup_size(64)
fn main(
    @builtin(local_invocation_index) t: u32,
    @builtin(subgroup_invocation_id) lane: u32,
    @builtin(subgroup_size) size: u32,
) {
    out[t] = select(0u, 1u, lane == t % size);
}
