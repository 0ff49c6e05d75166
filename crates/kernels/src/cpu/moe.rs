//! Mixture-of-experts on the CPU, for any number of experts per row.
//!
//! Each row's router picks `k` of `n_expert` experts ([`route`]). The rows are then grouped
//! by expert, and one [`matmul_grouped`] multiplies every chosen expert's matrices with the
//! rows routed to it, so each chosen expert's weights stream once per step however many rows
//! chose it. Each row then sums its experts' outputs, weighted, in the order it chose them.
//! Every product is [`crate::matmul()`]'s, so a row's result depends on nothing but the row.
//!
//! Worked example (`k = 2`, 4 experts, 3 rows): row 0 picks experts (2, 0), row 1 (2, 3),
//! row 2 (0, 2). Grouped by expert, the gathered rows are `[r0, r2 | r0, r1, r2 | r1]` for
//! experts 0, 2 and 3 (`start = [0, 2, 2, 5, 6]`); row 0's choices sit in slots 2 and 0,
//! row 1's in 3 and 5, row 2's in 1 and 4. Expert 2 multiplies slots 2..5 in one pass, and
//! row 1's output is `w₁₀ · out[3] + w₁₁ · out[5]`.

use device::{ExpertNet, Gating, MoeSpec, MoeStats, Routing};

use super::Cpu;
use crate::dot::{dot, Isa};
use crate::ops::{add_inplace, sigmoid, softmax_inplace, swiglu_inplace, swiglu_limited_inplace};
use crate::{matmul, matmul_grouped, Group, QMatrix};

/// The smallest sum the chosen weights are divided by when renormalized (llama.cpp's).
const MIN_WEIGHT_SUM: f32 = 6.103_515_6e-5;

/// Where the rows of a block went: `[rows, k]` choices and their slots, `[n_expert + 1]`
/// group starts; grown to the largest block seen (a few integers per row).
#[derive(Default)]
pub(super) struct Routes {
    chosen: Vec<(usize, f32)>,
    slot: Vec<usize>,
    start: Vec<usize>,
    pub stats: MoeStats,
}

