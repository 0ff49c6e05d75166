//! Activation rows quantized to 8 bits for integer dot products.
//!
//! Each block of `B` values (32 for the 32-element weight formats, 256 for the K-quants)
//! gets a scale `d = amax / 127` (f32) and values `q = round(x · (1/d))`, halves away from
//! zero, in -127..=127. Sums of `q` are kept per 32 values (32-element formats) or per 16
//! (K-quants) for the weight formats' offsets and mins.

use crate::formats::q8_0::round_away;

/// How activations are blocked for a weight format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ActLayout {
    /// Blocks of 32; sums per 32.
    B32,
    /// Blocks of 256; sums per 16.
    B256,
}

impl ActLayout {
    pub fn block(self) -> usize {
        match self {
            ActLayout::B32 => 32,
            ActLayout::B256 => 256,
        }
    }

    /// Values per stored sum.
    pub fn sum_group(self) -> usize {
        match self {
            ActLayout::B32 => 32,
            ActLayout::B256 => 16,
        }
    }
}

/// `m` rows of `k` quantized activations.
#[derive(Debug, Default)]
pub struct QActs {
    pub k: usize,
    pub m: usize,
    pub layout: Option<ActLayout>,
    /// `[m, k]`.
    pub q: Vec<i8>,
    /// `[m, k / block]` scales.
    pub d: Vec<f32>,
    /// `[m, k / sum_group]` sums of `q` (at most 32 · 127 in size, so i16).
    pub sums: Vec<i16>,
    /// `[m, k / 32]`, B32 only: `d · sum` as f32 (the min term of Q4_1 and Q5_1).
    pub ds: Vec<f32>,
    /// `[m, k / 32]`, B256 only: sums per 32 (pairs of `sums`).
    pub sums32: Vec<i16>,
}

impl QActs {
    /// Quantizes `x` (`[m, k]`, `k` a multiple of the layout's block) into `self`,
    /// reusing its buffers.
    pub fn quantize(&mut self, x: &[f32], k: usize, layout: ActLayout) {
        assert_eq!(
            k % layout.block(),
            0,
            "row length {k} is not a multiple of {}",
            layout.block()
        );
        let m = x.len() / k;
        let (nb, ns) = (k / layout.block(), k / layout.sum_group());
        self.k = k;
        self.m = m;
        self.layout = Some(layout);
        self.q.resize(m * k, 0);
        self.d.resize(m * nb, 0.0);
        self.sums.resize(m * ns, 0);
        self.ds
            .resize(if layout == ActLayout::B32 { m * nb } else { 0 }, 0.0);
        self.sums32.resize(
            if layout == ActLayout::B256 {
                m * k / 32
            } else {
                0
            },
            0,
        );
        for (bi, (xb, qb)) in x
            .chunks_exact(layout.block())
            .zip(self.q.chunks_exact_mut(layout.block()))
            .enumerate()
        {
            let d = quantize_block(xb, qb);
            self.d[bi] = d;
            let g = layout.sum_group();
            let per_block = layout.block() / g;
            for (j, qg) in qb.chunks_exact(g).enumerate() {
                self.sums[bi * per_block + j] = qg.iter().map(|&q| q as i16).sum();
            }
            if layout == ActLayout::B32 {
                self.ds[bi] = d * self.sums[bi] as f32;
            } else {
                for j in 0..8 {
                    let s = &self.sums[16 * bi + 2 * j..];
                    self.sums32[8 * bi + j] = s[0] + s[1];
                }
            }
        }
    }

    pub fn row(&self, i: usize) -> ActRow<'_> {
        let layout = self.layout.expect("quantized");
        let (nb, ns) = (self.k / layout.block(), self.k / layout.sum_group());
        ActRow {
            q: &self.q[i * self.k..(i + 1) * self.k],
            d: &self.d[i * nb..(i + 1) * nb],
            sums: &self.sums[i * ns..(i + 1) * ns],
            ds: if self.ds.is_empty() {
                &[]
            } else {
                &self.ds[i * nb..(i + 1) * nb]
            },
            sums32: if self.sums32.is_empty() {
                &[]
            } else {
                &self.sums32[i * self.k / 32..(i + 1) * self.k / 32]
            },
        }
    }
}

/// Quantizes one block: returns `d = amax / 127` and sets `q = round_away(x · (1/d))`
/// clamped to ±127 (the SIMD version gives the same bytes).
fn quantize_block(x: &[f32], q: &mut [i8]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if x.len().is_multiple_of(16) && crate::features::CpuFeatures::get().avx512f {
        // SAFETY: AVX-512 F was detected; lengths are equal multiples of 16.
        return unsafe { quantize_block_avx512(x, q) };
    }
    quantize_block_scalar(x, q)
}

