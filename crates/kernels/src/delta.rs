//! One row of Gated DeltaNet's state through one step of the delta rule
//! (`device::Device::delta_net`), in one pass each way over the row: scaled by the decay
//! while its product with the key is summed, then the correction added while its product
//! with the query is summed. Both products sum in [`crate::dot`]'s order; the scalar twin
//! and the AVX2 version give the same bits.

use crate::dot::{fold, Isa, LANES};

/// `row *= decay`, `d = (v - row·k) · beta`, `row[i] = d·k[i] + row[i]` (fused), and
/// gives `row·q`.
pub fn row_step(
    isa: Isa,
    row: &mut [f32],
    k: &[f32],
    q: &[f32],
    decay: f32,
    v: f32,
    beta: f32,
) -> f32 {
    assert!(row.len() == k.len() && row.len() == q.len());
    match isa {
        Isa::Scalar => row_step_scalar(row, k, q, decay, v, beta),
        #[cfg(target_arch = "x86_64")]
        // SAFETY: Avx2Fma is only produced by `detect` on CPUs with AVX2 and FMA.
        Isa::Avx2Fma => unsafe { x86::row_step(row, k, q, decay, v, beta) },
    }
}

/// The scalar twin of [`row_step`].
pub fn row_step_scalar(
    row: &mut [f32],
    k: &[f32],
    q: &[f32],
    decay: f32,
    v: f32,
    beta: f32,
) -> f32 {
    let mut l = [0f32; LANES];
    for (i, (x, &kk)) in row.iter_mut().zip(k).enumerate() {
        *x *= decay;
        l[i % LANES] = x.mul_add(kk, l[i % LANES]);
    }
    let d = (v - fold(l)) * beta;
    let mut l = [0f32; LANES];
    for (i, ((x, &kk), &qq)) in row.iter_mut().zip(k).zip(q).enumerate() {
        *x = d.mul_add(kk, *x);
        l[i % LANES] = x.mul_add(qq, l[i % LANES]);
    }
    fold(l)
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use crate::dot::x86::lanes;
    use crate::dot::{fold, LANES};

    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn row_step(
        row: &mut [f32],
        k: &[f32],
        q: &[f32],
        decay: f32,
        v: f32,
        beta: f32,
    ) -> f32 {
        let len = row.len();
        let n = len / LANES * LANES;
        let (pr, pk, pq) = (row.as_mut_ptr(), k.as_ptr(), q.as_ptr());
        let dv = _mm256_set1_ps(decay);
        let (mut lo, mut hi) = (_mm256_setzero_ps(), _mm256_setzero_ps());
        let mut i = 0;
        while i < n {
            let a = _mm256_mul_ps(_mm256_loadu_ps(pr.add(i)), dv);
            let b = _mm256_mul_ps(_mm256_loadu_ps(pr.add(i + 8)), dv);
            _mm256_storeu_ps(pr.add(i), a);
            _mm256_storeu_ps(pr.add(i + 8), b);
            lo = _mm256_fmadd_ps(a, _mm256_loadu_ps(pk.add(i)), lo);
            hi = _mm256_fmadd_ps(b, _mm256_loadu_ps(pk.add(i + 8)), hi);
            i += LANES;
        }
        let mut l = lanes(lo, hi);
        for j in n..len {
            row[j] *= decay;
            l[j % LANES] = row[j].mul_add(k[j], l[j % LANES]);
        }
        let d = (v - fold(l)) * beta;
        let dd = _mm256_set1_ps(d);
        let (mut lo, mut hi) = (_mm256_setzero_ps(), _mm256_setzero_ps());
        let mut i = 0;
        while i < n {
            let a = _mm256_fmadd_ps(dd, _mm256_loadu_ps(pk.add(i)), _mm256_loadu_ps(pr.add(i)));
            let b = _mm256_fmadd_ps(
                dd,
                _mm256_loadu_ps(pk.add(i + 8)),
                _mm256_loadu_ps(pr.add(i + 8)),
            );
            _mm256_storeu_ps(pr.add(i), a);
            _mm256_storeu_ps(pr.add(i + 8), b);
            lo = _mm256_fmadd_ps(a, _mm256_loadu_ps(pq.add(i)), lo);
            hi = _mm256_fmadd_ps(b, _mm256_loadu_ps(pq.add(i + 8)), hi);
            i += LANES;
        }
        let mut l = lanes(lo, hi);
        for j in n..len {
            row[j] = d.mul_add(k[j], row[j]);
            l[j % LANES] = row[j].mul_add(q[j], l[j % LANES]);
        }
        fold(l)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The SIMD version gives the scalar twin's bits, the tail included (lengths 16k + r).
    #[test]
    fn simd_matches_the_scalar_twin() {
        let isa = Isa::detect();
        for len in [16, 128, 37] {
            let f = |s: usize| -> Vec<f32> {
                (0..len)
                    .map(|i| ((i * 7 + s) % 13) as f32 / 6.5 - 1.0)
                    .collect()
            };
            let (k, q) = (f(1), f(2));
            let (mut a, mut b) = (f(3), f(3));
            let x = row_step(isa, &mut a, &k, &q, 0.9, 0.25, 0.7);
            let y = row_step_scalar(&mut b, &k, &q, 0.9, 0.25, 0.7);
            assert_eq!((x.to_bits(), &a), (y.to_bits(), &b), "length {len}");
        }
    }
}