/// [`device::Device::moe`] on the CPU; the float buffers are `spec.scratch`'s.
pub(super) fn block(
    cpu: &mut Cpu,
    spec: &MoeSpec<'_>,
    x: device::Buf,
    n: usize,
    hidden: device::Buf,
) {
    let p = &spec.routing;
    let (e, ne, k, ff) = (spec.n_embd, p.n_expert, p.k, spec.n_ff_exp);
    let sc = spec.scratch;
    let (mut probs, mut gathered) = (cpu.bufs.take(sc.probs), cpu.bufs.take(sc.x));
    let (mut gate, mut up, mut out) = (
        cpu.bufs.take(sc.gate),
        cpu.bufs.take(sc.up),
        cpu.bufs.take(sc.out),
    );
    let mut h = cpu.bufs.take(hidden);
    let Routes {
        chosen,
        slot,
        start,
        stats,
    } = &mut cpu.moe;
    chosen.resize(n * k, (0, 0.0));
    slot.resize(n * k, 0);
    start.resize(ne + 1, 0);
    let xs = &cpu.bufs[x][..n * e];
    let view = |m: device::Mat| cpu.mats[m.0 as usize].view();
    let probs_n = &mut probs[..n * ne];
    matmul(&cpu.pool, &view(spec.router), xs, probs_n, cpu.precision);
    let bias = spec.choice_bias.map(|b| &cpu.bufs[b][..ne]);
    let rows = probs_n.chunks_exact_mut(ne).zip(chosen.chunks_exact_mut(k));
    for (r, (row, picks)) in rows.enumerate() {
        let given = spec.given.map(|g| &g[r * k..(r + 1) * k]);
        route(p, row, picks, bias, given);
    }
    group(&chosen[..n * k], ne, &mut slot[..n * k], start);
    for (i, &sl) in slot[..n * k].iter().enumerate() {
        gathered[sl * e..(sl + 1) * e].copy_from_slice(&xs[i / k * e..(i / k + 1) * e]);
    }
    let active: Vec<usize> = (0..ne).filter(|&ex| start[ex + 1] > start[ex]).collect();
    stats.blocks += 1;
    stats.experts += active.len() as u64;
    let total = n * k;
    let sizes = group_sizes(&active, start, ff);
    match spec.net {
        ExpertNet::Swiglu => {
            let gate_up: Vec<[QMatrix; 2]> = active
                .iter()
                .map(|&ex| [view(spec.gate[ex]), view(spec.up[ex])])
                .collect();
            let groups = by_expert(&active, start, &gate_up, &gathered, e);
            let mut ys: Vec<&mut [f32]> = split(&mut gate[..total * ff], &sizes)
                .into_iter()
                .zip(split(&mut up[..total * ff], &sizes))
                .flat_map(|(g, u)| [g, u])
                .collect();
            matmul_grouped(&cpu.pool, &groups, &mut ys, cpu.precision);
            match spec.limit {
                Some(c) => {
                    swiglu_limited_inplace(&mut gate[..total * ff], &mut up[..total * ff], c)
                }
                None => swiglu_inplace(&mut gate[..total * ff], &up[..total * ff]),
            }
        }
        ExpertNet::ReluSqr => {
            let ups: Vec<[QMatrix; 1]> = active.iter().map(|&ex| [view(spec.up[ex])]).collect();
            let groups = by_expert(&active, start, &ups, &gathered, e);
            let mut ys = split(&mut gate[..total * ff], &sizes);
            matmul_grouped(&cpu.pool, &groups, &mut ys, cpu.precision);
            let relu_sqr = |v: &mut f32| *v = v.max(0.0) * v.max(0.0);
            gate[..total * ff].iter_mut().for_each(relu_sqr);
        }
    }
    let downs: Vec<[QMatrix; 1]> = active.iter().map(|&ex| [view(spec.down[ex])]).collect();
    let groups = by_expert(&active, start, &downs, &gate, ff);
    let mut ys = split(&mut out[..total * e], &group_sizes(&active, start, e));
    matmul_grouped(&cpu.pool, &groups, &mut ys, cpu.precision);
    let isa = Isa::detect();
    let acc = &mut gathered[..e];
    for (r, hr) in h[..n * e].chunks_exact_mut(e).enumerate() {
        for j in 0..k {
            let (sl, w) = (slot[r * k + j], chosen[r * k + j].1);
            let y = &out[sl * e..(sl + 1) * e];
            if j == 0 {
                acc.iter_mut().zip(y).for_each(|(a, &v)| *a = v * w);
            } else {
                acc.iter_mut().zip(y).for_each(|(a, &v)| *a += v * w);
            }
        }
        if let Some(sh) = spec.shared {
            let y = &cpu.bufs[sh.out][r * e..(r + 1) * e];
            let g = match sh.gate {
                Some(gw) => sigmoid(dot(isa, &xs[r * e..(r + 1) * e], &cpu.bufs[gw])),
                None => 1.0,
            };
            acc.iter_mut().zip(y).for_each(|(a, &v)| *a += v * g);
        }
        add_inplace(hr, acc);
    }
    cpu.bufs.put(sc.probs, probs);
    cpu.bufs.put(sc.x, gathered);
    cpu.bufs.put(sc.gate, gate);
    cpu.bufs.put(sc.up, up);
    cpu.bufs.put(sc.out, out);
    cpu.bufs.put(hidden, h);
}

/// Turns one row's router logits `probs` (`[n_expert]`) into probabilities in place and
/// writes its `k = picks.len()` experts to `picks`: the `given` ones, or the most probable
/// first (counting `bias` when given; ties: the lower expert), each with its weight: its
/// probability, divided by the sum of the chosen ones' when `p.norm_weights`, times
/// `p.weights_scale`.
pub fn route(
    p: &Routing,
    probs: &mut [f32],
    picks: &mut [(usize, f32)],
    bias: Option<&[f32]>,
    given: Option<&[u32]>,
) {
    match p.gating {
        Gating::Softmax => softmax_inplace(probs),
        Gating::Sigmoid => probs.iter_mut().for_each(|v| *v = sigmoid(*v)),
        Gating::SqrtSoftplus => probs.iter_mut().for_each(|v| *v = softplus(*v).sqrt()),
    }
    if let Some(g) = given {
        for (pick, &ex) in picks.iter_mut().zip(g) {
            *pick = (ex as usize, probs[ex as usize]);
        }
    }
    for j in (0..picks.len()).filter(|_| given.is_none()) {
        let mut best: Option<(usize, f32)> = None;
        for (ex, &v) in probs.iter().enumerate() {
            let key = v + bias.map_or(0.0, |b| b[ex]);
            let taken = picks[..j].iter().any(|&(c, _)| c == ex);
            if !taken && best.is_none_or(|(_, b)| key > b) {
                best = Some((ex, key));
            }
        }
        let ex = best.expect("k is at most n_expert").0;
        picks[j] = (ex, probs[ex]);
    }
    let scale = if p.norm_weights {
        let sum: f32 = picks.iter().map(|&(_, w)| w).sum();
        p.weights_scale / sum.max(MIN_WEIGHT_SUM)
    } else {
        p.weights_scale
    };
    if scale != 1.0 {
        picks.iter_mut().for_each(|(_, w)| *w *= scale);
    }
}

