//! Attention of query rows against the cached keys and values of their sequence: a tile
//! of rows of one sequence shares each chunk of keys and values, dequantized once, and
//! every row's arithmetic is the same whatever tile it is in.

use gguf::GgmlType;

use crate::formats::format;
use device::math::{exp, exp_shifted};

/// Cached keys or values of one sequence for one layer, stored in blocks of
/// `block_size` positions, each `[block_size, n_head_kv, head_dim]` elements of `ty`.
pub struct KvView<'a> {
    pub ty: GgmlType,
    pub blocks: &'a [&'a [u8]],
    pub block_size: usize,
    pub n_head_kv: usize,
    pub head_dim: usize,
}

impl KvView<'_> {
    /// Dequantizes the `[head_dim]` vectors of `kv_head` at positions `from..from + n` into
    /// `out` (`[n, head_dim]`).
    fn dequantize(&self, from: usize, n: usize, kv_head: usize, out: &mut [f32]) {
        let hd = self.head_dim;
        let vb = (self
            .ty
            .row_bytes(hd as u64)
            .expect("head_dim fits the KV type")) as usize;
        let dequantize = format(self.ty).expect("KV type is supported").dequantize;
        for (t, o) in out[..n * hd].chunks_exact_mut(hd).enumerate() {
            let pos = from + t;
            let block = self.blocks[pos / self.block_size];
            let at = ((pos % self.block_size) * self.n_head_kv + kv_head) * vb;
            dequantize(&block[at..at + vb], o);
        }
    }
}

/// Positions per chunk of the online softmax. Chunks start at multiples of `KV_CHUNK` from
/// position 0, so a row's chunks, and with them its arithmetic, are the same in any batch.
pub const KV_CHUNK: usize = 64;

/// Scratch for [`attend`]: one chunk of keys and of values, and per query head a chunk of
/// scores, its running max and sum.
#[derive(Default)]
pub struct AttentionScratch {
    keys: Vec<f32>,
    values: Vec<f32>,
    scores: Vec<f32>,
    max: Vec<f32>,
    sum: Vec<f32>,
}

