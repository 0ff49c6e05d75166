//! AVX2 kernels that read stored weight blocks directly (no decode pass), four weight
//! rows against one activation row, for the formats the real models use: Q4_0, Q4_1,
//! Q5_0, Q8_0, Q4_K, Q6_K. They compute the same exact integer sums and the same float
//! sequence as `scalar::dot` on the decoded rows, so they give the same bits; they pay
//! off when few activation rows share a weight row (decode, verification).

use std::arch::x86_64::*;

use gguf::GgmlType;

use super::act::ActRow;

/// Whether `dot4` has a kernel for `ty`.
pub fn supports(ty: GgmlType) -> bool {
    matches!(
        ty,
        GgmlType::Q4_0
            | GgmlType::Q4_1
            | GgmlType::Q5_0
            | GgmlType::Q8_0
            | GgmlType::Q4_K
            | GgmlType::Q6_K
    )
}

/// Four dot products of stored rows `w[r]` (whole rows of `ty`) with `x`.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C; `ty` must satisfy [`supports`].
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dot4(ty: GgmlType, w: [&[u8]; 4], x: ActRow) -> [f32; 4] {
    let acc = match ty {
        GgmlType::Q4_K => q4_k(w, x),
        GgmlType::Q6_K => q6_k(w, x),
        GgmlType::Q4_0 => b32::<18, 2, 8, false, false, false>(w, x),
        GgmlType::Q4_1 => b32::<20, 4, 0, true, false, false>(w, x),
        GgmlType::Q5_0 => b32::<22, 6, 16, false, true, false>(w, x),
        GgmlType::Q8_0 => b32::<34, 2, 0, false, false, true>(w, x),
        other => unreachable!("no fused kernel for {other}"),
    };
    let mut out = [0f32; 4];
    _mm_storeu_ps(out.as_mut_ptr(), acc);
    out
}

#[inline(always)]
unsafe fn hsum4(p: [__m256i; 4]) -> __m128i {
    let h = _mm256_hadd_epi32(_mm256_hadd_epi32(p[0], p[1]), _mm256_hadd_epi32(p[2], p[3]));
    _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256::<1>(h))
}

#[inline(always)]
unsafe fn load32(p: *const u8) -> __m256i {
    _mm256_loadu_si256(p as *const __m256i)
}

#[inline(always)]
fn f16_bits(b: &[u8], at: usize) -> i16 {
    i16::from_le_bytes([b[at], b[at + 1]])
}

/// The f16 at byte `at` of each of four blocks, as four f32 lanes (exact conversion).
#[inline(always)]
unsafe fn f16x4(blk: [&[u8]; 4], at: usize) -> __m128 {
    _mm_cvtph_ps(_mm_set_epi16(
        0,
        0,
        0,
        0,
        f16_bits(blk[3], at),
        f16_bits(blk[2], at),
        f16_bits(blk[1], at),
        f16_bits(blk[0], at),
    ))
}

/// The 32 bytes of bit `j` of `bits` (u32, little-endian), each 0x10 when set.
#[inline(always)]
unsafe fn bit4_bytes(bits: u32) -> __m256i {
    let shuffle = _mm256_set_epi64x(
        0x0303030303030303,
        0x0202020202020202,
        0x0101010101010101,
        0,
    );
    let v = _mm256_shuffle_epi8(_mm256_set1_epi32(bits as i32), shuffle);
    let mask = _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe_u64 as i64);
    let set = _mm256_cmpeq_epi8(_mm256_or_si256(v, mask), _mm256_set1_epi64x(-1));
    _mm256_and_si256(set, _mm256_set1_epi8(0x10))
}

/// The 32-element formats: `TS` bytes per block, quants at `QS`, values `q - OFFSET`,
/// an f16 min at byte 2 when `MIN`, a fifth bit from the u32 at byte 2 when `FIVE`,
/// signed bytes (Q8_0) when `Q8`.
#[inline(always)]
unsafe fn b32<
    const TS: usize,
    const QS: usize,
    const OFFSET: i32,
    const MIN: bool,
    const FIVE: bool,
    const Q8: bool,
