//! Host arithmetic the backends and the engine share, where they must agree to the bit or
//! where a row of a vocabulary's size makes speed matter: `e^x` of one fixed sequence of
//! IEEE operations (scalar, AVX2 and AVX-512 lanes give the same bits), and a finite check.

/// `e^x` within 2 ulp for `x` in [-87.3, 88.3], 0 below and infinity above: `2^n · p(r)`
/// with `n = round(x · log2 e)`, `r = x - n · ln 2` in two parts, `p` Cephes' polynomial.
/// Every step is one IEEE operation, so [`exp_avx512`] and [`exp_avx2`] compute the same
/// bits.
pub fn exp(x: f32) -> f32 {
    if x < EXP_LO {
        return 0.0;
    }
    if x > EXP_HI {
        return f32::INFINITY;
    }
    let n = (x * LOG2E).round_ties_even();
    let r = n.mul_add(-LN2_HI, x);
    let r = n.mul_add(-LN2_LO, r);
    let mut p = EXP_POLY[0];
    for c in &EXP_POLY[1..] {
        p = p.mul_add(r, *c);
    }
    let y = p.mul_add(r * r, r) + 1.0;
    y * f32::from_bits(((n as i32 + 127) as u32) << 23)
}

/// `x[i] = exp(x[i] - shift)` for every `i` (16 lanes at a time where AVX-512 runs, 8
/// where AVX2 does; the same bits either way).
pub fn exp_shifted(x: &mut [f32], shift: f32) {
    let mut done = 0;
    #[cfg(target_arch = "x86_64")]
    {
        if is_x86_feature_detected!("avx512f") {
            // SAFETY: AVX-512 F was detected.
            done = unsafe { exp_shifted_avx512(x, shift) };
        } else if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
            // SAFETY: AVX2 and FMA were detected.
            done = unsafe { exp_shifted_avx2(x, shift) };
        }
    }
    for v in &mut x[done..] {
        *v = exp(*v - shift);
    }
}

/// [`exp_shifted`] over the whole 16-value chunks of `x`; returns how many values it did.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn exp_shifted_avx512(x: &mut [f32], shift: f32) -> usize {
    use std::arch::x86_64::*;
    let s = _mm512_set1_ps(shift);
    let n16 = x.len() / 16 * 16;
    for c in x[..n16].chunks_exact_mut(16) {
        let v = _mm512_sub_ps(_mm512_loadu_ps(c.as_ptr()), s);
        _mm512_storeu_ps(c.as_mut_ptr(), exp_avx512(v));
    }
    n16
}

const EXP_LO: f32 = -87.3;
const EXP_HI: f32 = 88.3;
const LOG2E: f32 = std::f32::consts::LOG2_E;
const LN2_HI: f32 = 0.693_359_4;
const LN2_LO: f32 = -2.121_944_4e-4;
const EXP_POLY: [f32; 6] = [
    1.987_569_1e-4,
    1.398_2e-3,
    8.333_452e-3,
    4.166_579_6e-2,
    1.666_666_5e-1,
    0.5,
];

/// [`exp`] on 16 lanes (for the backends' own vector loops).
///
/// # Safety
/// The CPU must have AVX-512 F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[inline]
pub unsafe fn exp_avx512(x: std::arch::x86_64::__m512) -> std::arch::x86_64::__m512 {
    use std::arch::x86_64::*;
    let (lo, hi) = (_mm512_set1_ps(EXP_LO), _mm512_set1_ps(EXP_HI));
    let under = _mm512_cmp_ps_mask::<_CMP_LT_OQ>(x, lo);
    let over = _mm512_cmp_ps_mask::<_CMP_GT_OQ>(x, hi);
    let x = _mm512_min_ps(_mm512_max_ps(x, lo), hi);
    let n = _mm512_roundscale_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(
        _mm512_mul_ps(x, _mm512_set1_ps(LOG2E)),
    );
    let r = _mm512_fmadd_ps(n, _mm512_set1_ps(-LN2_HI), x);
    let r = _mm512_fmadd_ps(n, _mm512_set1_ps(-LN2_LO), r);
    let mut p = _mm512_set1_ps(EXP_POLY[0]);
    for c in &EXP_POLY[1..] {
        p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(*c));
    }
    let y = _mm512_add_ps(
        _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r),
        _mm512_set1_ps(1.0),
    );
    let bits = _mm512_slli_epi32::<23>(_mm512_add_epi32(
        _mm512_cvtps_epi32(n),
        _mm512_set1_epi32(127),
    ));
    let e = _mm512_mul_ps(y, _mm512_castsi512_ps(bits));
    let e = _mm512_mask_mov_ps(e, under, _mm512_setzero_ps());
    _mm512_mask_mov_ps(e, over, _mm512_set1_ps(f32::INFINITY))
}

