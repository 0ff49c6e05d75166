//! Q4_K: 256 elements in 144 bytes, 8 sub-blocks of 32 with 6-bit scales and mins.
//!
//! | bytes   | meaning                                                            |
//! |---------|--------------------------------------------------------------------|
//! | 0..2    | `d`, f16 super-block scale                                         |
//! | 2..4    | `dmin`, f16 super-block min scale                                  |
//! | 4..16   | `scales`: 8 6-bit scales and 8 6-bit mins, see [`scale_min`]       |
//! | 16..144 | `qs`: element `64c + l` is the low nibble of `qs[32c + l]`, element `64c + 32 + l` the high nibble |
//!
//! Element value, with `j` its sub-block (`element / 32`):
//! `(d * sc[j]) * q - (dmin * m[j])`, each product rounded, then the difference.
//!
//! The quantizers are ggml's (`quantize_row_q4_K_ref`, and `quantize_row_q4_K_impl`
//! with importances), bit for bit.

use super::kquants::{
    imatrix_weights, make_qkx_quants, make_qp_quants, nearest_int, sum_squares, Qkx,
};
use super::{blocks_to_values, f16_at, f16_bytes, f16_round, values_to_blocks, WeightFormat, QK_K};
use gguf::GgmlType;

/// Elements per block.
pub const BLOCK_SIZE: usize = QK_K;
/// Bytes per block.
pub const TYPE_SIZE: usize = 144;

/// Q4_K's row in [`super::FORMATS`].
pub const FORMAT: WeightFormat = WeightFormat {
    ty: GgmlType::Q4_K,
    block_size: BLOCK_SIZE,
    type_size: TYPE_SIZE,
    scales: &[0, 2],
    other_scales: None,
    dequantize,
    quantize: Some(quantize),
    quantize_weighted: Some(quantize_weighted),
};

/// Scale and min of sub-block `j` (0..8) from the 12 packed bytes, as ggml's
/// `get_scale_min_k4`: for `j < 4` the low 6 bits of `scales[j]` and `scales[j + 4]`;
/// for `j >= 4` a nibble of `scales[j + 4]` (low: scale, high: min) completed by the
/// top 2 bits of `scales[j - 4]` and `scales[j]` respectively.
#[inline(always)]
pub fn scale_min(scales: &[u8], j: usize) -> (u8, u8) {
    if j < 4 {
        (scales[j] & 63, scales[j + 4] & 63)
    } else {
        (
            (scales[j + 4] & 0x0F) | ((scales[j - 4] >> 6) << 4),
            (scales[j + 4] >> 4) | ((scales[j] >> 6) << 4),
        )
    }
}

/// Packs 8 scales and 8 mins (each < 64) into 12 bytes, the inverse of [`scale_min`].
pub fn pack_scale_min(sc: &[u8; 8], m: &[u8; 8]) -> [u8; 12] {
    let mut out = [0u8; 12];
    for j in 0..4 {
        out[j] = sc[j] | ((sc[j + 4] >> 4) << 6);
        out[j + 4] = m[j] | ((m[j + 4] >> 4) << 6);
        out[j + 8] = (sc[j + 4] & 0x0F) | ((m[j + 4] & 0x0F) << 4);
    }
    out
}

/// Dequantizes whole blocks. Panics unless `src` is exactly `dst.len() / 256` blocks.
pub fn dequantize(src: &[u8], dst: &mut [f32]) {
    let (blocks, out) = blocks_to_values::<TYPE_SIZE, BLOCK_SIZE>(src, dst);
    for (b, o) in blocks.iter().zip(out) {
        let d = f16_at(b, 0);
        let dmin = f16_at(b, 2);
        let scales = &b[4..16];
        let qs = &b[16..144];
        for (c, (pair, q32)) in o.chunks_exact_mut(64).zip(qs.chunks_exact(32)).enumerate() {
            let (sc0, m0) = scale_min(scales, 2 * c);
            let (sc1, m1) = scale_min(scales, 2 * c + 1);
            let d0 = d * sc0 as f32;
            let m0 = dmin * m0 as f32;
            let d1 = d * sc1 as f32;
            let m1 = dmin * m1 as f32;
            let (lo, hi) = pair.split_at_mut(32);
            for ((l, h), &q) in lo.iter_mut().zip(hi.iter_mut()).zip(q32) {
                *l = d0 * (q & 0x0F) as f32 - m0;
                *h = d1 * (q >> 4) as f32 - m1;
            }
        }
    }
}

/// Quantizes whole blocks: each sub-block of 32 gets the scale and min of least
/// squared error weighted by `rms + |x|` ([`make_qkx_quants`]); both are quantized to 6
/// bits against the largest of the block. Panics unless `dst` is exactly
/// `src.len() / 256` blocks.
pub fn quantize(src: &[f32], dst: &mut [u8]) {
    const SEARCH: Qkx = Qkx {
        rmin: -1.0,
        rdelta: 0.1,
        nstep: 20,
        use_mad: false,
    };
    let (values, out) = values_to_blocks::<TYPE_SIZE, BLOCK_SIZE>(src, dst);
    for (x, b) in values.iter().zip(out) {
        let mut levels = [0u8; QK_K];
        let head = scales_and_mins(x, None, 15, &SEARCH, &mut levels);
        b[0..16].copy_from_slice(&head);
        pack_nibbles(&levels, &mut b[16..144]);
    }
}

