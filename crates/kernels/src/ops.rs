//! Row-wise operations: RMSNorm, RoPE, SwiGLU, softmax. Each works on one row at a time
//! in a fixed order, so results never depend on the batch.

use device::math::{exp, exp_shifted};
#[cfg(target_arch = "x86_64")]
use device::math::{exp_avx2, exp_avx512};

/// `out[i] = x[i] / sqrt(mean(x²) + eps) * weight[i]`, the mean summed in f64 in index order.
pub fn rms_norm(x: &[f32], weight: &[f32], eps: f32, out: &mut [f32]) {
    assert!(x.len() == weight.len() && x.len() == out.len());
    let sum: f64 = x.iter().map(|&v| (v * v) as f64).sum();
    let scale = 1.0 / ((sum / x.len() as f64) as f32 + eps).sqrt();
    for ((o, &v), &w) in out.iter_mut().zip(x).zip(weight) {
        *o = (v * scale) * w;
    }
}

/// `rms_norm` in place.
pub fn rms_norm_inplace(x: &mut [f32], weight: &[f32], eps: f32) {
    assert_eq!(x.len(), weight.len());
    let sum: f64 = x.iter().map(|&v| (v * v) as f64).sum();
    let scale = 1.0 / ((sum / x.len() as f64) as f32 + eps).sqrt();
    for (v, &w) in x.iter_mut().zip(weight) {
        *v = (*v * scale) * w;
    }
}

pub use device::{rope_angles, RopeMode};

/// Rotates the first `2 * cos_sin.len()` dimensions of every head in `x`
/// (`[n_heads, head_dim]`).
pub fn rope(x: &mut [f32], head_dim: usize, mode: RopeMode, cos_sin: &[(f32, f32)]) {
    let half = cos_sin.len();
    for head in x.chunks_exact_mut(head_dim) {
        for (i, &(c, s)) in cos_sin.iter().enumerate() {
            let (a, b) = match mode {
                RopeMode::Normal => (2 * i, 2 * i + 1),
                RopeMode::Neox => (i, i + half),
            };
            let (x0, x1) = (head[a], head[b]);
            head[a] = x0 * c - x1 * s;
            head[b] = x0 * s + x1 * c;
        }
    }
}

/// `gate[i] = silu(gate[i]) * up[i]` with `silu(v) = v / (1 + e^-v)` and `e^x` from
/// [`exp`] (the SIMD version gives the same bits).
pub fn swiglu_inplace(gate: &mut [f32], up: &[f32]) {
    gated_inplace::<false>(gate, up);
}

/// `gate[i] = silu(min(gate[i], limit)) · clamp(up[i], -limit, limit)`: [`swiglu_inplace`]
/// on the clamped values (`up` is clamped in place).
pub fn swiglu_limited_inplace(gate: &mut [f32], up: &mut [f32], limit: f32) {
    gate.iter_mut().for_each(|g| *g = g.min(limit));
    up.iter_mut().for_each(|u| *u = u.clamp(-limit, limit));
    swiglu_inplace(gate, up);
}

/// `x[i] = silu(x[i])`, as [`swiglu_inplace`] gives it with `up` all ones.
pub fn silu_inplace(x: &mut [f32]) {
    ungated_inplace::<false>(x);
}

/// `x[i] = gelu(x[i])`, as [`gelu_inplace`] gives it with `up` all ones.
pub fn gelu_alone_inplace(x: &mut [f32]) {
    ungated_inplace::<true>(x);
}

fn ungated_inplace<const GELU: bool>(x: &mut [f32]) {
    const ONES: [f32; 256] = [1.0; 256];
    for part in x.chunks_mut(ONES.len()) {
        let n = part.len();
        gated_inplace::<GELU>(part, &ONES[..n]);
    }
}

/// `gate[i] = gelu(gate[i]) * up[i]`, GELU's tanh approximation
/// `0.5 · v · (1 + tanh(√(2/π) · (v + 0.044715 · v³)))`, computed as the equal
/// `v / (1 + e^-a)` with `a = 2√(2/π) · (v + 0.044715 · v³)` and `e^x` from [`exp`] (the SIMD
/// version gives the same bits).
pub fn gelu_inplace(gate: &mut [f32], up: &[f32]) {
    gated_inplace::<true>(gate, up);
}

/// `2 · √(2/π)`, and GELU's cubic coefficient.
const GELU_K: f32 = 1.595_769_2;
const GELU_B: f32 = 0.044_715;

/// The argument of `e^-a` for `v`: `v` (SiLU) or GELU's `K · (v + ((B · v) · v) · v)`, each
/// step one rounded operation.
#[inline(always)]
fn gate_arg<const GELU: bool>(v: f32) -> f32 {
    if GELU {
        GELU_K * (v + ((GELU_B * v) * v) * v)
    } else {
        v
    }
}

