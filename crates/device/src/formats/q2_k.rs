//! Q2_K: 256 elements in 84 bytes, 16 sub-blocks of 16 with 4-bit scale and min.
//!
//! | bytes  | meaning                                                                |
//! |--------|------------------------------------------------------------------------|
//! | 0..16  | `scales[s]` for sub-block `s`: low nibble scale, high nibble min       |
//! | 16..80 | `qs`: element `128h + 32k + l` is bits `2k..2k+2` of `qs[32h + l]`     |
//! | 80..82 | `d`, f16 super-block scale                                             |
//! | 82..84 | `dmin`, f16 super-block min scale                                      |
//!
//! Element value, with `s` its sub-block (`element / 16`):
//! `(d * (scales[s] & 15)) * q - (dmin * (scales[s] >> 4))`, each product rounded.
//!
//! The quantizers are ggml's (`quantize_row_q2_K_ref`, and `quantize_row_q2_K_impl`
//! with importances), bit for bit.

use super::kquants::{
    imatrix_weights, make_qkx_quants, make_qp_quants, nearest_int, sum_squares, Qkx,
};
use super::{blocks_to_values, f16_at, f16_bytes, f16_round, values_to_blocks, WeightFormat, QK_K};
use gguf::GgmlType;

/// Elements per block.
pub const BLOCK_SIZE: usize = QK_K;
/// Bytes per block.
pub const TYPE_SIZE: usize = 84;

/// Q2_K's row in [`super::FORMATS`].
pub const FORMAT: WeightFormat = WeightFormat {
    ty: GgmlType::Q2_K,
    block_size: BLOCK_SIZE,
    type_size: TYPE_SIZE,
    scales: &[80, 82],
    other_scales: None,
    dequantize,
    quantize: Some(quantize),
    quantize_weighted: Some(quantize_weighted),
};

/// Dequantizes whole blocks. Panics unless `src` is exactly `dst.len() / 256` blocks.
pub fn dequantize(src: &[u8], dst: &mut [f32]) {
    let (blocks, out) = blocks_to_values::<TYPE_SIZE, BLOCK_SIZE>(src, dst);
    for (b, o) in blocks.iter().zip(out) {
        let d = f16_at(b, 80);
        let dmin = f16_at(b, 82);
        let scales = &b[0..16];
        let qs = b[16..80].as_chunks::<32>().0;
        for (h, (o128, q32)) in o.as_chunks_mut::<128>().0.iter_mut().zip(qs).enumerate() {
            let [o0, o1, o2, o3] = o128.as_chunks_mut::<32>().0 else {
                unreachable!()
            };
            for half in 0..2 {
                let sc = |k: usize| scales[8 * h + 2 * k + half];
                let dl = [0, 1, 2, 3].map(|k| d * (sc(k) & 0x0F) as f32);
                let ml = [0, 1, 2, 3].map(|k| dmin * (sc(k) >> 4) as f32);
                for l in 16 * half..16 * half + 16 {
                    let q = q32[l];
                    o0[l] = dl[0] * (q & 3) as f32 - ml[0];
                    o1[l] = dl[1] * ((q >> 2) & 3) as f32 - ml[1];
                    o2[l] = dl[2] * ((q >> 4) & 3) as f32 - ml[2];
                    o3[l] = dl[3] * (q >> 6) as f32 - ml[3];
                }
            }
        }
    }
}

/// Quantizes whole blocks: each sub-block of 16 gets the scale and min of least
/// `|x|`-weighted absolute error ([`make_qkx_quants`]); both are quantized to 4 bits
/// against the largest of the block. Panics unless `dst` is exactly `src.len() / 256`
/// blocks.
pub fn quantize(src: &[f32], dst: &mut [u8]) {
    const SEARCH: Qkx = Qkx {
        rmin: -0.5,
        rdelta: 0.1,
        nstep: 15,
        use_mad: true,
    };
    let (values, out) = values_to_blocks::<TYPE_SIZE, BLOCK_SIZE>(src, dst);
    for (x, b) in values.iter().zip(out) {
        let mut levels = [0u8; QK_K];
        let mut laux = [0u8; 16];
        let mut scales = [0f32; 16];
        let mut mins = [0f32; 16];
        for (j, (sub, l)) in x
            .chunks_exact(16)
            .zip(levels.chunks_exact_mut(16))
            .enumerate()
        {
            let w: [f32; 16] = std::array::from_fn(|i| sub[i].abs());
            (scales[j], mins[j]) = make_qkx_quants(3, sub, &w, l, &mut laux, &SEARCH);
        }
        let max_scale = scales.iter().fold(0f32, |m, &s| if s > m { s } else { m });
        let max_min = mins.iter().fold(0f32, |m, &s| if s > m { s } else { m });
        let mut packed = [0u8; 16];
        let (mut d, mut dmin) = (0.0, 0.0);
        if max_scale > 0.0 {
            let iscale = 15.0 / max_scale;
            for (p, &s) in packed.iter_mut().zip(&scales) {
                *p = nearest_int(iscale * s) as u8;
            }
            d = max_scale / 15.0;
        }
        if max_min > 0.0 {
            let iscale = 15.0 / max_min;
            for (p, &m) in packed.iter_mut().zip(&mins) {
                *p |= (nearest_int(iscale * m) << 4) as u8;
            }
            dmin = max_min / 15.0;
        }
        write_block(x, &packed, d, dmin, &mut levels, b);
    }
}