/// Grouped-query attention, flash-style, for a tile of query rows of one sequence and the
/// query heads `heads` of `q[r]` (`[.., head_dim]`; all mapped to `kv_head`): row `r` attends
/// positions `spans[r]` (`0..=pos`, or the last `window` of them).
/// Positions are taken in chunks of [`KV_CHUNK`] from position 0 in order, each
/// dequantized once for the whole tile (from the first position a row of it attends); per
/// row and head a running max `m`, sum `l` and output `o` are rescaled by
/// `e^(m_old - m_new)` as each chunk raises the max, and `o / l` is the result, written to
/// `out[r]` (`[heads.len(), head_dim]`).
///
/// Per row and head, whatever the tile: score `t` is `scale · (q·k_t)`, the dot product
/// summed as [`dots`] does; `e^x` is [`device::math::exp`]; the chunk's sum is taken in
/// position order; `o` accumulates `p_t · v_t` in position order, one fused multiply-add
/// per element and position (and is rescaled only when the chunk raises the max:
/// `e^0` is 1).
#[allow(clippy::too_many_arguments)]
pub fn attend(
    q: &[&[f32]],
    spans: &[std::ops::Range<usize>],
    keys: &KvView,
    values: &KvView,
    kv_head: usize,
    heads: std::ops::Range<usize>,
    scale: f32,
    scratch: &mut AttentionScratch,
    out: &mut [&mut [f32]],
) {
    let hd = keys.head_dim;
    let (rows, n_group) = (q.len(), heads.len());
    let n_q = rows * n_group;
    // 8 vectors more than a chunk: `dots` reads 8 keys from any position of the chunk.
    scratch.keys.resize((KV_CHUNK + 8) * hd, 0.0);
    scratch.values.resize(KV_CHUNK * hd, 0.0);
    scratch.scores.resize(n_q * KV_CHUNK, 0.0);
    scratch.max.clear();
    scratch.max.resize(n_q, f32::NEG_INFINITY);
    scratch.sum.clear();
    scratch.sum.resize(n_q, 0.0);
    let AttentionScratch {
        keys: kc,
        values: vc,
        scores,
        max,
        sum,
    } = scratch;
    for o in out.iter_mut() {
        o[..n_group * hd].fill(0.0);
    }
    let simd = simd_for(hd);
    let first = spans.iter().map(|s| s.start).min().unwrap_or(0);
    let longest = spans.iter().map(|s| s.end).max().unwrap_or(0);
    for c0 in (first - first % KV_CHUNK..longest).step_by(KV_CHUNK) {
        // Row `r`'s positions in this chunk, as offsets from `c0`.
        let part = |r: usize| {
            let s = &spans[r];
            let (a, b) = (s.start.max(c0), s.end.min(c0 + KV_CHUNK));
            (a - c0)..(b.max(a) - c0)
        };
        let from = first.max(c0) - c0;
        let chunk = (longest - c0).min(KV_CHUNK);
        keys.dequantize(c0 + from, chunk - from, kv_head, &mut kc[from * hd..]);
        for r in 0..rows {
            let part = part(r);
            if part.is_empty() {
                continue;
            }
            let qr = &q[r][heads.start * hd..heads.end * hd];
            let row_scores = &mut scores[r * n_group * KV_CHUNK..(r + 1) * n_group * KV_CHUNK];
            for t in part.clone().step_by(8) {
                let n = (part.end - t).min(8);
                dots(simd, qr, hd, &kc[t * hd..], &mut row_scores[t..], n, scale);
            }
            for g in 0..n_group {
                let qi = r * n_group + g;
                let s = &mut row_scores[g * KV_CHUNK + part.start..g * KV_CHUNK + part.end];
                let m = lane_max(s, max[qi]);
                let rescale = exp(max[qi] - m);
                exp_shifted(s, m);
                let l = s.iter().fold(sum[qi] * rescale, |l, v| l + v);
                if m != max[qi] {
                    for o in &mut out[r][g * hd..(g + 1) * hd] {
                        *o *= rescale;
                    }
                }
                (max[qi], sum[qi]) = (m, l);
            }
        }
        values.dequantize(c0 + from, chunk - from, kv_head, &mut vc[from * hd..]);
        for (r, o) in out.iter_mut().enumerate() {
            let part = part(r);
            if part.is_empty() {
                continue;
            }
            let p = &scores[r * n_group * KV_CHUNK + part.start..];
            accumulate(
                simd,
                &mut o[..n_group * hd],
                hd,
                p,
                part.len(),
                &vc[part.start * hd..],
            );
        }
    }
    for (r, o) in out.iter_mut().enumerate() {
        for g in 0..n_group {
            let inv = 1.0 / sum[r * n_group + g];
            for v in &mut o[g * hd..(g + 1) * hd] {
                *v *= inv;
            }
        }
    }
}

/// Lanes of [`lane_max`].
const LANES: usize = 8;

/// The largest of `init` and `s` (NaN ignored, as `f32::max` does): a running max per lane
/// (value `i` into lane `i % 8`), then the lanes' maxima. Any order gives the same max.
fn lane_max(s: &[f32], init: f32) -> f32 {
    let mut m = [init; LANES];
    let (whole, rest) = s.split_at(s.len() / LANES * LANES);
    for c in whole.chunks_exact(LANES) {
        for (m, &v) in m.iter_mut().zip(c) {
            *m = m.max(v);
        }
    }
    rest.iter()
        .fold(m.into_iter().fold(init, f32::max), |a, &v| a.max(v))
}

