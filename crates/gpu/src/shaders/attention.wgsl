// Paged attention, split by position: one workgroup per step row, query head and part of
// PART positions (parts aligned at multiples of PART from position 0), over the positions
// of its part the row's span allows, in chunks of 64 positions aligned at multiples of 64
// (the same chunks and parts whatever the batch: prompt and decode rows alike), with an
// online softmax: per chunk, thread t scores position c + t (a sequential dot over
// head_dim), the chunk's max and sum come from fixed trees, and thread t accumulates
// dimensions t, t + 64, ... over the chunk's positions in order. A part writes its running
// max, its sum and its unnormalized outputs to `parts`, `[rows, n_head, n_parts, 2 +
// head_dim]`; attention_merge.wgsl combines a row's parts in order. A part the row's span
// does not reach writes nothing. Prepended: attention_common.wgsl, trees.wgsl.

@group(0) @binding(0) var<storage, read_write> q: array<f32>;
@group(0) @binding(1) var<storage, read_write> parts: array<f32>;
@group(0) @binding(2) var<storage, read> kc: array<u32>;
@group(0) @binding(3) var<storage, read> vc: array<u32>;
@group(0) @binding(4) var<storage, read> step: array<u32>;
@group(0) @binding(5) var<storage, read> p: P;

var<workgroup> qs: array<f32, 256>;
var<workgroup> probs: array<f32, 64>;
var<workgroup> span: vec3<u32>;

fn kv_word(buf: u32, i: u32) -> u32 {
    if (buf == 0u) {
        return kc[i];
    }
    return vc[i];
}

// Element `e` of the key (buf 0) or value (1) row whose words start at `row`.
fn kv_load(buf: u32, row: u32, e: u32) -> f32 {
    switch KV {
        case KV_F32: {
            return bitcast<f32>(kv_word(buf, row + e));
        }
        case KV_F16: {
            let pair = unpack2x16float(kv_word(buf, row + e / 2u));
            return select(pair.x, pair.y, (e & 1u) == 1u);
        }
        case KV_BF16: {
            let w = kv_word(buf, row + e / 2u);
            return bitcast<f32>(select(w << 16u, w & 0xffff0000u, (e & 1u) == 1u));
        }
        default: {
            let at = (e / 32u) * 34u;
            let dw = kv_word(buf, row + at / 4u);
            let d = unpack2x16float(dw >> (8u * (at % 4u))).x;
            let byte = at + 2u + e % 32u;
            let q = (kv_word(buf, row + byte / 4u) >> (8u * (byte % 4u))) & 0xffu;
            return d * f32((bitcast<i32>(q << 24u)) >> 24u);
        }
    }
}

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let h = wg.x;
    let r = p.row0 + wg.y;
    let part = wg.z;
    let hd = p.head_dim;
    let width = p.n_head_kv * hd;
    let kvh = h / (p.n_head / p.n_head_kv);
    if (t == 0u) {
        let pos = step[p.rows_at + 2u * r];
        span = vec3<u32>(max(span_start(pos), part * PART),
                         min(span_last(r) + 1u, part * PART + PART),
                         step[p.rows_at + 2u * r + 1u]);
    }
    let sp = workgroupUniformLoad(&span);
    let start = sp.x;
    let end = sp.y;
    let seq = sp.z;
    if (start >= end) {
        return;
    }
    for (var d = t; d < hd; d += 64u) {
        qs[d] = q[(r * p.n_head + h) * hd + d];
    }
    workgroupBarrier();
    var m = -3.4028235e38;
    var l = 0.0;
    var acc: array<f32, 4>;
    for (var c = (start / 64u) * 64u; c < end; c += 64u) {
        let pos = c + t;
        var s = -3.4028235e38;
        let valid = pos >= start && pos < end;
        if (valid) {
            let row = kv_slot(block_of(p.tab_at, seq, pos), pos) * kv_row_words(width);
            var dot = 0.0;
            for (var d = 0u; d < hd; d++) {
                dot += qs[d] * kv_load(0u, row, kvh * hd + d);
            }
            s = p.scale * dot;
        }
        red[t] = s;
        workgroupBarrier();
        let new_m = max(m, tree_max(t));
        var e = 0.0;
        if (valid) {
            e = exp(s - new_m);
        }
        probs[t] = e;
        red[t] = e;
        workgroupBarrier();
        let sum = tree_sum(t);
        let alpha = exp(m - new_m);
        l = l * alpha + sum;
        let n = min(64u, end - c);
        for (var j = 0u; j < 4u; j++) {
            let d = t + 64u * j;
            if (d < hd) {
                var a = acc[j] * alpha;
                for (var i = 0u; i < n; i++) {
                    let ps = c + i;
                    if (ps >= start) {
                        let row = kv_slot(block_of(p.tab_at, seq, ps), ps) * kv_row_words(width);
                        a += probs[i] * kv_load(1u, row, kvh * hd + d);
                    }
                }
                acc[j] = a;
            }
        }
        m = new_m;
        workgroupBarrier();
    }
    let o = ((wg.y * p.n_head + h) * p.n_parts + part) * (2u + hd);
    if (t == 0u) {
        parts[o] = m;
        parts[o + 1u] = l;
    }
    for (var j = 0u; j < 4u; j++) {
        let d = t + 64u * j;
        if (d < hd) {
            parts[o + 2u + d] = acc[j];
        }
    }
}
