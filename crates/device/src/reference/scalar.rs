//! The reference backend's scalar arithmetic, in f64 wherever it sums: activations, the
//! softmax, the experts' routing, the Walsh–Hadamard rotation and RoPE's scaled angles.

use crate::seam::{Gating, Routing};

pub(super) fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter()
        .zip(b)
        .map(|(&x, &y)| x as f64 * y as f64)
        .sum::<f64>() as f32
}

/// `x` under the orthonormal Walsh–Hadamard transform over blocks of `n` (`kv::Rotation`),
/// multiplied out as its matrix: `y[i] = Σ_j (-1)^popcount(i & j) · x[j] / √n` per block.
pub(super) fn hadamard(x: &[f32], n: usize) -> Vec<f32> {
    let scale = 1.0 / (n as f64).sqrt();
    x.chunks_exact(n)
        .flat_map(|b| {
            (0..n).map(move |i| {
                let sum: f64 = b
                    .iter()
                    .enumerate()
                    .map(|(j, &v)| {
                        if (i & j).count_ones() % 2 == 0 {
                            v as f64
                        } else {
                            -v as f64
                        }
                    })
                    .sum();
                (sum * scale) as f32
            })
        })
        .collect()
}

pub(super) fn silu(v: f32) -> f32 {
    (v as f64 / (1.0 + (-v as f64).exp())) as f32
}

pub(super) fn sigmoid(v: f32) -> f32 {
    (1.0 / (1.0 + (-v as f64).exp())) as f32
}

pub(super) fn gelu(v: f32) -> f32 {
    let x = v as f64;
    let c = (2.0 / std::f64::consts::PI).sqrt();
    (0.5 * x * (1.0 + (c * (x + 0.044715 * x * x * x)).tanh())) as f32
}

/// Probabilities of `logits` in place (f64 sums).
pub(super) fn softmax(x: &mut [f32]) {
    let max = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let sum: f64 = x.iter().map(|&v| ((v - max) as f64).exp()).sum();
    for v in x.iter_mut() {
        *v = (((*v - max) as f64).exp() / sum) as f32;
    }
}

/// A row's `k` experts, most probable first (ties: the lower), with their weights.
pub fn route(
    r: &Routing,
    logits: &[f32],
    bias: Option<&[f32]>,
    given: Option<&[u32]>,
) -> Vec<(usize, f32)> {
    let mut p = logits.to_vec();
    match r.gating {
        Gating::Softmax => softmax(&mut p),
        Gating::Sigmoid => p.iter_mut().for_each(|v| *v = sigmoid(*v)),
        Gating::SqrtSoftplus => p.iter_mut().for_each(|v| *v = softplus(*v).sqrt()),
    }
    let chosen: Vec<usize> = match given {
        Some(g) => g.iter().map(|&e| e as usize).collect(),
        None => {
            let key: Vec<f32> = match bias {
                Some(b) => p.iter().zip(b).map(|(&v, &b)| v + b).collect(),
                None => p.clone(),
            };
            let mut order: Vec<usize> = (0..p.len()).collect();
            order.sort_by(|&a, &b| key[b].total_cmp(&key[a]).then(a.cmp(&b)));
            order[..r.k].to_vec()
        }
    };
    let mut picks: Vec<(usize, f32)> = chosen.iter().map(|&e| (e, p[e])).collect();
    let scale = if r.norm_weights {
        let sum: f32 = picks.iter().map(|p| p.1).sum();
        r.weights_scale / sum.max(6.103_515_6e-5)
    } else {
        r.weights_scale
    };
    picks.iter_mut().for_each(|p| p.1 *= scale);
    picks
}

fn softplus(x: f32) -> f32 {
    if x > 20.0 {
        x
    } else {
        (1.0 + x.exp()).ln()
    }
}

/// `silu(min(g, limit)) · clamp(u, -limit, limit)`, or `silu(g) · u` without a limit.
pub(super) fn swiglu_one(g: f32, u: f32, limit: Option<f32>) -> f32 {
    match limit {
        Some(c) => silu(g.min(c)) * u.clamp(-c, c),
        None => silu(g) * u,
    }
}

/// The angle `extrap` of pair `i` and the magnitude of its cos and sin under `s`, in f64
/// (the same formulas as [`crate::rope_angles`]).
pub(super) fn scaled(extrap: f64, i: usize, s: &crate::RopeScaling) -> (f64, f64) {
    let interp = s.freq_scale as f64 * extrap;
    if s.ext_factor == 0.0 {
        return (interp, s.attn_factor as f64);
    }
    let [low, high] = s.corr_dims.map(f64::from);
    let ramp = 1.0 - ((i as f64 - low) / (high - low).max(0.001)).clamp(0.0, 1.0);
    let mix = ramp * s.ext_factor as f64;
    let m = s.attn_factor as f64 * (1.0 + 0.1 * (1.0 / s.freq_scale as f64).ln());
    (interp * (1.0 - mix) + extrap * mix, m)
}