/// The instruction set [`dots`] and [`accumulate`] run on; every one gives the scalar
/// bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Simd {
    Scalar,
    /// 8 lanes, one query vector per pass.
    Avx2,
    /// The same 8 lanes twice over in 512-bit registers (two keys' lanes, or 16 elements
    /// of a value), [`QUERY_BLOCK`] query vectors per pass (AVX-512's 32 registers hold
    /// their accumulators), each key and value loaded once for all of them.
    Avx512,
}

/// Query vectors a pass of the AVX-512 kernels takes at once.
const QUERY_BLOCK: usize = 4;

/// The instruction set for vectors of `hd` (8-lane paths need `hd` a multiple of 8).
fn simd_for(hd: usize) -> Simd {
    #[cfg(target_arch = "x86_64")]
    {
        let f = crate::features::CpuFeatures::get();
        match (
            f.avx2 && f.fma && hd.is_multiple_of(8),
            f.avx512f && f.avx512vl,
        ) {
            (true, true) => Simd::Avx512,
            (true, false) => Simd::Avx2,
            _ => Simd::Scalar,
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = hd;
        Simd::Scalar
    }
}

/// Scores of the query vectors `q` (`[n_q, hd]`) against `n ≤ 8` keys `k` (`[.., hd]`,
/// row-major): `scores[j · KV_CHUNK + t] = scale · (q_j · k_t)`. Each dot product: element
/// `i` is fused-multiply-added into lane `i % 8` (lanes start at 0.0), and the lanes are
/// summed `((l0+l1)+(l2+l3))+((l4+l5)+(l6+l7))`. The SIMD paths give the scalar bits and
/// need `k` to hold 8 keys (those past `n` are read, their scores not written).
fn dots(simd: Simd, q: &[f32], hd: usize, k: &[f32], scores: &mut [f32], n: usize, scale: f32) {
    let n_q = q.len() / hd;
    #[cfg(target_arch = "x86_64")]
    if simd != Simd::Scalar {
        assert!(k.len() >= 8 * hd && n <= 8 && scores.len() >= (n_q - 1) * KV_CHUNK + n);
        let mut j = 0;
        while j < n_q {
            let (qj, sj) = (&q[j * hd..], &mut scores[j * KV_CHUNK..]);
            // SAFETY: `simd_for` found AVX2 and FMA (and AVX-512 F and VL for `Avx512`)
            // and `hd` a multiple of 8; `q` holds the block's vectors, `k` 8 keys and
            // `scores` the block's rows (asserted above).
            j += unsafe {
                match (simd, n_q - j) {
                    (Simd::Avx512, QUERY_BLOCK..) => {
                        dots_avx512::<QUERY_BLOCK>(qj, hd, k, sj, n, scale)
                    }
                    (Simd::Avx512, 3) => dots_avx512::<3>(qj, hd, k, sj, n, scale),
                    (Simd::Avx512, 2) => dots_avx512::<2>(qj, hd, k, sj, n, scale),
                    (Simd::Avx512, _) => dots_avx512::<1>(qj, hd, k, sj, n, scale),
                    _ => dots_block::<1>(qj, hd, k, sj, n, scale),
                }
            };
        }
        return;
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = simd;
    for (j, qj) in q.chunks_exact(hd).enumerate() {
        for t in 0..n {
            let mut l = [0f32; 8];
            for (i, (&a, &b)) in qj.iter().zip(&k[t * hd..(t + 1) * hd]).enumerate() {
                l[i % 8] = a.mul_add(b, l[i % 8]);
            }
            scores[j * KV_CHUNK + t] =
                (((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]))) * scale;
        }
    }
}

/// [`dots`] for the first `N` vectors of `q` in 512-bit registers: the low half holds key
/// `t`'s 8 lanes and the high half key `t + 4`'s, against the query's 8 elements in both,
/// so every lane sees the products [`dots_block`]'s does, in the same order; returns `N`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,avx512f,avx512vl")]
unsafe fn dots_avx512<const N: usize>(
    q: &[f32],
    hd: usize,
    k: &[f32],
    scores: &mut [f32],
    n: usize,
    scale: f32,
) -> usize {
    use std::arch::x86_64::*;
    let both = |lo: __m256, hi: __m256| {
        let lo = _mm512_castpd256_pd512(_mm256_castps_pd(lo));
        _mm512_castpd_ps(_mm512_insertf64x4::<1>(lo, _mm256_castps_pd(hi)))
    };
    // `acc[t][j]`: keys `t` and `t + 4` against query `j`.
    let mut acc = [[_mm512_setzero_ps(); N]; 4];
    let (pq, pk) = (q.as_ptr(), k.as_ptr());
    for i in (0..hd).step_by(8) {
        let qv: [__m512; N] = std::array::from_fn(|j| {
            let x = _mm256_loadu_ps(pq.add(j * hd + i));
            both(x, x)
        });
        for (t, at) in acc.iter_mut().enumerate() {
            let kv = both(
                _mm256_loadu_ps(pk.add(t * hd + i)),
                _mm256_loadu_ps(pk.add((t + 4) * hd + i)),
            );
            for (a, &qj) in at.iter_mut().zip(&qv) {
                *a = _mm512_fmadd_ps(qj, kv, *a);
            }
        }
    }
    for j in 0..N {
        let a: [__m256; 8] = std::array::from_fn(|t| {
            let x = _mm512_castps_pd(acc[t % 4][j]);
            _mm256_castpd_ps(if t < 4 {
                _mm512_castpd512_pd256(x)
            } else {
                _mm512_extractf64x4_pd::<1>(x)
            })
        });
        store_sums(a, scale, &mut scores[j * KV_CHUNK..j * KV_CHUNK + n]);
    }
    N
}

/// `out[t] = scale · Σ lanes of a[t]`, the lanes summed `((l0+l1)+(l2+l3))+((l4+l5)+(l6+l7))`
/// (`out` at most 8 long).
#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn store_sums(a: [std::arch::x86_64::__m256; 8], scale: f32, out: &mut [f32]) {
    use std::arch::x86_64::*;
    let h01 = _mm256_hadd_ps(a[0], a[1]);
    let h23 = _mm256_hadd_ps(a[2], a[3]);
    let h45 = _mm256_hadd_ps(a[4], a[5]);
    let h67 = _mm256_hadd_ps(a[6], a[7]);
    let h0123 = _mm256_hadd_ps(h01, h23);
    let h4567 = _mm256_hadd_ps(h45, h67);
    let lo = _mm256_permute2f128_ps::<0x20>(h0123, h4567);
    let hi = _mm256_permute2f128_ps::<0x31>(h0123, h4567);
    let sum = _mm256_mul_ps(_mm256_add_ps(lo, hi), _mm256_set1_ps(scale));
    let mut all = [0f32; 8];
    _mm256_storeu_ps(all.as_mut_ptr(), sum);
    out.copy_from_slice(&all[..out.len()]);
}

