//! Attention of query rows against the cached keys and values of their sequence: a tile
//! of rows of one sequence shares each chunk of keys and values, dequantized once, and
//! every row's arithmetic is the same whatever tile it is in.

use gguf::GgmlType;

use crate::formats::dequantize_row;
use crate::ops::{exp, exp_shifted};

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
        for (t, o) in out[..n * hd].chunks_exact_mut(hd).enumerate() {
            let pos = from + t;
            let block = self.blocks[pos / self.block_size];
            let at = ((pos % self.block_size) * self.n_head_kv + kv_head) * vb;
            dequantize_row(self.ty, &block[at..at + vb], o).expect("KV type is supported");
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
/// query heads `heads` (all mapped to `kv_head`): row `r` (`q[r]`, its `[n_head,
/// head_dim]`) attends positions `spans[r]` (`0..=pos`, or the last `window` of them).
/// Positions are taken in chunks of [`KV_CHUNK`] from position 0 in order, each
/// dequantized once for the whole tile (from the first position a row of it attends); per
/// row and head a running max `m`, sum `l` and output `o` are rescaled by
/// `e^(m_old - m_new)` as each chunk raises the max, and `o / l` is the result, written to
/// `out[r]` (`[heads.len(), head_dim]`).
///
/// Per row and head, whatever the tile: score `t` is `scale · (q·k_t)`, the dot product
/// summed as [`dot8`] does; `e^x` is [`crate::ops::exp`]; the chunk's sum is taken in
/// position order; `o` accumulates `p_t · v_t` in position order, one fused multiply-add
/// per element and position.
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
    // 8 vectors more than a chunk: `dot8` reads 8 from any position of the chunk.
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
            for (g, h) in heads.clone().enumerate() {
                let qi = r * n_group + g;
                let s = &mut scores[qi * KV_CHUNK + part.start..qi * KV_CHUNK + part.end];
                let qh = &q[r][h * hd..(h + 1) * hd];
                for (t0, block) in s.chunks_mut(8).enumerate() {
                    dot8(simd, qh, &kc[(part.start + t0 * 8) * hd..], block, scale);
                }
                let m = s.iter().copied().fold(max[qi], f32::max);
                let rescale = exp(max[qi] - m);
                exp_shifted(s, m);
                let l = s.iter().fold(sum[qi] * rescale, |l, v| l + v);
                for o in &mut out[r][g * hd..(g + 1) * hd] {
                    *o *= rescale;
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
            for g in 0..n_group {
                let qi = r * n_group + g;
                let p = &scores[qi * KV_CHUNK + part.start..qi * KV_CHUNK + part.end];
                accumulate(
                    simd,
                    &mut o[g * hd..(g + 1) * hd],
                    p,
                    &vc[part.start * hd..],
                );
            }
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

/// Whether [`dot8`] and [`accumulate`] may take their AVX2 paths for vectors of `hd`:
/// the CPU has AVX2 and FMA, and `hd` is a multiple of 8.
fn simd_for(hd: usize) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        let f = crate::cpu::CpuFeatures::get();
        f.avx2 && f.fma && hd.is_multiple_of(8)
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = hd;
        false
    }
}

/// `out[t] = scale · (q · k[t])` for the `out.len() ≤ 8` vectors of `k` (`[.., q.len()]`,
/// row-major). Each dot product: element `i` is fused-multiply-added into lane `i % 8`
/// (lanes start at 0.0), and the lanes are summed `((l0+l1)+(l2+l3))+((l4+l5)+(l6+l7))`;
/// the AVX2 version (`simd`, from [`simd_for`]) gives the bits of the scalar one, and
/// needs `k` to hold 8 vectors (those past `out.len()` are read and ignored).
fn dot8(simd: bool, q: &[f32], k: &[f32], out: &mut [f32], scale: f32) {
    let hd = q.len();
    #[cfg(target_arch = "x86_64")]
    if simd {
        assert!(k.len() >= 8 * hd, "8 vectors of keys");
        // SAFETY: `simd_for` found AVX2 and FMA; `k` holds 8 vectors of `hd`.
        return unsafe { dot8_avx2(q, k, out, scale) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = simd;
    for (t, o) in out.iter_mut().enumerate() {
        let mut l = [0f32; 8];
        for (i, (&a, &b)) in q.iter().zip(&k[t * hd..(t + 1) * hd]).enumerate() {
            l[i % 8] = a.mul_add(b, l[i % 8]);
        }
        *o = (((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]))) * scale;
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn dot8_avx2(q: &[f32], k: &[f32], out: &mut [f32], scale: f32) {
    use std::arch::x86_64::*;
    let hd = q.len();
    let mut acc = [_mm256_setzero_ps(); 8];
    let (pq, pk) = (q.as_ptr(), k.as_ptr());
    for i in (0..hd).step_by(8) {
        let qv = _mm256_loadu_ps(pq.add(i));
        for (t, a) in acc.iter_mut().enumerate() {
            *a = _mm256_fmadd_ps(qv, _mm256_loadu_ps(pk.add(t * hd + i)), *a);
        }
    }
    let h01 = _mm256_hadd_ps(acc[0], acc[1]);
    let h23 = _mm256_hadd_ps(acc[2], acc[3]);
    let h45 = _mm256_hadd_ps(acc[4], acc[5]);
    let h67 = _mm256_hadd_ps(acc[6], acc[7]);
    let h0123 = _mm256_hadd_ps(h01, h23);
    let h4567 = _mm256_hadd_ps(h45, h67);
    let lo = _mm256_permute2f128_ps::<0x20>(h0123, h4567);
    let hi = _mm256_permute2f128_ps::<0x31>(h0123, h4567);
    let s = _mm256_mul_ps(_mm256_add_ps(lo, hi), _mm256_set1_ps(scale));
    let mut all = [0f32; 8];
    _mm256_storeu_ps(all.as_mut_ptr(), s);
    out.copy_from_slice(&all[..out.len()]);
}

/// `o[i] += p[t] · v[t][i]` for every position `t` in order (`v` row-major, rows of
/// `o.len()`), one fused multiply-add each; the AVX2 version (`simd`, from
/// [`simd_for`]) gives the scalar bits.
fn accumulate(simd: bool, o: &mut [f32], p: &[f32], v: &[f32]) {
    let hd = o.len();
    #[cfg(target_arch = "x86_64")]
    if simd {
        // SAFETY: `simd_for` found AVX2 and FMA; `accumulate_avx2` checks that `v` holds
        // `p.len()` rows of `hd`.
        return unsafe { accumulate_avx2(o, p, v) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = simd;
    for (t, &pt) in p.iter().enumerate() {
        for (oi, &vi) in o.iter_mut().zip(&v[t * hd..(t + 1) * hd]) {
            *oi = pt.mul_add(vi, *oi);
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn accumulate_avx2(o: &mut [f32], p: &[f32], v: &[f32]) {
    use std::arch::x86_64::*;
    let hd = o.len();
    assert!(v.len() >= p.len() * hd);
    let (po, pv) = (o.as_mut_ptr(), v.as_ptr());
    let mut d = 0;
    while d < hd {
        let w = (hd - d).min(64) / 8;
        let mut acc = [_mm256_setzero_ps(); 8];
        for (j, a) in acc[..w].iter_mut().enumerate() {
            *a = _mm256_loadu_ps(po.add(d + 8 * j));
        }
        for (t, &pt) in p.iter().enumerate() {
            let b = _mm256_set1_ps(pt);
            let row = pv.add(t * hd + d);
            for (j, a) in acc[..w].iter_mut().enumerate() {
                *a = _mm256_fmadd_ps(b, _mm256_loadu_ps(row.add(8 * j)), *a);
            }
        }
        for (j, a) in acc[..w].iter().enumerate() {
            _mm256_storeu_ps(po.add(d + 8 * j), *a);
        }
        d += 8 * w;
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

    /// The SIMD dot products and accumulation give the scalar twins' bits.
    #[test]
    fn simd_dots_and_accumulation_give_the_scalar_bits() {
        let hd = 128;
        let (q, k) = (data(hd, 1), data(8 * hd, 2));
        let mut simd = [0f32; 8];
        dot8(simd_for(hd), &q, &k, &mut simd, 0.3);
        for t in 0..8 {
            let mut scalar = [0f32];
            dot8(false, &q, &k[t * hd..(t + 1) * hd], &mut scalar, 0.3);
            assert_eq!(simd[t].to_bits(), scalar[0].to_bits(), "dot {t}");
        }
        let (p, v) = (data(7, 3), data(7 * hd, 4));
        let mut o = data(hd, 5);
        let mut want = o.clone();
        accumulate(simd_for(hd), &mut o, &p, &v);
        for (t, &pt) in p.iter().enumerate() {
            for (w, &vi) in want.iter_mut().zip(&v[t * hd..(t + 1) * hd]) {
                *w = pt.mul_add(vi, *w);
            }
        }
        assert!(o.iter().zip(&want).all(|(a, b)| a.to_bits() == b.to_bits()));
    }
}