/// Quantizes whole blocks, element `i`'s squared error weighted by
/// `importance[i] * sqrt(sigma2 + x[i]²)` (`sigma2`: the super-block's mean square):
/// each sub-block's scale and min by [`make_qkx_quants`], then the 16 scales and the 16
/// mins each to 4 bits by [`make_qp_quants`], weighted by their sub-blocks' total
/// weight. Panics unless `dst` is exactly `src.len() / 256` blocks and `importance` is as
/// long as `src`.
pub fn quantize_weighted(src: &[f32], importance: &[f32], dst: &mut [u8]) {
    const SEARCH: Qkx = Qkx {
        rmin: -0.9,
        rdelta: 0.05,
        nstep: 36,
        use_mad: false,
    };
    assert_eq!(importance.len(), src.len(), "one importance per value");
    let (values, out) = values_to_blocks::<TYPE_SIZE, BLOCK_SIZE>(src, dst);
    let importance = importance.as_chunks::<BLOCK_SIZE>().0;
    for ((x, imp), b) in values.iter().zip(importance).zip(out) {
        let sigma2 = sum_squares(x) / QK_K as f32;
        let mut levels = [0u8; QK_K];
        let mut laux = [0u8; 16];
        let (mut scales, mut mins, mut sw) = ([0f32; 16], [0f32; 16], [0f32; 16]);
        let subs = x.chunks_exact(16).zip(imp.chunks_exact(16));
        for (j, ((sub, q), l)) in subs.zip(levels.chunks_exact_mut(16)).enumerate() {
            let mut w = [0f32; 16];
            imatrix_weights(sub, q, sigma2, &mut w);
            sw[j] = w.iter().sum();
            (scales[j], mins[j]) = make_qkx_quants(3, sub, &w, l, &mut laux, &SEARCH);
        }
        let (mut ls, mut lm) = ([0u8; 16], [0u8; 16]);
        let d = make_qp_quants(15, &scales, &sw, &mut ls);
        let dmin = make_qp_quants(15, &mins, &sw, &mut lm);
        let packed: [u8; 16] = std::array::from_fn(|j| ls[j] | (lm[j] << 4));
        write_block(x, &packed, d, dmin, &mut levels, b);
    }
}

/// Writes block `b` of values `x` with its packed 4-bit scales and mins and its `d` and
/// `dmin` (before f16 rounding): each element gets the nearest level of the decoded
/// scale and min, except in a sub-block whose decoded scale is 0, which keeps its
/// `levels` from the search (as ggml's do).
fn write_block(
    x: &[f32],
    packed: &[u8; 16],
    d: f32,
    dmin: f32,
    levels: &mut [u8; QK_K],
    b: &mut [u8],
) {
    b[0..16].copy_from_slice(packed);
    b[80..82].copy_from_slice(&f16_bytes(d));
    b[82..84].copy_from_slice(&f16_bytes(dmin));
    let (d, dmin) = (f16_round(d), f16_round(dmin));
    for ((sub, l), &sc) in x
        .chunks_exact(16)
        .zip(levels.chunks_exact_mut(16))
        .zip(packed)
    {
        let dd = d * (sc & 0x0F) as f32;
        if dd == 0.0 {
            continue;
        }
        let dm = dmin * (sc >> 4) as f32;
        for (l, &v) in l.iter_mut().zip(sub) {
            *l = nearest_int((v + dm) / dd).clamp(0, 3) as u8;
        }
    }
    for (h, q32) in b[16..80].chunks_exact_mut(32).enumerate() {
        let lv = &levels[128 * h..128 * h + 128];
        for (i, q) in q32.iter_mut().enumerate() {
            *q = lv[i] | (lv[i + 32] << 2) | (lv[i + 64] << 4) | (lv[i + 96] << 6);
        }
    }
}