/// [`dots`] for the first `N` vectors of `q`, 8 keys each loaded once for all of them;
/// returns `N` (the AVX2 path, `N = 1`).
#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn dots_block<const N: usize>(
    q: &[f32],
    hd: usize,
    k: &[f32],
    scores: &mut [f32],
    n: usize,
    scale: f32,
) -> usize {
    use std::arch::x86_64::*;
    // `acc[t][j]`: key `t`'s lanes against query `j`.
    let mut acc = [[_mm256_setzero_ps(); N]; 8];
    let (pq, pk) = (q.as_ptr(), k.as_ptr());
    for i in (0..hd).step_by(8) {
        let qv: [__m256; N] = std::array::from_fn(|j| _mm256_loadu_ps(pq.add(j * hd + i)));
        for (t, at) in acc.iter_mut().enumerate() {
            let kv = _mm256_loadu_ps(pk.add(t * hd + i));
            for (a, &qj) in at.iter_mut().zip(&qv) {
                *a = _mm256_fmadd_ps(qj, kv, *a);
            }
        }
    }
    for j in 0..N {
        let a: [__m256; 8] = std::array::from_fn(|t| acc[t][j]);
        store_sums(a, scale, &mut scores[j * KV_CHUNK..j * KV_CHUNK + n]);
    }
    N
}

