//! AVX2 + FMA twins of `scalar.rs`, four weight rows against one activation row at a time
//! (each activation chunk is loaded once for the four). Integer sums come from
//! `maddubs` (u8 × i8 pairs, no saturation for the value ranges of these formats: at most
//! 2 · 128 · 127) and a horizontal-add tree; the float sequence per output is the scalar
//! twin's, one lane per weight row.

use std::arch::x86_64::*;

use super::act::{ActLayout, ActRow};
use super::decode::{DecodedRow, Scheme};

/// The four dot products of `w[r]` with `x`, bit-identical to `scalar::dot` each.
///
/// # Safety
/// The CPU must support AVX2 and FMA.
#[target_feature(enable = "avx2,fma")]
pub unsafe fn dot4(scheme: Scheme, w: [&DecodedRow; 4], x: ActRow) -> [f32; 4] {
    let acc = match scheme.layout {
        ActLayout::B32 => dot4_b32(scheme, w, x),
        ActLayout::B256 => dot4_k(scheme, w, x),
    };
    let mut out = [0f32; 4];
    _mm_storeu_ps(out.as_mut_ptr(), acc);
    out
}

/// `[s(p0), s(p1), s(p2), s(p3)]` where `s` sums the 8 lanes of a vector.
#[target_feature(enable = "avx2")]
unsafe fn hsum4(p: [__m256i; 4]) -> __m128i {
    let h = _mm256_hadd_epi32(_mm256_hadd_epi32(p[0], p[1]), _mm256_hadd_epi32(p[2], p[3]));
    _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256::<1>(h))
}

#[target_feature(enable = "avx2")]
unsafe fn load(p: &[u8]) -> __m256i {
    debug_assert!(p.len() >= 32);
    _mm256_loadu_si256(p.as_ptr() as *const __m256i)
}

/// `[v[0][i], v[1][i], v[2][i], v[3][i]]`.
#[inline(always)]
unsafe fn lanes4(v: [&[f32]; 4], i: usize) -> __m128 {
    _mm_set_ps(v[3][i], v[2][i], v[1][i], v[0][i])
}

#[target_feature(enable = "avx2,fma")]
unsafe fn dot4_b32(scheme: Scheme, w: [&DecodedRow; 4], x: ActRow) -> __m128 {
    let ones = _mm256_set1_epi16(1);
    let d = [&w[0].d[..], &w[1].d[..], &w[2].d[..], &w[3].d[..]];
    let m = [&w[0].m[..], &w[1].m[..], &w[2].m[..], &w[3].m[..]];
    let mut acc = _mm_setzero_ps();
    let xq = std::slice::from_raw_parts(x.q.as_ptr() as *const u8, x.q.len());
    for b in 0..x.d.len() {
        let xv = load(&xq[32 * b..]);
        let mut p = [_mm256_setzero_si256(); 4];
        for r in 0..4 {
            let wv = load(&w[r].q[32 * b..]);
            let pairs = if scheme.signed {
                _mm256_maddubs_epi16(_mm256_sign_epi8(wv, wv), _mm256_sign_epi8(xv, wv))
            } else {
                _mm256_maddubs_epi16(wv, xv)
            };
            p[r] = _mm256_madd_epi16(pairs, ones);
        }
        let isum = _mm_sub_epi32(hsum4(p), _mm_set1_epi32(scheme.offset * x.sums[b] as i32));
        let scale = _mm_mul_ps(lanes4(d, b), _mm_set1_ps(x.d[b]));
        acc = _mm_fmadd_ps(scale, _mm_cvtepi32_ps(isum), acc);
        if scheme.has_min {
            acc = _mm_fmadd_ps(lanes4(m, b), _mm_set1_ps(x.ds[b]), acc);
        }
    }
    acc
}

#[target_feature(enable = "avx2,fma")]
unsafe fn dot4_k(scheme: Scheme, w: [&DecodedRow; 4], x: ActRow) -> __m128 {
    let d = [&w[0].d[..], &w[1].d[..], &w[2].d[..], &w[3].d[..]];
    let m = [&w[0].m[..], &w[1].m[..], &w[2].m[..], &w[3].m[..]];
    let mut acc = _mm_setzero_ps();
    let xq = std::slice::from_raw_parts(x.q.as_ptr() as *const u8, x.q.len());
    let sign = _mm_set1_ps(-0.0);
    for s in 0..x.d.len() {
        let mut p = [_mm256_setzero_si256(); 4];
        for t in 0..8 {
            let c = 8 * s + t;
            let xv = load(&xq[32 * c..]);
            for r in 0..4 {
                let pairs = _mm256_maddubs_epi16(load(&w[r].q[32 * c..]), xv);
                let sc = _mm256_loadu_si256(w[r].sc[16 * c..].as_ptr() as *const __m256i);
                p[r] = _mm256_add_epi32(p[r], _mm256_madd_epi16(pairs, sc));
            }
        }
        // Σ_j sc_j · xs_j (times the offset) and Σ_j mn_j · xs_j, folded into the exact
        // integer sums: lanes differ from the scalar twin's order, the totals do not.
        let xs = _mm256_loadu_si256(x.sums.as_ptr().add(16 * s) as *const __m256i);
        let mut mins = [_mm256_setzero_si256(); 4];
        for r in 0..4 {
            let sc = _mm256_loadu_si256(w[r].sc16.as_ptr().add(16 * s) as *const __m256i);
            let corr =
                _mm256_mullo_epi32(_mm256_madd_epi16(sc, xs), _mm256_set1_epi32(scheme.offset));
            p[r] = _mm256_sub_epi32(p[r], corr);
            if scheme.has_min {
                let mn = _mm256_loadu_si256(w[r].mn.as_ptr().add(16 * s) as *const __m256i);
                mins[r] = _mm256_madd_epi16(mn, xs);
            }
        }
        let total = hsum4(p);
        let dx = _mm_set1_ps(x.d[s]);
        acc = _mm_fmadd_ps(_mm_mul_ps(lanes4(d, s), dx), _mm_cvtepi32_ps(total), acc);
        if scheme.has_min {
            let scale = _mm_xor_ps(_mm_mul_ps(lanes4(m, s), dx), sign);
            acc = _mm_fmadd_ps(scale, _mm_cvtepi32_ps(hsum4(mins)), acc);
        }
    }
    acc
}
