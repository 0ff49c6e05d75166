//! The ops an encoder needs besides a decoder's: a vision tower (SigLIP, CLIP) runs over
//! all of an image's patches at once, with no cache, every patch seeing every other.
//!
//! A backend that can run a tower implements [`EncoderDevice`] (the CPU, the reference and
//! the GPU do); one that does not cannot be handed one, which the type system says rather
//! than a refusal at run time. The host-memory backends share [`layer_norm_rows`] and
//! [`avg_pool_2d_rows`]; the attention each writes its own (the CPU's with SIMD dots on its
//! threads, the reference's in f64, the GPU's an online softmax a workgroup per row and
//! head).

use crate::{Buf, Device};

/// The buffers of [`EncoderDevice::dense_attention`]: `q`, `k`, `v` and `out`, each
/// `[rows, heads · head_dim]`.
#[derive(Debug, Clone, Copy)]
pub struct DenseIo {
    pub q: Buf,
    pub k: Buf,
    pub v: Buf,
    pub out: Buf,
}

/// The shape of [`EncoderDevice::dense_attention`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DenseSpec {
    pub rows: usize,
    pub heads: usize,
    pub head_dim: usize,
    /// The scores' factor (`1 / √head_dim` for a ViT).
    pub scale: f32,
}

/// An activation applied alone, not gating another row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Act {
    /// GELU's tanh approximation, as [`Device::gelu`] computes it.
    Gelu,
    /// CLIP's `x · sigmoid(1.702 · x)`.
    GeluQuick,
}

/// A square grid of `side × side` rows of `width`, pooled by `kernel × kernel` windows
/// (`kernel` divides `side`): [`EncoderDevice::avg_pool_2d`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolSpec {
    pub side: usize,
    pub kernel: usize,
    pub width: usize,
}

impl PoolSpec {
    /// Rows out: `(side / kernel)²`.
    pub fn rows_out(&self) -> usize {
        (self.side / self.kernel).pow(2)
    }
}

/// A device that runs encoders. Batch invariance holds per image: a row's result depends
/// on its image's rows alone, reduced in one fixed order.
pub trait EncoderDevice: Device {
    /// Per row of `width`: `out = (x - mean) / sqrt(var + eps) · w + b`, mean and variance
    /// over the row (PyTorch's `LayerNorm`). `out` may be `x`.
    #[allow(clippy::too_many_arguments)]
    fn layer_norm(&mut self, x: Buf, w: Buf, b: Buf, rows: usize, width: usize, eps: f32, out: Buf);
    /// `x = act(x)` over `len` floats.
    fn activate(&mut self, x: Buf, len: usize, act: Act);
    /// Per head `h`: `out_h = softmax(scale · q_h k_hᵀ) v_h` over all `rows`, no mask.
    /// Each output row's scores and sums run over the key rows in order.
    fn dense_attention(&mut self, io: &DenseIo, spec: &DenseSpec);
    /// `out[oy · o + ox] = mean of x[(oy·k + ky) · side + ox·k + kx]` over `ky`, then `kx`
    /// in `0..k` (`o = side / k`): rows of `x` are the grid's cells row by row.
    fn avg_pool_2d(&mut self, x: Buf, out: Buf, spec: &PoolSpec);
}

/// [`EncoderDevice::layer_norm`] on host rows, the sums in f64.
pub fn layer_norm_rows(x: &[f32], w: &[f32], b: &[f32], eps: f32, out: &mut [f32]) {
    let width = w.len();
    for (xr, or) in x.chunks_exact(width).zip(out.chunks_exact_mut(width)) {
        let mean = xr.iter().map(|&v| v as f64).sum::<f64>() / width as f64;
        let var = xr.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / width as f64;
        let inv = 1.0 / (var + eps as f64).sqrt();
        for (i, o) in or.iter_mut().enumerate() {
            *o = ((xr[i] as f64 - mean) * inv) as f32 * w[i] + b[i];
        }
    }
}

/// [`EncoderDevice::avg_pool_2d`] on host rows.
pub fn avg_pool_2d_rows(x: &[f32], spec: &PoolSpec, out: &mut [f32]) {
    let PoolSpec {
        side,
        kernel,
        width,
    } = *spec;
    let o = side / kernel;
    let n = (kernel * kernel) as f32;
    for oy in 0..o {
        for ox in 0..o {
            let dst = &mut out[(oy * o + ox) * width..][..width];
            dst.fill(0.0);
            for ky in 0..kernel {
                for kx in 0..kernel {
                    let src = &x[((oy * kernel + ky) * side + ox * kernel + kx) * width..][..width];
                    dst.iter_mut().zip(src).for_each(|(d, &s)| *d += s);
                }
            }
            dst.iter_mut().for_each(|d| *d /= n);
        }
    }
}
