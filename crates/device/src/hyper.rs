//! Hyper-connections (DeepSeek-V4's): the hidden state of a row is `streams` residual
//! streams of `width` each (`[streams · width]`, stream `h` at `h · width`). Before a block
//! they are mixed into its input, after it the block's output and the old streams into the
//! new ones, by weights each row computes from `mix` (its `fn · rms(x)`, computed by the
//! caller):
//!
//! ```text
//! pre[h]       = σ(mix[h] · scale[0] + base[h]) + eps                     h < n
//! post[h]      = 2 σ(mix[n + h] · scale[1] + base[n + h])
//! L[dst, src]  = mix[2n + dst + n·src] · scale[2] + base[2n + dst + n·src]
//! M            = Sinkhorn(L): softmax over dst, + eps, then normalize over src; then
//!                (iters - 1) times over dst, then over src (each sum + eps)
//! input        = Σ_h pre[h] · x_h
//! x'_dst       = post[dst] · y + Σ_src M[dst, src] · x_src
//! ```
//!
//! A merge (before the output head) has only `pre` (`mix` is `[n]`, `scale[0]` its scale).

use crate::host::HostBufs;
use crate::Buf;

/// One hyper-connection's shape and constants.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HyperSpec {
    pub streams: usize,
    pub width: usize,
    pub sinkhorn_iters: usize,
    pub eps: f32,
    pub scale: [f32; 3],
    /// Only `pre`: the merge before the output head.
    pub merge: bool,
}

impl HyperSpec {
    /// Floats of one row's `mix`: `(2 + n) · n`, or `n` for a merge.
    pub fn mix_width(&self) -> usize {
        let n = self.streams;
        if self.merge {
            n
        } else {
            (2 + n) * n
        }
    }
}

fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

/// Turns one row's `mix` into its weights in place (`pre`, then `post` and `M` as
/// `[dst + n·src]` unless a merge), given `base` (`[mix_width]`).
pub fn weights(mix: &mut [f32], base: &[f32], s: &HyperSpec) {
    let n = s.streams;
    for (h, m) in mix[..n].iter_mut().enumerate() {
        *m = sigmoid(*m * s.scale[0] + base[h]) + s.eps;
    }
    if s.merge {
        return;
    }
    for (h, m) in mix[n..2 * n].iter_mut().enumerate() {
        *m = 2.0 * sigmoid(*m * s.scale[1] + base[n + h]);
    }
    let m = &mut mix[2 * n..];
    for (i, v) in m.iter_mut().enumerate() {
        *v = *v * s.scale[2] + base[2 * n + i];
    }
    for col in m.chunks_exact_mut(n) {
        let max = col.iter().fold(f32::NEG_INFINITY, |a, &v| a.max(v));
        col.iter_mut().for_each(|v| *v = (*v - max).exp());
        let sum: f32 = col.iter().sum();
        col.iter_mut().for_each(|v| *v = *v / sum + s.eps);
    }
    let over_src = |m: &mut [f32]| {
        for dst in 0..n {
            let sum = (0..n).map(|src| m[dst + n * src]).sum::<f32>() + s.eps;
            (0..n).for_each(|src| m[dst + n * src] /= sum);
        }
    };
    let over_dst = |m: &mut [f32]| {
        for col in m.chunks_exact_mut(n) {
            let sum = col.iter().sum::<f32>() + s.eps;
            col.iter_mut().for_each(|v| *v /= sum);
        }
    };
    over_src(m);
    for _ in 1..s.sinkhorn_iters {
        over_dst(m);
        over_src(m);
    }
}

/// [`crate::Device::hyper_pre`] over `rows` rows of host buffers.
pub fn pre_rows(b: &mut HostBufs, [x, mix, base, out]: [Buf; 4], rows: usize, s: &HyperSpec) {
    let (m, d) = (s.mix_width(), s.width);
    let (xs, mut w, mut o) = (b.take(x), b.take(mix), b.take(out));
    for r in 0..rows {
        let w = &mut w[r * m..(r + 1) * m];
        weights(w, &b[base], s);
        pre(
            &xs[r * s.streams * d..][..s.streams * d],
            w,
            &mut o[r * d..][..d],
            s,
        );
    }
    b.put(x, xs);
    b.put(mix, w);
    b.put(out, o);
}

/// [`crate::Device::hyper_post`] over `rows` rows of host buffers.
pub fn post_rows(b: &mut HostBufs, [y, x, mix]: [Buf; 3], rows: usize, s: &HyperSpec) {
    let (m, d, n) = (s.mix_width(), s.width, s.streams);
    let mut xs = b.take(x);
    for r in 0..rows {
        let w = &b[mix][r * m..(r + 1) * m];
        post(
            &b[y][r * d..(r + 1) * d],
            &mut xs[r * n * d..][..n * d],
            w,
            s,
        );
    }
    b.put(x, xs);
}

/// One row's block input: `out = Σ_h pre[h] · x_h`.
pub fn pre(x: &[f32], w: &[f32], out: &mut [f32], s: &HyperSpec) {
    let d = s.width;
    out.copy_from_slice(&x[..d]);
    out.iter_mut().for_each(|v| *v *= w[0]);
    for h in 1..s.streams {
        let xh = &x[h * d..(h + 1) * d];
        out.iter_mut().zip(xh).for_each(|(o, &v)| *o += v * w[h]);
    }
}

/// One row's new streams, in place: `x_dst = post[dst] · y + Σ_src M[dst, src] · x_src`.
pub fn post(y: &[f32], x: &mut [f32], w: &[f32], s: &HyperSpec) {
    let (n, d) = (s.streams, s.width);
    let old = x.to_vec();
    let m = &w[2 * n..];
    for dst in 0..n {
        let o = &mut x[dst * d..(dst + 1) * d];
        o.iter_mut().zip(y).for_each(|(o, &v)| *o = v * w[n + dst]);
        for src in 0..n {
            let c = m[dst + n * src];
            let xs = &old[src * d..(src + 1) * d];
            o.iter_mut().zip(xs).for_each(|(o, &v)| *o += v * c);
        }
    }
}