>(
    w: [&[u8]; 4],
    x: ActRow,
) -> __m128 {
    let ones = _mm256_set1_epi16(1);
    let low = _mm256_set1_epi8(0x0F);
    let mut acc = _mm_setzero_ps();
    let nb = x.d.len();
    for row in &w {
        assert!(row.len() >= nb * TS);
    }
    let base = [w[0].as_ptr(), w[1].as_ptr(), w[2].as_ptr(), w[3].as_ptr()];
    for b in 0..nb {
        let blk = [0, 1, 2, 3].map(|r| std::slice::from_raw_parts(base[r].add(b * TS), TS));
        let xv = load32(x.q.as_ptr().add(32 * b) as *const u8);
        let mut p = [_mm256_setzero_si256(); 4];
        for r in 0..4 {
            let at = base[r].add(b * TS);
            let pairs = if Q8 {
                let wv = load32(at.add(QS));
                _mm256_maddubs_epi16(_mm256_sign_epi8(wv, wv), _mm256_sign_epi8(xv, wv))
            } else {
                let v = _mm_loadu_si128(at.add(QS) as *const __m128i);
                let mut q = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16::<4>(v), v), low);
                if FIVE {
                    q = _mm256_or_si256(q, bit4_bytes((at.add(2) as *const u32).read_unaligned()));
                }
                _mm256_maddubs_epi16(q, xv)
            };
            p[r] = _mm256_madd_epi16(pairs, ones);
        }
        let isum = _mm_sub_epi32(
            hsum4(p),
            _mm_set1_epi32(OFFSET * *x.sums.get_unchecked(b) as i32),
        );
        let scale = _mm_mul_ps(f16x4(blk, 0), _mm_set1_ps(*x.d.get_unchecked(b)));
        acc = _mm_fmadd_ps(scale, _mm_cvtepi32_ps(isum), acc);
        if MIN {
            acc = _mm_fmadd_ps(f16x4(blk, 2), _mm_set1_ps(*x.ds.get_unchecked(b)), acc);
        }
    }
    acc
}

/// The 8 scales and 8 mins of a Q4_K super-block as four little-endian words:
/// `(sc0..3, sc4..7, m0..3, m4..7)`, one byte each (see `formats::q4_k::scale_min`).
#[inline(always)]
fn q4_k_scales(b: &[u8]) -> [u32; 4] {
    let w = |i: usize| u32::from_le_bytes([b[4 + 4 * i], b[5 + 4 * i], b[6 + 4 * i], b[7 + 4 * i]]);
    let (w0, w1, w2) = (w(0), w(1), w(2));
    [
        w0 & 0x3f3f3f3f,
        (w2 & 0x0f0f0f0f) | (((w0 >> 6) & 0x03030303) << 4),
        w1 & 0x3f3f3f3f,
        ((w2 >> 4) & 0x0f0f0f0f) | (((w1 >> 6) & 0x03030303) << 4),
    ]
}

