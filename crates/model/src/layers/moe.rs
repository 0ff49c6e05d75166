//! Mixture-of-experts feed-forward, for any number of experts per row.
//!
//! Each row's router picks `k` of `n_expert` experts ([`route`]). The rows are then grouped
//! by expert, and one [`matmul_grouped`] multiplies every chosen expert's matrices with the
//! rows routed to it, so each chosen expert's weights stream once per step however many rows
//! chose it. Each row then sums its experts' outputs, weighted, in the order it chose them.
//! Every product is [`kernels::matmul`]'s, so a row's result depends on nothing but the row.
//!
//! Worked example (`k = 2`, 4 experts, 3 rows): row 0 picks experts (2, 0), row 1 (2, 3),
//! row 2 (0, 2). Grouped by expert, the gathered rows are `[r0, r2 | r0, r1, r2 | r1]` for
//! experts 0, 2 and 3 (`start = [0, 2, 2, 5, 6]`); row 0's choices sit in slots 2 and 0,
//! row 1's in 3 and 5, row 2's in 1 and 4. Expert 2 multiplies slots 2..5 in one pass, and
//! row 1's output is `w₁₀ · out[3] + w₁₁ · out[5]`.

use kernels::dot::{dot, Isa};
use kernels::ops::{add_inplace, exp, softmax_inplace, swiglu_inplace};
use kernels::{matmul, matmul_grouped, Group, QMatrix, ThreadPool};

use crate::forward::{MoeScratch, Scratch};
use crate::hparams::{Gating, MoeParams};
use crate::layers::ffn;
use crate::weights::MoeWeights;
use crate::Model;

/// The smallest sum the chosen weights are divided by when renormalized (llama.cpp's).
const MIN_WEIGHT_SUM: f32 = 6.103_515_6e-5;

/// `hidden += Σ_j w_j · expert_{e_j}(x) (+ shared(x))` for `x = s.x[..n · n_embd]` (the
/// normalized input), `hidden` `[n, n_embd]`.
pub fn block(
    model: &Model,
    m: &MoeWeights,
    hidden: &mut [f32],
    n: usize,
    s: &mut Scratch,
    pool: &ThreadPool,
) {
    let hp = &model.hparams;
    let p = hp.moe.as_ref().expect("a mixture-of-experts block");
    let (e, ne, k, ff) = (hp.n_embd, p.n_expert, p.n_expert_used, p.n_ff_exp);
    let f = &model.file;
    {
        let MoeScratch {
            probs,
            chosen,
            slot,
            start,
            x: gathered,
            gate,
            up,
            out,
            stats,
        } = &mut s.moe;
        let x = &s.x[..n * e];
        let probs = &mut probs[..n * ne];
        matmul(pool, &m.ffn_gate_inp.view(f), x, probs, s.precision);
        for (row, picks) in probs.chunks_exact_mut(ne).zip(chosen.chunks_exact_mut(k)) {
            route(p, row, picks);
        }
        group(&chosen[..n * k], ne, &mut slot[..n * k], start);
        for (i, &sl) in slot[..n * k].iter().enumerate() {
            gathered[sl * e..(sl + 1) * e].copy_from_slice(&x[i / k * e..(i / k + 1) * e]);
        }
        let active: Vec<usize> = (0..ne).filter(|&ex| start[ex + 1] > start[ex]).collect();
        stats.blocks += 1;
        stats.experts += active.len() as u64;
        let total = n * k;
        let gate_up: Vec<[QMatrix; 2]> = active
            .iter()
            .map(|&ex| [m.ffn_gate_exps[ex].view(f), m.ffn_up_exps[ex].view(f)])
            .collect();
        let groups = by_expert(&active, start, &gate_up, gathered, e);
        let sizes = group_sizes(&active, start, ff);
        let mut ys: Vec<&mut [f32]> = split(&mut gate[..total * ff], &sizes)
            .into_iter()
            .zip(split(&mut up[..total * ff], &sizes))
            .flat_map(|(g, u)| [g, u])
            .collect();
        matmul_grouped(pool, &groups, &mut ys, s.precision);
        swiglu_inplace(&mut gate[..total * ff], &up[..total * ff]);
        let downs: Vec<[QMatrix; 1]> = active
            .iter()
            .map(|&ex| [m.ffn_down_exps[ex].view(f)])
            .collect();
        let groups = by_expert(&active, start, &downs, gate, ff);
        let mut ys = split(&mut out[..total * e], &group_sizes(&active, start, e));
        matmul_grouped(pool, &groups, &mut ys, s.precision);
    }
    if let Some(shared) = &m.shared {
        ffn::swiglu(model, shared, n, s, pool);
    }
    let isa = Isa::detect();
    let MoeScratch {
        chosen,
        slot,
        x: acc,
        out,
        ..
    } = &mut s.moe;
    let acc = &mut acc[..e];
    for (r, h) in hidden.chunks_exact_mut(e).enumerate() {
        for j in 0..k {
            let (sl, w) = (slot[r * k + j], chosen[r * k + j].1);
            let y = &out[sl * e..(sl + 1) * e];
            if j == 0 {
                acc.iter_mut().zip(y).for_each(|(a, &v)| *a = v * w);
            } else {
                acc.iter_mut().zip(y).for_each(|(a, &v)| *a += v * w);
            }
        }
        if m.shared.is_some() {
            let y = &s.proj[r * e..(r + 1) * e];
            let g = match &m.ffn_gate_inp_shexp {
                Some(gw) => sigmoid(dot(isa, &s.x[r * e..(r + 1) * e], gw)),
                None => 1.0,
            };
            acc.iter_mut().zip(y).for_each(|(a, &v)| *a += v * g);
        }
        add_inplace(h, acc);
    }
}

