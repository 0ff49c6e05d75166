// A run of a step's rows of one sequence through a recurrence (conv.wgsl, delta.wgsl,
// scan.wgsl; gpu/src/recurrent.rs writes them): its first row, its rows, its slot's first
// float in the layer's state store; its rows `lo..hi` before each of which the state is
// copied into a checkpoint row, the one before row `lo` from float `ck` of the checkpoint
// store, the next ones `floats` apart. Seven words a run in `p.runs` (each shader's
// parameters `p`).

struct Run {
    first: u32,
    n: u32,
    at: u32,
    lo: u32,
    hi: u32,
    ck: u32,
    floats: u32,
}

fn run_at(run: u32) -> Run {
    let w = 7u * run;
    return Run(
        p.runs[w],
        p.runs[w + 1u],
        p.runs[w + 2u],
        p.runs[w + 3u],
        p.runs[w + 4u],
        p.runs[w + 5u],
        p.runs[w + 6u],
    );
}

// Float `i - lo` checkpoint rows after `ck`: where row `i`'s copy goes.
fn checkpoint_at(r: Run, i: u32) -> u32 {
    return r.ck + (i - r.lo) * r.floats;
}