/// [`exp_shifted`] over the whole 8-value chunks of `x`; returns how many values it did.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn exp_shifted_avx2(x: &mut [f32], shift: f32) -> usize {
    use std::arch::x86_64::*;
    let s = _mm256_set1_ps(shift);
    let n8 = x.len() / 8 * 8;
    for c in x[..n8].chunks_exact_mut(8) {
        let v = _mm256_sub_ps(_mm256_loadu_ps(c.as_ptr()), s);
        _mm256_storeu_ps(c.as_mut_ptr(), exp_avx2(v));
    }
    n8
}

/// [`exp`] on 8 lanes, step for step as [`exp_avx512`].
///
/// # Safety
/// The CPU must have AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[inline]
pub unsafe fn exp_avx2(x: std::arch::x86_64::__m256) -> std::arch::x86_64::__m256 {
    use std::arch::x86_64::*;
    let (lo, hi) = (_mm256_set1_ps(EXP_LO), _mm256_set1_ps(EXP_HI));
    let under = _mm256_cmp_ps::<_CMP_LT_OQ>(x, lo);
    let over = _mm256_cmp_ps::<_CMP_GT_OQ>(x, hi);
    let x = _mm256_min_ps(_mm256_max_ps(x, lo), hi);
    let n = _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(_mm256_mul_ps(
        x,
        _mm256_set1_ps(LOG2E),
    ));
    let r = _mm256_fmadd_ps(n, _mm256_set1_ps(-LN2_HI), x);
    let r = _mm256_fmadd_ps(n, _mm256_set1_ps(-LN2_LO), r);
    let mut p = _mm256_set1_ps(EXP_POLY[0]);
    for c in &EXP_POLY[1..] {
        p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(*c));
    }
    let y = _mm256_add_ps(
        _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), r),
        _mm256_set1_ps(1.0),
    );
    let bits = _mm256_slli_epi32::<23>(_mm256_add_epi32(
        _mm256_cvtps_epi32(n),
        _mm256_set1_epi32(127),
    ));
    let e = _mm256_mul_ps(y, _mm256_castsi256_ps(bits));
    let e = _mm256_blendv_ps(e, _mm256_setzero_ps(), under);
    _mm256_blendv_ps(e, _mm256_set1_ps(f32::INFINITY), over)
}

/// Whether every value is finite (no NaN, no ±∞): `x · 0` is ±0 for finite `x` and NaN
/// otherwise, summed in 16 lanes so that it vectorizes.
pub fn all_finite(x: &[f32]) -> bool {
    let mut lanes = [0f32; 16];
    let chunks = x.chunks_exact(16);
    let rest = chunks.remainder();
    for c in chunks {
        for (l, &v) in lanes.iter_mut().zip(c) {
            *l += v * 0.0;
        }
    }
    lanes.iter().chain(rest).all(|v| (v * 0.0) == 0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_finite_finds_nan_and_infinity_anywhere() {
        let mut v = vec![1.5f32; 37];
        assert!(all_finite(&v) && all_finite(&[]));
        for at in [0, 15, 16, 36] {
            for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
                let keep = v[at];
                v[at] = bad;
                assert!(!all_finite(&v), "{bad} at {at}");
                v[at] = keep;
            }
        }
        assert!(all_finite(&[f32::MAX, -f32::MAX, 0.0, -0.0]));
    }

    #[test]
    fn exp_is_close_to_libm() {
        for i in 0..4000 {
            let v = (i as f32 - 2000.0) * 0.043;
            let (got, want) = (exp(v), (v as f64).exp());
            assert!(
                ((got as f64 - want) / want).abs() < 3e-7,
                "exp({v}) = {got}, not {want}"
            );
        }
    }

    #[test]
    fn simd_exp_gives_the_scalar_bits() {
        let mut x: Vec<f32> = (0..1000).map(|i| (i as f32 - 600.0) * 0.21).collect();
        let want: Vec<f32> = x.iter().map(|v| exp(*v - 1.5)).collect();
        exp_shifted(&mut x, 1.5);
        assert!(x.iter().zip(&want).all(|(a, b)| a.to_bits() == b.to_bits()));
    }
}