fn sigmoid(v: f32) -> f32 {
    1.0 / (1.0 + exp(-v))
}

/// Turns one row's router logits `probs` (`[n_expert]`) into probabilities in place and
/// writes its `k = picks.len()` experts to `picks`, most probable first (ties: the lower
/// expert), each with its weight: its probability, divided by the sum of the chosen ones'
/// when `p.norm_weights`, times `p.weights_scale`.
pub fn route(p: &MoeParams, probs: &mut [f32], picks: &mut [(usize, f32)]) {
    match p.gating {
        Gating::Softmax => softmax_inplace(probs),
        Gating::Sigmoid => probs.iter_mut().for_each(|v| *v = sigmoid(*v)),
    }
    for j in 0..picks.len() {
        let mut best: Option<(usize, f32)> = None;
        for (ex, &v) in probs.iter().enumerate() {
            let taken = picks[..j].iter().any(|&(c, _)| c == ex);
            if !taken && best.is_none_or(|(_, b)| v > b) {
                best = Some((ex, v));
            }
        }
        picks[j] = best.expect("k is at most n_expert");
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

    fn params(k: usize, norm: bool) -> MoeParams {
        MoeParams {
            n_expert: 4,
            n_expert_used: k,
            n_ff_exp: 8,
            gating: Gating::Softmax,
            norm_weights: norm,
            weights_scale: 1.0,
            shared: None,
            n_dense_lead: 0,
        }
    }

    #[test]
    fn route_picks_the_most_probable_and_weighs_them() {
        let mut probs = [1.0, 3.0, 3.0, 2.0];
        let mut picks = [(0, 0.0); 3];
        route(&params(3, false), &mut probs, &mut picks);
        assert_eq!(picks.map(|p| p.0), [1, 2, 3], "ties go to the lower expert");
        let z: f32 = [1f32, 3.0, 3.0, 2.0].iter().map(|v| v.exp()).sum();
        for (ex, w) in picks {
            let want = [1f32, 3.0, 3.0, 2.0][ex].exp() / z;
            assert!((w - want).abs() < 1e-6, "expert {ex}: {w} vs {want}");
        }
        let mut probs = [1.0, 3.0, 3.0, 2.0];
        route(&params(3, true), &mut probs, &mut picks);
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