#[inline(always)]
unsafe fn q4_k(w: [&[u8]; 4], x: ActRow) -> __m128 {
    let low = _mm256_set1_epi8(0x0F);
    let ones = _mm256_set1_epi16(1);
    let sign = _mm_set1_ps(-0.0);
    let mut acc = _mm_setzero_ps();
    for s in 0..x.d.len() {
        let blk = [0, 1, 2, 3].map(|r| &w[r][s * 144..(s + 1) * 144]);
        let xq = x.q.as_ptr().add(256 * s) as *const u8;
        // Activation sums per sub-block of 32: [8] i32.
        let xs32 = _mm256_madd_epi16(
            _mm256_loadu_si256(x.sums.as_ptr().add(16 * s) as *const __m256i),
            ones,
        );
        let mut p = [_mm256_setzero_si256(); 4];
        let mut mins = [_mm256_setzero_si256(); 4];
        for r in 0..4 {
            let sm = q4_k_scales(blk[r]);
            let m8 = _mm256_cvtepu8_epi32(_mm_set_epi32(0, 0, sm[3] as i32, sm[2] as i32));
            mins[r] = _mm256_mullo_epi32(m8, xs32);
            let qs = blk[r].as_ptr().add(16);
            for c in 0..4 {
                let v = load32(qs.add(32 * c));
                let word = sm[c / 2] >> (16 * (c % 2));
                let (sc_lo, sc_hi) = ((word & 0xff) as i16, ((word >> 8) & 0xff) as i16);
                let lo = _mm256_maddubs_epi16(_mm256_and_si256(v, low), load32(xq.add(64 * c)));
                let hi = _mm256_maddubs_epi16(
                    _mm256_and_si256(_mm256_srli_epi16::<4>(v), low),
                    load32(xq.add(64 * c + 32)),
                );
                p[r] = _mm256_add_epi32(p[r], _mm256_madd_epi16(lo, _mm256_set1_epi16(sc_lo)));
                p[r] = _mm256_add_epi32(p[r], _mm256_madd_epi16(hi, _mm256_set1_epi16(sc_hi)));
            }
        }
        let dx = _mm_set1_ps(*x.d.get_unchecked(s));
        acc = _mm_fmadd_ps(
            _mm_mul_ps(f16x4(blk, 0), dx),
            _mm_cvtepi32_ps(hsum4(p)),
            acc,
        );
        let scale = _mm_xor_ps(_mm_mul_ps(f16x4(blk, 2), dx), sign);
        acc = _mm_fmadd_ps(scale, _mm_cvtepi32_ps(hsum4(mins)), acc);
    }
    acc
}

#[inline(always)]
unsafe fn q6_k(w: [&[u8]; 4], x: ActRow) -> __m128 {
    let low = _mm256_set1_epi8(0x0F);
    let three = _mm256_set1_epi8(3);
    let mut acc = _mm_setzero_ps();
    for s in 0..x.d.len() {
        let blk = [0, 1, 2, 3].map(|r| &w[r][s * 210..(s + 1) * 210]);
        let xq = x.q.as_ptr().add(256 * s) as *const u8;
        let xs = _mm256_loadu_si256(x.sums.as_ptr().add(16 * s) as *const __m256i);
        let mut p = [_mm256_setzero_si256(); 4];
        for r in 0..4 {
            let b = blk[r].as_ptr();
            let sc = std::slice::from_raw_parts(b.add(192) as *const i8, 16);
            let sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(b.add(192) as *const __m128i));
            // The offset of 32: Σ_j sc_j · xs_j · 32, folded into the exact sum.
            p[r] = _mm256_sub_epi32(p[r], _mm256_slli_epi32::<5>(_mm256_madd_epi16(sc16, xs)));
            for h in 0..2 {
                let ql0 = load32(b.add(64 * h));
                let ql1 = load32(b.add(64 * h + 32));
                let qh = load32(b.add(128 + 32 * h));
                let lows = [
                    _mm256_and_si256(ql0, low),
                    _mm256_and_si256(ql1, low),
                    _mm256_and_si256(_mm256_srli_epi16::<4>(ql0), low),
                    _mm256_and_si256(_mm256_srli_epi16::<4>(ql1), low),
                ];
                let highs = [
                    _mm256_and_si256(qh, three),
                    _mm256_and_si256(_mm256_srli_epi16::<2>(qh), three),
                    _mm256_and_si256(_mm256_srli_epi16::<4>(qh), three),
                    _mm256_and_si256(_mm256_srli_epi16::<6>(qh), three),
                ];
                for t in 0..4 {
                    let q = _mm256_or_si256(lows[t], _mm256_slli_epi16::<4>(highs[t]));
                    let j = 8 * h + 2 * t;
                    let pairs = _mm256_maddubs_epi16(q, load32(xq.add(128 * h + 32 * t)));
                    let scv = _mm256_set_m128i(
                        _mm_set1_epi16(sc[j + 1] as i16),
                        _mm_set1_epi16(sc[j] as i16),
                    );
                    p[r] = _mm256_add_epi32(p[r], _mm256_madd_epi16(pairs, scv));
                }
            }
        }
        let dx = _mm_set1_ps(*x.d.get_unchecked(s));
        acc = _mm_fmadd_ps(
            _mm_mul_ps(f16x4(blk, 208), dx),
            _mm_cvtepi32_ps(hsum4(p)),
            acc,
        );
    }
    acc
}