/// Quantizes whole blocks, element `i`'s squared error weighted by
/// `importance[i] * sqrt(sigma2 + x[i]²)` (`sigma2`: twice the super-block's mean
/// square): each sub-block's scale and min by [`make_qkx_quants`], then the 8 scales and
/// the 8 mins each to 6 bits by [`make_qp_quants`], weighted by their sub-blocks' total
/// weight. Panics unless `dst` is exactly `src.len() / 256` blocks and `importance` is as
/// long as `src`.
pub fn quantize_weighted(src: &[f32], importance: &[f32], dst: &mut [u8]) {
    assert_eq!(importance.len(), src.len(), "one importance per value");
    let (values, out) = values_to_blocks::<TYPE_SIZE, BLOCK_SIZE>(src, dst);
    let importance = importance.as_chunks::<BLOCK_SIZE>().0;
    for ((x, imp), b) in values.iter().zip(importance).zip(out) {
        let mut levels = [0u8; QK_K];
        let head = scales_and_mins(x, Some(imp), 15, &WEIGHTED_SEARCH, &mut levels);
        b[0..16].copy_from_slice(&head);
        pack_nibbles(&levels, &mut b[16..144]);
    }
}

/// The sub-block search of the importance-weighted Q4_K and Q5_K quantizers.
pub(super) const WEIGHTED_SEARCH: Qkx = Qkx {
    rmin: -0.9,
    rdelta: 0.05,
    nstep: 36,
    use_mad: false,
};

/// The first 16 bytes of a Q4_K or Q5_K block of `x` with levels `0..=nmax` (`d`, `dmin`,
/// the packed 6-bit scales and mins), as ggml finds them, and every element's level in
/// `levels`. Without importances each sub-block of 32 is weighted by `rms + |x|` and its
/// scale and min are quantized against the block's largest; with them, by
/// `importance * sqrt(sigma2 + x²)` (`sigma2` twice the block's mean square), the scales
/// and mins quantized by [`make_qp_quants`]. Elements get the nearest level of their
/// decoded scale and min, except in a sub-block whose decoded scale is 0, which keeps
/// the levels of the search.
pub(super) fn scales_and_mins(
    x: &[f32; QK_K],
    importance: Option<&[f32; QK_K]>,
    nmax: i32,
    search: &Qkx,
    levels: &mut [u8; QK_K],
) -> [u8; 16] {
    let mut laux = [0u8; 32];
    let (mut scales, mut mins, mut sw) = ([0f32; 8], [0f32; 8], [0f32; 8]);
    let sigma2 = 2.0 * sum_squares(x) / QK_K as f32;
    for (j, (sub, l)) in x
        .chunks_exact(32)
        .zip(levels.chunks_exact_mut(32))
        .enumerate()
    {
        let mut w = [0f32; 32];
        match importance {
            Some(imp) => imatrix_weights(sub, &imp[32 * j..32 * j + 32], sigma2, &mut w),
            None => {
                let av_x = (sum_squares(sub) / 32.0).sqrt();
                for (w, &v) in w.iter_mut().zip(sub) {
                    *w = av_x + v.abs();
                }
            }
        }
        sw[j] = w.iter().sum();
        (scales[j], mins[j]) = make_qkx_quants(nmax, sub, &w, l, &mut laux, search);
    }
    let (mut ls, mut lm) = ([0u8; 8], [0u8; 8]);
    let (d, dmin) = if importance.is_some() {
        (
            make_qp_quants(63, &scales, &sw, &mut ls),
            make_qp_quants(63, &mins, &sw, &mut lm),
        )
    } else {
        let max_scale = scales.iter().fold(0f32, |m, &s| if s > m { s } else { m });
        let max_min = mins.iter().fold(0f32, |m, &s| if s > m { s } else { m });
        let inv_scale = if max_scale > 0.0 {
            63.0 / max_scale
        } else {
            0.0
        };
        let inv_min = if max_min > 0.0 { 63.0 / max_min } else { 0.0 };
        for j in 0..8 {
            ls[j] = (nearest_int(inv_scale * scales[j]) as u8).min(63);
            lm[j] = (nearest_int(inv_min * mins[j]) as u8).min(63);
        }
        (max_scale / 63.0, max_min / 63.0)
    };
    let mut head = [0u8; 16];
    head[0..2].copy_from_slice(&f16_bytes(d));
    head[2..4].copy_from_slice(&f16_bytes(dmin));
    head[4..16].copy_from_slice(&pack_scale_min(&ls, &lm));
    let (d, dmin) = (f16_round(d), f16_round(dmin));
    for (j, (sub, l)) in x
        .chunks_exact(32)
        .zip(levels.chunks_exact_mut(32))
        .enumerate()
    {
        let (sc, m) = scale_min(&head[4..16], j);
        let dd = d * sc as f32;
        if dd == 0.0 {
            continue;
        }
        let dm = dmin * m as f32;
        for (l, &v) in l.iter_mut().zip(sub) {
            *l = nearest_int((v + dm) / dd).clamp(0, nmax) as u8;
        }
    }
    head
}

/// Packs 256 levels (each < 16) into Q4_K's 128 bytes of nibbles.
fn pack_nibbles(levels: &[u8; QK_K], qs: &mut [u8]) {
    for (c, q32) in qs.chunks_exact_mut(32).enumerate() {
        let (lo, hi) = levels[64 * c..64 * c + 64].split_at(32);
        for ((q, &l), &h) in q32.iter_mut().zip(lo).zip(hi) {
            *q = l | (h << 4);
        }
    }
}