/// `o[j · hd + i] += p[j · KV_CHUNK + t] · v[t][i]` for every query vector `j` of `o`
/// (`[n_q, hd]`) and every position `t < n` in order (`v` row-major, rows of `hd`), one
/// fused multiply-add each; the SIMD paths give the scalar bits.
fn accumulate(simd: Simd, o: &mut [f32], hd: usize, p: &[f32], n: usize, v: &[f32]) {
    let n_q = o.len() / hd;
    assert!(v.len() >= n * hd && (n_q == 0 || p.len() >= (n_q - 1) * KV_CHUNK + n));
    #[cfg(target_arch = "x86_64")]
    if simd != Simd::Scalar {
        let mut j = 0;
        while j < n_q {
            let (oj, pj) = (&mut o[j * hd..], &p[j * KV_CHUNK..]);
            // SAFETY: as in `dots`; `o`, `p` and `v` hold what the block reads and writes
            // (asserted above).
            j += unsafe {
                match (simd, n_q - j) {
                    (Simd::Avx512, QUERY_BLOCK..) => {
                        accumulate_avx512::<QUERY_BLOCK>(oj, hd, pj, n, v)
                    }
                    (Simd::Avx512, 3) => accumulate_avx512::<3>(oj, hd, pj, n, v),
                    (Simd::Avx512, 2) => accumulate_avx512::<2>(oj, hd, pj, n, v),
                    (Simd::Avx512, _) => accumulate_avx512::<1>(oj, hd, pj, n, v),
                    _ => accumulate_block::<1>(oj, hd, pj, n, v),
                }
            };
        }
        return;
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = simd;
    for (j, oj) in o.chunks_exact_mut(hd).enumerate() {
        for t in 0..n {
            let pt = p[j * KV_CHUNK + t];
            for (oi, &vi) in oj.iter_mut().zip(&v[t * hd..(t + 1) * hd]) {
                *oi = pt.mul_add(vi, *oi);
            }
        }
    }
}

/// [`accumulate`] for the first `N` vectors of `o`, 64 elements at a time in four 512-bit
/// registers per vector (then 16, then 8 as [`accumulate_block`]); returns `N`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,avx512f,avx512vl")]
unsafe fn accumulate_avx512<const N: usize>(
    o: &mut [f32],
    hd: usize,
    p: &[f32],
    n: usize,
    v: &[f32],
) -> usize {
    let mut d = 0;
    while d + 64 <= hd {
        accumulate_wide::<N, 4>(o, hd, p, n, v, d);
        d += 64;
    }
    while d + 16 <= hd {
        accumulate_wide::<N, 1>(o, hd, p, n, v, d);
        d += 16;
    }
    while d < hd {
        accumulate_lanes::<N, 1>(o, hd, p, n, v, d);
        d += 8;
    }
    N
}

/// Elements `d..d + 16·W` of [`accumulate_avx512`], held in `N × W` 512-bit registers.
#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx2,fma,avx512f,avx512vl")]
unsafe fn accumulate_wide<const N: usize, const W: usize>(
    o: &mut [f32],
    hd: usize,
    p: &[f32],
    n: usize,
    v: &[f32],
    d: usize,
) {
    use std::arch::x86_64::*;
    let (po, pp, pv) = (o.as_mut_ptr(), p.as_ptr(), v.as_ptr());
    let mut acc: [[__m512; N]; W] = std::array::from_fn(|c| {
        std::array::from_fn(|j| _mm512_loadu_ps(po.add(j * hd + d + 16 * c)))
    });
    for t in 0..n {
        let b: [__m512; N] = std::array::from_fn(|j| _mm512_set1_ps(*pp.add(j * KV_CHUNK + t)));
        let row = pv.add(t * hd + d);
        for (c, ac) in acc.iter_mut().enumerate() {
            let x = _mm512_loadu_ps(row.add(16 * c));
            for (a, &bj) in ac.iter_mut().zip(&b) {
                *a = _mm512_fmadd_ps(bj, x, *a);
            }
        }
    }
    for (c, ac) in acc.iter().enumerate() {
        for (j, &x) in ac.iter().enumerate() {
            _mm512_storeu_ps(po.add(j * hd + d + 16 * c), x);
        }
    }
}

/// [`accumulate`] for the first `N` vectors of `o`, 64 elements at a time (then 8), each
/// value vector loaded once for all of them; returns `N`.
#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn accumulate_block<const N: usize>(
    o: &mut [f32],
    hd: usize,
    p: &[f32],
    n: usize,
    v: &[f32],
) -> usize {
    let mut d = 0;
    while d + 64 <= hd {
        accumulate_lanes::<N, 8>(o, hd, p, n, v, d);
        d += 64;
    }
    while d < hd {
        accumulate_lanes::<N, 1>(o, hd, p, n, v, d);
        d += 8;
    }
    N
}