fn gated_inplace<const GELU: bool>(gate: &mut [f32], up: &[f32]) {
    assert_eq!(gate.len(), up.len());
    #[cfg(target_arch = "x86_64")]
    {
        let f = crate::features::CpuFeatures::get();
        if f.avx512f {
            // SAFETY: AVX-512 F was detected; the lengths are equal.
            return unsafe { gated_avx512::<GELU>(gate, up) };
        }
        if f.avx2 && f.fma {
            // SAFETY: AVX2 and FMA were detected; the lengths are equal.
            return unsafe { gated_avx2::<GELU>(gate, up) };
        }
    }
    gated_scalar::<GELU>(gate, up);
}

fn gated_scalar<const GELU: bool>(gate: &mut [f32], up: &[f32]) {
    for (g, &u) in gate.iter_mut().zip(up) {
        *g = *g / (1.0 + exp(-gate_arg::<GELU>(*g))) * u;
    }
}

/// `1 / (1 + e^-v)` with [`exp`].
pub fn sigmoid(v: f32) -> f32 {
    1.0 / (1.0 + exp(-v))
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn gated_avx2<const GELU: bool>(gate: &mut [f32], up: &[f32]) {
    use std::arch::x86_64::*;
    let n8 = gate.len() / 8 * 8;
    let one = _mm256_set1_ps(1.0);
    let (k, b) = (_mm256_set1_ps(GELU_K), _mm256_set1_ps(GELU_B));
    for (g, u) in gate[..n8].chunks_exact_mut(8).zip(up.chunks_exact(8)) {
        let gv = _mm256_loadu_ps(g.as_ptr());
        let a = if GELU {
            let cube = _mm256_mul_ps(_mm256_mul_ps(_mm256_mul_ps(b, gv), gv), gv);
            _mm256_mul_ps(k, _mm256_add_ps(gv, cube))
        } else {
            gv
        };
        let e = exp_avx2(_mm256_sub_ps(_mm256_setzero_ps(), a));
        let s = _mm256_div_ps(gv, _mm256_add_ps(one, e));
        _mm256_storeu_ps(
            g.as_mut_ptr(),
            _mm256_mul_ps(s, _mm256_loadu_ps(u.as_ptr())),
        );
    }
    gated_scalar::<GELU>(&mut gate[n8..], &up[n8..]);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn gated_avx512<const GELU: bool>(gate: &mut [f32], up: &[f32]) {
    use std::arch::x86_64::*;
    let n16 = gate.len() / 16 * 16;
    let one = _mm512_set1_ps(1.0);
    let (k, b) = (_mm512_set1_ps(GELU_K), _mm512_set1_ps(GELU_B));
    for (g, u) in gate[..n16].chunks_exact_mut(16).zip(up.chunks_exact(16)) {
        let gv = _mm512_loadu_ps(g.as_ptr());
        let a = if GELU {
            let cube = _mm512_mul_ps(_mm512_mul_ps(_mm512_mul_ps(b, gv), gv), gv);
            _mm512_mul_ps(k, _mm512_add_ps(gv, cube))
        } else {
            gv
        };
        let e = exp_avx512(_mm512_sub_ps(_mm512_setzero_ps(), a));
        let s = _mm512_div_ps(gv, _mm512_add_ps(one, e));
        _mm512_storeu_ps(
            g.as_mut_ptr(),
            _mm512_mul_ps(s, _mm512_loadu_ps(u.as_ptr())),
        );
    }
    gated_scalar::<GELU>(&mut gate[n16..], &up[n16..]);
}

/// `x[i] += y[i]`.
pub fn add_inplace(x: &mut [f32], y: &[f32]) {
    assert_eq!(x.len(), y.len());
    for (a, &b) in x.iter_mut().zip(y) {
        *a += b;
    }
}

/// `x ← H_n·x / √n` over each block of `n` consecutive values (`n` a power of two dividing
/// `x.len()`): the orthonormal Walsh–Hadamard transform in Sylvester's order
/// (`H_n[i][j] = (-1)^popcount(i & j)`), its own inverse; a quantized KV pool's rotation
/// (`kv::Rotation`).
pub fn hadamard(x: &mut [f32], n: usize) {
    assert!(
        n.is_power_of_two() && x.len().is_multiple_of(n),
        "blocks of {n}"
    );
    let scale = 1.0 / (n as f32).sqrt();
    for b in x.chunks_exact_mut(n) {
        b.iter_mut().for_each(|v| *v *= scale);
        let mut len = 1;
        while len < n {
            for pair in b.chunks_exact_mut(2 * len) {
                let (u, v) = pair.split_at_mut(len);
                for (a, c) in u.iter_mut().zip(v) {
                    (*a, *c) = (*a + *c, *a - *c);
                }
            }
            len *= 2;
        }
    }
}

/// In-place softmax with [`exp`]; the sum is taken in index order.
pub fn softmax_inplace(x: &mut [f32]) {
    let max = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    exp_shifted(x, max);
    let sum: f32 = x.iter().sum();
    let inv = 1.0 / sum;
    for v in x.iter_mut() {
        *v *= inv;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hadamard_is_the_sylvester_matrix_and_its_own_inverse() {
        for n in [64usize, 128, 256] {
            let x: Vec<f32> = (0..2 * n)
                .map(|i| ((i * 37 % 101) as f32 - 50.0) / 7.0)
                .collect();
            let mut y = x.clone();
            hadamard(&mut y, n);
            for (b, yb) in y.chunks(n).enumerate() {
                for (i, &yi) in yb.iter().enumerate() {
                    let want: f64 = (0..n)
                        .map(|j| {
                            let sign = if (i & j).count_ones() % 2 == 0 {
                                1.0
                            } else {
                                -1.0
                            };
                            sign * x[b * n + j] as f64
                        })
                        .sum::<f64>()
                        / (n as f64).sqrt();
                    assert!((yi as f64 - want).abs() < 1e-4, "n {n} block {b} row {i}");
                }
            }
            hadamard(&mut y, n);
            let err = x
                .iter()
                .zip(&y)
                .map(|(a, b)| (a - b).abs())
                .fold(0.0, f32::max);
            assert!(err < 1e-5, "n {n}: H·H·x differs from x by {err}");
        }
    }

    #[test]
    fn simd_gated_units_give_the_scalar_bits() {
        let x: Vec<f32> = (0..4000).map(|i| (i as f32 - 2000.0) * 0.043).collect();
        let up = device::testing::data(x.len() + 5, 3);
        let mut gate = x.clone();
        gate.extend([0.0, -0.0, 1e-30, -200.0, 200.0]);
        let (mut gelu, mut gelu_twin) = (gate.clone(), gate.clone());
        let mut twin = gate.clone();
        swiglu_inplace(&mut gate, &up);
        gated_scalar::<false>(&mut twin, &up);
        gelu_inplace(&mut gelu, &up);
        gated_scalar::<true>(&mut gelu_twin, &up);
        for (i, (a, b)) in gate.iter().zip(&twin).enumerate() {
            assert_eq!(a.to_bits(), b.to_bits(), "swiglu element {i}");
        }
        for (i, (a, b)) in gelu.iter().zip(&gelu_twin).enumerate() {
            assert_eq!(a.to_bits(), b.to_bits(), "gelu element {i}");
        }
    }

    /// GELU as `v / (1 + e^-a)` agrees with its tanh form in float64.
    #[test]
    fn gelu_matches_the_tanh_form() {
        let x: Vec<f32> = (0..4000).map(|i| (i as f32 - 2000.0) * 0.011).collect();
        let mut g = x.clone();
        gelu_inplace(&mut g, &vec![1.0; x.len()]);
        for (&v, &got) in x.iter().zip(&g) {
            let v = v as f64;
            let c = (2.0 / std::f64::consts::PI).sqrt();
            let want = 0.5 * v * (1.0 + (c * (v + 0.044715 * v * v * v)).tanh());
            assert!(
                (got as f64 - want).abs() < 1e-6 * want.abs().max(1e-2),
                "gelu({v}) = {got}, not {want}"
            );
        }
    }

    #[test]
    fn rms_norm_of_constant_row_is_weight() {
        let x = vec![3.0f32; 8];
        let w: Vec<f32> = (0..8).map(|i| i as f32).collect();
        let mut out = vec![0f32; 8];
        rms_norm(&x, &w, 0.0, &mut out);
        for (o, w) in out.iter().zip(&w) {
            assert!((o - w).abs() < 1e-6);
        }
        let mut y = x.clone();
        rms_norm_inplace(&mut y, &w, 0.0);
        assert_eq!(y, out);
    }

    #[test]
    fn rope_preserves_norm_and_is_identity_at_zero() {
        let mut cs = vec![(0f32, 0f32); 4];
        let spec = device::RopeSpec {
            head_dim: 8,
            n_rot: 8,
            mode: RopeMode::Neox,
            freq_base: 10000.0,
            scaling: device::RopeScaling::NONE,
        };
        rope_angles(0, &spec, &mut cs);
        let orig: Vec<f32> = (0..16).map(|i| i as f32 * 0.1).collect();
        let mut x = orig.clone();
        rope(&mut x, 8, RopeMode::Neox, &cs);
        assert_eq!(x, orig);
        rope_angles(17, &spec, &mut cs);
        for mode in [RopeMode::Normal, RopeMode::Neox] {
            let mut x = orig.clone();
            rope(&mut x, 8, mode, &cs);
            let n0: f32 = orig.iter().map(|v| v * v).sum();
            let n1: f32 = x.iter().map(|v| v * v).sum();
            assert!((n0 - n1).abs() < 1e-4);
            assert_ne!(x, orig);
        }
    }

    #[test]
    fn softmax_sums_to_one() {
        let mut x = vec![1.0, 2.0, 3.0, -1e30];
        softmax_inplace(&mut x);
        assert!((x.iter().sum::<f32>() - 1.0).abs() < 1e-6);
        assert!(x[2] > x[1] && x[1] > x[0] && x[3] == 0.0);
    }

    #[test]
    fn swiglu_values() {
        let mut g = vec![0.0, 1.0, -1.0];
        swiglu_inplace(&mut g, &[2.0, 2.0, 2.0]);
        assert_eq!(g[0], 0.0);
        assert!((g[1] - 2.0 * 0.7310586).abs() < 1e-6);
        assert!((g[2] + 2.0 * 0.26894143).abs() < 1e-6);
    }
}