/// `ln(1 + e^x)`, `x` itself above 20 (ggml's).
fn softplus(x: f32) -> f32 {
    if x > 20.0 {
        x
    } else {
        (1.0 + x.exp()).ln()
    }
}

/// Groups the choices `chosen` (`[rows, k]`, expert ids below `n_expert`) by expert: after
/// it, expert `e`'s choices are slots `start[e]..start[e + 1]` in the order of `chosen`, and
/// `slot[i]` is where choice `i` went.
fn group(chosen: &[(usize, f32)], n_expert: usize, slot: &mut [usize], start: &mut [usize]) {
    let start = &mut start[..n_expert + 1];
    start.fill(0);
    for &(ex, _) in chosen {
        start[ex + 1] += 1;
    }
    for ex in 0..n_expert {
        start[ex + 1] += start[ex];
    }
    for (sl, &(ex, _)) in slot.iter_mut().zip(chosen) {
        *sl = start[ex];
        start[ex] += 1;
    }
    for ex in (1..=n_expert).rev() {
        start[ex] = start[ex - 1];
    }
    start[0] = 0;
}

/// One group per expert of `active`: its matrices `ws[i]` (in the order of `active`) and its
/// slots `start[ex]..start[ex + 1]` of `input` (`[slots, width]`).
fn by_expert<'a, const N: usize>(
    active: &[usize],
    start: &[usize],
    ws: &'a [[QMatrix<'a>; N]],
    input: &'a [f32],
    width: usize,
) -> Vec<Group<'a>> {
    active
        .iter()
        .zip(ws)
        .map(|(&ex, ws)| Group {
            ws,
            x: &input[start[ex] * width..start[ex + 1] * width],
        })
        .collect()
}

/// The floats of each active expert's slots in a buffer `[slots, width]`.
fn group_sizes(active: &[usize], start: &[usize], width: usize) -> Vec<usize> {
    active
        .iter()
        .map(|&ex| (start[ex + 1] - start[ex]) * width)
        .collect()
}

/// `buf` cut into consecutive pieces of `sizes`.
fn split<'a>(mut buf: &'a mut [f32], sizes: &[usize]) -> Vec<&'a mut [f32]> {
    sizes
        .iter()
        .map(|&n| {
            let (head, rest) = std::mem::take(&mut buf).split_at_mut(n);
            buf = rest;
            head
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(k: usize, norm: bool) -> Routing {
        Routing {
            n_expert: 4,
            k,
            gating: Gating::Softmax,
            norm_weights: norm,
            weights_scale: 1.0,
        }
    }

    #[test]
    fn route_picks_the_most_probable_and_weighs_them() {
        let mut probs = [1.0, 3.0, 3.0, 2.0];
        let mut picks = [(0, 0.0); 3];
        route(&params(3, false), &mut probs, &mut picks, None, None);
        assert_eq!(picks.map(|p| p.0), [1, 2, 3], "ties go to the lower expert");
        let z: f32 = [1f32, 3.0, 3.0, 2.0].iter().map(|v| v.exp()).sum();
        for (ex, w) in picks {
            let want = [1f32, 3.0, 3.0, 2.0][ex].exp() / z;
            assert!((w - want).abs() < 1e-6, "expert {ex}: {w} vs {want}");
        }
        let mut probs = [1.0, 3.0, 3.0, 2.0];
        route(&params(3, true), &mut probs, &mut picks, None, None);
        let sum: f32 = picks.iter().map(|p| p.1).sum();
        assert!((sum - 1.0).abs() < 1e-6);
    }

    #[test]
    fn group_matches_the_worked_example() {
        let chosen = [(2, 0.0), (0, 0.0), (2, 0.0), (3, 0.0), (0, 0.0), (2, 0.0)];
        let (mut slot, mut start) = ([0; 6], [9; 5]);
        group(&chosen, 4, &mut slot, &mut start);
        assert_eq!(start, [0, 2, 2, 5, 6]);
        assert_eq!(slot, [2, 0, 3, 5, 1, 4]);
    }
}
