//! Row-wise operations: RMSNorm, RoPE, SwiGLU, softmax. Each works on one row at a time
//! in a fixed order, so results never depend on the batch.

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

/// How RoPE pairs the dimensions of a head.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RopeMode {
    /// Adjacent pairs `(2i, 2i+1)` (llama in GGUF, whose Q/K rows were permuted at conversion).
    Normal,
    /// Halves `(i, i + n_rot/2)` (qwen2, qwen3: GPT-NeoX style).
    Neox,
}

/// Rotation angles for one position: `cos_sin[i] = (cos θ_i, sin θ_i)` with
/// `θ_i = pos · base^(-2i/n_rot)`, computed as ggml does (θ multiplied by the f32 ratio
/// step by step) so that positions agree with llama.cpp.
pub fn rope_angles(pos: usize, n_rot: usize, freq_base: f32, cos_sin: &mut [(f32, f32)]) {
    assert_eq!(cos_sin.len(), n_rot / 2);
    let theta_scale = freq_base.powf(-2.0 / n_rot as f32);
    let mut theta = pos as f32;
    for cs in cos_sin.iter_mut() {
        *cs = (theta.cos(), theta.sin());
        theta *= theta_scale;
    }
}

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

/// `gate[i] = silu(gate[i]) * up[i]` with `silu(v) = v / (1 + e^-v)`.
pub fn swiglu_inplace(gate: &mut [f32], up: &[f32]) {
    assert_eq!(gate.len(), up.len());
    for (g, &u) in gate.iter_mut().zip(up) {
        *g = *g / (1.0 + (-*g).exp()) * u;
    }
}

/// `x[i] += y[i]`.
pub fn add_inplace(x: &mut [f32], y: &[f32]) {
    assert_eq!(x.len(), y.len());
    for (a, &b) in x.iter_mut().zip(y) {
        *a += b;
    }
}

/// In-place softmax; the sum is taken in index order.
pub fn softmax_inplace(x: &mut [f32]) {
    let max = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut sum = 0f32;
    for v in x.iter_mut() {
        *v = (*v - max).exp();
        sum += *v;
    }
    let inv = 1.0 / sum;
    for v in x.iter_mut() {
        *v *= inv;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        rope_angles(0, 8, 10000.0, &mut cs);
        let orig: Vec<f32> = (0..16).map(|i| i as f32 * 0.1).collect();
        let mut x = orig.clone();
        rope(&mut x, 8, RopeMode::Neox, &cs);
        assert_eq!(x, orig);
        rope_angles(17, 8, 10000.0, &mut cs);
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
