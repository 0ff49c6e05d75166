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
            let amax = xb.iter().fold(0f32, |a, v| a.max(v.abs()));
            let d = amax / 127.0;
            let id = if d > 0.0 { 1.0 / d } else { 0.0 };
            for (q, &v) in qb.iter_mut().zip(xb) {
                *q = round_away(v * id).clamp(-127, 127) as i8;
            }
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
