// What attention.wgsl and attention_merge.wgsl share: the parameters, and where a row's
// span starts. Prepended: const PART (positions per part).

struct P {
    n_head: u32,
    n_head_kv: u32,
    head_dim: u32,
    scale: f32,
    window: u32,     // 0: none
    rows_at: u32,
    tab_at: u32,
    row0: u32,       // the step row of this dispatch's first
    n_parts: u32,
    causal: u32,     // 0: a row also sees its sequence's later rows in the step
    last_at: u32,    // where the step holds each sequence's last position
    from_at: u32,    // where it holds each sequence's first row that sees its later rows
}

// The first position a row at `pos` attends to.
fn span_start(pos: u32) -> u32 {
    if (p.window > 0u && pos + 1u > p.window) {
        return pos + 1u - p.window;
    }
    return 0u;
}

// The last position step row `r` attends to: its own, or its sequence's last in the step
// where it sees later rows (not causal, or at or past the sequence's bidirectional start).
fn span_last(r: u32) -> u32 {
    let pos = step[p.rows_at + 2u * r];
    let seq = step[p.rows_at + 2u * r + 1u];
    if (p.causal == 0u || pos >= step[p.from_at + seq]) {
        return max(pos, step[p.last_at + seq]);
    }
    return pos;
}
