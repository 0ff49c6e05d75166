//! f32 dot products with one fixed reduction order, identical in bits across the scalar
//! twin and the SIMD versions.
//!
//! Order: element `i` is fused-multiply-added into lane `i % 16` (lanes start at 0.0),
//! then the 16 lanes are folded pairwise: `l[j] + l[j+8]`, then `+4`, `+2`, `+1`.
//! Example for 16 lanes `a..p`: `((a+i)+(e+m)) + ((c+k)+(g+o))` and so on down to one.

pub(crate) const LANES: usize = 16;

pub use crate::features::Isa;

/// The lanes folded in the order of the module doc.
pub(crate) fn fold(mut l: [f32; LANES]) -> f32 {
    let mut width = LANES / 2;
    while width > 0 {
        for j in 0..width {
            l[j] += l[j + width];
        }
        width /= 2;
    }
    l[0]
}

/// Scalar twin: `sum_i a[i] * b[i]` in the order of the module doc.
pub fn dot_scalar(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    let mut l = [0f32; LANES];
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        l[i % LANES] = x.mul_add(*y, l[i % LANES]);
    }
    fold(l)
}

/// `sum_i a[i] * b[i]` in the order of the module doc.
#[inline]
pub fn dot(isa: Isa, a: &[f32], b: &[f32]) -> f32 {
    match isa {
        Isa::Scalar => dot_scalar(a, b),
        #[cfg(target_arch = "x86_64")]
        // SAFETY: Avx2Fma is only produced by `detect` on CPUs with AVX2 and FMA.
        Isa::Avx2Fma => unsafe { x86::dot(a, b) },
    }
}

/// Four dot products of `x` with the rows `w[0..4]`, each bit-identical to `dot(x, w[r])`.
#[inline]
pub fn dot4(isa: Isa, x: &[f32], w: [&[f32]; 4]) -> [f32; 4] {
    match isa {
        Isa::Scalar => w.map(|r| dot_scalar(x, r)),
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as in `dot`.
        Isa::Avx2Fma => unsafe { x86::dot4(x, w) },
    }
}

#[cfg(target_arch = "x86_64")]
pub(crate) mod x86 {
    use super::{fold, LANES};
    use std::arch::x86_64::*;

    /// Two registers of eight lanes as the sixteen lanes of the module doc.
    #[target_feature(enable = "avx2,fma")]
    pub(crate) unsafe fn lanes(lo: __m256, hi: __m256) -> [f32; LANES] {
        let mut l = [0f32; LANES];
        _mm256_storeu_ps(l.as_mut_ptr(), lo);
        _mm256_storeu_ps(l.as_mut_ptr().add(8), hi);
        l
    }

    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn dot(a: &[f32], b: &[f32]) -> f32 {
        assert_eq!(a.len(), b.len());
        let n = a.len() / LANES * LANES;
        let (mut lo, mut hi) = (_mm256_setzero_ps(), _mm256_setzero_ps());
        let (pa, pb) = (a.as_ptr(), b.as_ptr());
        let mut i = 0;
        while i < n {
            lo = _mm256_fmadd_ps(_mm256_loadu_ps(pa.add(i)), _mm256_loadu_ps(pb.add(i)), lo);
            hi = _mm256_fmadd_ps(
                _mm256_loadu_ps(pa.add(i + 8)),
                _mm256_loadu_ps(pb.add(i + 8)),
                hi,
            );
            i += LANES;
        }
        let mut l = lanes(lo, hi);
        for k in n..a.len() {
            l[k % LANES] = a[k].mul_add(b[k], l[k % LANES]);
        }
        fold(l)
    }

    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn dot4(x: &[f32], w: [&[f32]; 4]) -> [f32; 4] {
        let len = x.len();
        for r in &w {
            assert_eq!(r.len(), len);
        }
        let n = len / LANES * LANES;
        let px = x.as_ptr();
        let pw = w.map(|r| r.as_ptr());
        let mut acc = [_mm256_setzero_ps(); 8];
        let mut i = 0;
        while i < n {
            let x0 = _mm256_loadu_ps(px.add(i));
            let x1 = _mm256_loadu_ps(px.add(i + 8));
            for r in 0..4 {
                acc[2 * r] = _mm256_fmadd_ps(x0, _mm256_loadu_ps(pw[r].add(i)), acc[2 * r]);
                acc[2 * r + 1] =
                    _mm256_fmadd_ps(x1, _mm256_loadu_ps(pw[r].add(i + 8)), acc[2 * r + 1]);
            }
            i += LANES;
        }
        let mut out = [0f32; 4];
        for r in 0..4 {
            let mut l = lanes(acc[2 * r], acc[2 * r + 1]);
            for k in n..len {
                l[k % LANES] = x[k].mul_add(w[r][k], l[k % LANES]);
            }
            out[r] = fold(l);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(n: usize, seed: u32) -> Vec<f32> {
        let mut s = seed.wrapping_mul(2654435761).max(1);
        (0..n)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 17;
                s ^= s << 5;
                (s as f32 / u32::MAX as f32) * 2.0 - 1.0
            })
            .collect()
    }

    #[test]
    fn simd_matches_scalar_bit_for_bit() {
        let isa = Isa::detect();
        for n in [0, 1, 7, 16, 17, 31, 64, 100, 576, 1000] {
            let a = data(n, 1 + n as u32);
            let rows: Vec<Vec<f32>> = (0..4).map(|r| data(n, 100 + r)).collect();
            let s = dot_scalar(&a, &rows[0]);
            assert_eq!(dot(isa, &a, &rows[0]).to_bits(), s.to_bits(), "n={n}");
            let four = dot4(isa, &a, [&rows[0], &rows[1], &rows[2], &rows[3]]);
            for r in 0..4 {
                assert_eq!(
                    four[r].to_bits(),
                    dot_scalar(&a, &rows[r]).to_bits(),
                    "n={n} r={r}"
                );
            }
        }
    }

    #[test]
    fn dot_is_accurate() {
        let a = data(1000, 3);
        let b = data(1000, 4);
        let exact: f64 = a.iter().zip(&b).map(|(x, y)| *x as f64 * *y as f64).sum();
        assert!((dot_scalar(&a, &b) as f64 - exact).abs() < 1e-4);
    }
}