fn quantize_block_scalar(x: &[f32], q: &mut [i8]) -> f32 {
    let amax = x.iter().fold(0f32, |a, v| a.max(v.abs()));
    let d = amax / 127.0;
    let id = if d > 0.0 { 1.0 / d } else { 0.0 };
    for (q, &v) in q.iter_mut().zip(x) {
        *q = round_away(v * id).clamp(-127, 127) as i8;
    }
    d
}

/// [`quantize_block_scalar`] 16 values at a time. Rounding half away from zero is
/// `t + sign(y)` where `|y - t| ≥ 0.5` for `t = trunc(y)` (the difference is exact).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn quantize_block_avx512(x: &[f32], q: &mut [i8]) -> f32 {
    use std::arch::x86_64::*;
    assert_eq!(x.len(), q.len());
    let abs = |v: __m512| _mm512_abs_ps(v);
    let mut m = _mm512_setzero_ps();
    for c in x.chunks_exact(16) {
        m = _mm512_max_ps(m, abs(_mm512_loadu_ps(c.as_ptr())));
    }
    let amax = _mm512_reduce_max_ps(m);
    let d = amax / 127.0;
    let id = _mm512_set1_ps(if d > 0.0 { 1.0 / d } else { 0.0 });
    let (half, one) = (_mm512_set1_ps(0.5), _mm512_set1_ps(1.0));
    let sign = _mm512_set1_ps(-0.0);
    let (lo, hi) = (_mm512_set1_epi32(-127), _mm512_set1_epi32(127));
    for (c, out) in x.chunks_exact(16).zip(q.chunks_exact_mut(16)) {
        let y = _mm512_mul_ps(_mm512_loadu_ps(c.as_ptr()), id);
        let t = _mm512_roundscale_ps::<{ _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC }>(y);
        let away = _mm512_cmp_ps_mask::<_CMP_GE_OQ>(abs(_mm512_sub_ps(y, t)), half);
        let step = _mm512_or_ps(one, _mm512_and_ps(y, sign));
        let r = _mm512_mask_add_ps(t, away, t, step);
        let i = _mm512_min_epi32(_mm512_max_epi32(_mm512_cvttps_epi32(r), lo), hi);
        _mm_storeu_si128(out.as_mut_ptr() as *mut __m128i, _mm512_cvtepi32_epi8(i));
    }
    d
}

/// One quantized activation row.
#[derive(Clone, Copy)]
pub struct ActRow<'a> {
    pub q: &'a [i8],
    pub d: &'a [f32],
    pub sums: &'a [i16],
    pub ds: &'a [f32],
    pub sums32: &'a [i16],
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn simd_quantization_gives_the_scalar_bytes() {
        let mut x = device::testing::data(4096, 5);
        for (i, v) in x.iter_mut().enumerate() {
            *v *= [1.0, 1e-3, 100.0, 0.0][i / 1024];
        }
        // Exact halves after scaling: amax 127 makes d = 1.
        x[..32].copy_from_slice(&std::array::from_fn::<f32, 32, _>(|i| i as f32 * 0.5 - 8.0));
        x[31] = 127.0;
        for block in [32, 256] {
            for (xb, n) in x.chunks_exact(block).zip(0..) {
                let (mut a, mut b) = (vec![0i8; block], vec![0i8; block]);
                let da = quantize_block_scalar(xb, &mut a);
                let db = quantize_block(xb, &mut b);
                assert_eq!(
                    (da.to_bits(), &a),
                    (db.to_bits(), &b),
                    "block {n} of {block}"
                );
            }
        }
    }

    #[test]
    fn quantization_is_close_and_sums_are_exact() {
        let x: Vec<f32> = (0..512)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) / 7.0)
            .collect();
        for layout in [ActLayout::B32, ActLayout::B256] {
            let mut a = QActs::default();
            a.quantize(&x, 256, layout);
            assert_eq!(a.m, 2);
            for r in 0..2 {
                let row = a.row(r);
                for (i, &q) in row.q.iter().enumerate() {
                    let d = row.d[i / layout.block()];
                    assert!((q as f32 * d - x[r * 256 + i]).abs() <= d * 0.5 + 1e-6);
                }
                for (j, &s) in row.sums.iter().enumerate() {
                    let g = layout.sum_group();
                    assert_eq!(
                        s as i32,
                        row.q[j * g..(j + 1) * g]
                            .iter()
                            .map(|&q| q as i32)
                            .sum::<i32>()
                    );
                }
            }
        }
    }
}