/// Elements `d..d + 8·W` of [`accumulate_block`], held in `N × W` registers.
#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn accumulate_lanes<const N: usize, const W: usize>(
    o: &mut [f32],
    hd: usize,
    p: &[f32],
    n: usize,
    v: &[f32],
    d: usize,
) {
    use std::arch::x86_64::*;
    let (po, pp, pv) = (o.as_mut_ptr(), p.as_ptr(), v.as_ptr());
    // `acc[c][j]`: elements `d + 8c..d + 8c + 8` of query `j`.
    let mut acc: [[__m256; N]; W] = std::array::from_fn(|c| {
        std::array::from_fn(|j| _mm256_loadu_ps(po.add(j * hd + d + 8 * c)))
    });
    for t in 0..n {
        let b: [__m256; N] = std::array::from_fn(|j| _mm256_set1_ps(*pp.add(j * KV_CHUNK + t)));
        let row = pv.add(t * hd + d);
        for (c, ac) in acc.iter_mut().enumerate() {
            let x = _mm256_loadu_ps(row.add(8 * c));
            for (a, &bj) in ac.iter_mut().zip(&b) {
                *a = _mm256_fmadd_ps(bj, x, *a);
            }
        }
    }
    for (c, ac) in acc.iter().enumerate() {
        for (j, &x) in ac.iter().enumerate() {
            _mm256_storeu_ps(po.add(j * hd + d + 8 * c), x);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::formats::quantize_row;
    use device::testing::data;

    /// `n` positions of f16 keys or values, `[n, n_head_kv, hd]`, as floats and as bytes.
    fn f16_cache(n: usize, width: usize, seed: u64) -> (Vec<f32>, Vec<u8>) {
        let v = data(n * width, seed);
        let mut b = vec![0u8; v.len() * 2];
        quantize_row(GgmlType::F16, &v, &mut b).unwrap();
        (v, b)
    }

    fn view<'a>(blocks: &'a [&'a [u8]], n_head_kv: usize, hd: usize, bs: usize) -> KvView<'a> {
        KvView {
            ty: GgmlType::F16,
            blocks,
            block_size: bs,
            n_head_kv,
            head_dim: hd,
        }
    }

    /// Flash-style chunks agree with a two-pass float64 softmax attention, for contexts
    /// shorter and longer than a chunk and windows starting inside one, rows of a tile
    /// each with its own span.
    #[test]
    fn chunked_attention_matches_two_pass_reference() {
        let (hd, n_head_kv, group, bs) = (64, 2, 3, 16);
        let spans = [0..1, 0..5, 0..64, 0..65, 0..200, 130..200, 63..66, 150..151];
        let longest: usize = 200;
        let n_blocks = longest.div_ceil(bs);
        let ((kf, kb), (vf, vb)) = (
            f16_cache(n_blocks * bs, n_head_kv * hd, 1),
            f16_cache(n_blocks * bs, n_head_kv * hd, 2),
        );
        let bytes = bs * n_head_kv * hd * 2;
        let kbl: Vec<&[u8]> = kb.chunks(bytes).collect();
        let vbl: Vec<&[u8]> = vb.chunks(bytes).collect();
        let qs: Vec<Vec<f32>> = (0..spans.len())
            .map(|r| {
                data(n_head_kv * group * hd, 3 + r as u64)
                    .iter()
                    .map(|v| v * 40.0)
                    .collect()
            })
            .collect();
        let q: Vec<&[f32]> = qs.iter().map(|v| v.as_slice()).collect();
        let mut outs = vec![vec![0f32; group * hd]; spans.len()];
        let mut o: Vec<&mut [f32]> = outs.iter_mut().map(|v| v.as_mut_slice()).collect();
        let kv_head = 1;
        let heads = group..2 * group;
        let (keys, values) = (view(&kbl, n_head_kv, hd, bs), view(&vbl, n_head_kv, hd, bs));
        let mut scratch = AttentionScratch::default();
        attend(
            &q,
            &spans,
            &keys,
            &values,
            kv_head,
            heads.clone(),
            0.125,
            &mut scratch,
            &mut o,
        );
        let at = |f: &[f32], t: usize| {
            let f16 = |x: f32| half::f16::from_f32(x).to_f32() as f64;
            (0..hd)
                .map(|i| f16(f[(t * n_head_kv + kv_head) * hd + i]))
                .collect::<Vec<_>>()
        };
        for (r, span) in spans.iter().enumerate() {
            for (g, h) in heads.clone().enumerate() {
                let qh = &q[r][h * hd..(h + 1) * hd];
                let s: Vec<f64> = span
                    .clone()
                    .map(|t| {
                        at(&kf, t)
                            .iter()
                            .zip(qh)
                            .map(|(k, q)| k * *q as f64)
                            .sum::<f64>()
                            * 0.125
                    })
                    .collect();
                let m = s.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let w: Vec<f64> = s.iter().map(|v| (v - m).exp()).collect();
                let z: f64 = w.iter().sum();
                for i in 0..hd {
                    let want: f64 = span
                        .clone()
                        .enumerate()
                        .map(|(j, t)| w[j] / z * at(&vf, t)[i])
                        .sum();
                    let got = outs[r][g * hd + i] as f64;
                    assert!(
                        (got - want).abs() < 1e-5,
                        "span {span:?} head {h} dim {i}: {got} vs {want}"
                    );
                }
            }
        }
    }

    /// A row's output has the same bits alone as in any tile, for head sizes the SIMD
    /// path takes and one it does not, with and without a window; positions before a
    /// tile's windows are never read (their blocks may be gone).
    #[test]
    fn a_row_gives_the_same_bits_alone_and_in_a_tile() {
        for hd in [128, 80, 36] {
            let (n_head_kv, group, bs) = (2, 4, 16);
            let spans = [0..130, 0..131, 70..132, 127..190, 120..191];
            let n_blocks = 191usize.div_ceil(bs);
            let ((_, kb), (_, vb)) = (
                f16_cache(n_blocks * bs, n_head_kv * hd, 5),
                f16_cache(n_blocks * bs, n_head_kv * hd, 6),
            );
            let bytes = bs * n_head_kv * hd * 2;
            let kbl: Vec<&[u8]> = kb.chunks(bytes).collect();
            let vbl: Vec<&[u8]> = vb.chunks(bytes).collect();
            let qs: Vec<Vec<f32>> = (0..spans.len())
                .map(|r| {
                    data(n_head_kv * group * hd, 9 + r as u64)
                        .iter()
                        .map(|v| v * 8.0)
                        .collect()
                })
                .collect();
            let q: Vec<&[f32]> = qs.iter().map(|v| v.as_slice()).collect();
            let run = |rows: std::ops::Range<usize>, kbl: &[&[u8]], vbl: &[&[u8]]| {
                let (keys, values) = (view(kbl, n_head_kv, hd, bs), view(vbl, n_head_kv, hd, bs));
                let mut outs = vec![vec![0f32; group * hd]; rows.len()];
                let mut o: Vec<&mut [f32]> = outs.iter_mut().map(|v| v.as_mut_slice()).collect();
                attend(
                    &q[rows.clone()],
                    &spans[rows],
                    &keys,
                    &values,
                    0,
                    0..group,
                    0.09,
                    &mut AttentionScratch::default(),
                    &mut o,
                );
                outs
            };
            let tile = run(0..spans.len(), &kbl, &vbl);
            // f16 NaNs in every block wholly before the row's window.
            let nan = vec![0xFFu8; bytes];
            for r in 0..spans.len() {
                let (mut kg, mut vg) = (kbl.clone(), vbl.clone());
                for b in 0..n_blocks {
                    if (b + 1) * bs <= spans[r].start {
                        (kg[b], vg[b]) = (&nan, &nan);
                    }
                }
                let alone = run(r..r + 1, &kg, &vg).remove(0);
                let same = alone
                    .iter()
                    .zip(&tile[r])
                    .all(|(a, b)| a.to_bits() == b.to_bits());
                assert!(same, "head_dim {hd}, row {r}");
            }
        }
    }

    /// The instruction sets this CPU runs [`dots`] and [`accumulate`] on.
    fn simds(hd: usize) -> Vec<Simd> {
        match simd_for(hd) {
            Simd::Avx512 => vec![Simd::Avx2, Simd::Avx512],
            Simd::Avx2 => vec![Simd::Avx2],
            Simd::Scalar => vec![],
        }
    }

    /// The SIMD dots and accumulation give the scalar twins' bits, for every number of
    /// query vectors a block may hold or split into and every number of keys.
    #[test]
    fn simd_dots_and_accumulation_give_the_scalar_bits() {
        for hd in [128, 72, 88, 48, 256] {
            for simd in simds(hd) {
                for n_q in 1..=7 {
                    let q = data(n_q * hd, 1);
                    let k = data(8 * hd, 2);
                    for n in 1..=8 {
                        let mut got = vec![0f32; n_q * KV_CHUNK];
                        let mut want = got.clone();
                        dots(simd, &q, hd, &k, &mut got, n, 0.3);
                        dots(Simd::Scalar, &q, hd, &k, &mut want, n, 0.3);
                        let same = got
                            .iter()
                            .zip(&want)
                            .all(|(a, b)| a.to_bits() == b.to_bits());
                        assert!(same, "{simd:?} dots: hd {hd}, {n_q} queries, {n} keys");
                    }
                    let p = data(n_q * KV_CHUNK, 3);
                    let v = data(KV_CHUNK * hd, 4);
                    for n in [1, 7, KV_CHUNK] {
                        let mut got = data(n_q * hd, 5);
                        let mut want = got.clone();
                        accumulate(simd, &mut got, hd, &p, n, &v);
                        accumulate(Simd::Scalar, &mut want, hd, &p, n, &v);
                        let same = got
                            .iter()
                            .zip(&want)
                            .all(|(a, b)| a.to_bits() == b.to_bits());
                        assert!(
                            same,
                            "{simd:?} accumulate: hd {hd}, {n_q} queries, {n} positions"
                        );
                    }
                }
            }
        }
    }
}
