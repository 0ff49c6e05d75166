//! Q3_K: 256 elements in 110 bytes, 16 sub-blocks of 16 with signed 6-bit scales.
//!
//! | bytes    | meaning                                                              |
//! |----------|----------------------------------------------------------------------|
//! | 0..32    | `hmask`: bit `k` of `hmask[l]` is the high bit of element `32k + l`  |
//! | 32..96   | `qs`: low 2 bits of element `128h + 32k + l` are bits `2k..2k+2` of `qs[32h + l]` |
//! | 96..108  | `scales`: 16 6-bit values, see below                                 |
//! | 108..110 | `d`, f16 super-block scale                                           |
//!
//! Scale `s` (0..16): low 4 bits are the low nibble of `scales[s]` for `s < 8`, the
//! high nibble of `scales[s - 8]` otherwise; high 2 bits are bits `2(s/4)..2(s/4)+2`
//! of `scales[8 + s % 4]`; the stored value minus 32 is the signed scale.
//!
//! Element value: `(d * scale) * q` with `q = low2 - 4` when the high bit is clear
//! and `q = low2` when it is set.
//!
//! The quantizers are ggml's (`quantize_row_q3_K_ref`, and `quantize_row_q3_K_impl`
//! with importances), bit for bit.

use super::kquants::{
    imatrix_weights, make_q3_quants, make_qx_quants, nearest_int, signed_max, sum_squares,
};
use super::{blocks_to_values, f16_at, f16_bytes, f16_round, values_to_blocks, WeightFormat, QK_K};
use gguf::GgmlType;

/// Elements per block.
pub const BLOCK_SIZE: usize = QK_K;
/// Bytes per block.
pub const TYPE_SIZE: usize = 110;

/// Q3_K's row in [`super::FORMATS`].
pub const FORMAT: WeightFormat = WeightFormat {
    ty: GgmlType::Q3_K,
    block_size: BLOCK_SIZE,
    type_size: TYPE_SIZE,
    scales: &[108],
    other_scales: None,
    dequantize,
    quantize: Some(quantize),
    quantize_weighted: Some(quantize_weighted),
};

/// Dequantizes whole blocks. Panics unless `src` is exactly `dst.len() / 256` blocks.
pub fn dequantize(src: &[u8], dst: &mut [f32]) {
    let (blocks, out) = blocks_to_values::<TYPE_SIZE, BLOCK_SIZE>(src, dst);
    for (b, o) in blocks.iter().zip(out) {
        let hmask: &[u8; 32] = b[0..32].try_into().unwrap();
        let qs = b[32..96].as_chunks::<32>().0;
        let scales = &b[96..108];
        let d = f16_at(b, 108);
        for (h, (o128, q32)) in o.as_chunks_mut::<128>().0.iter_mut().zip(qs).enumerate() {
            let [o0, o1, o2, o3] = o128.as_chunks_mut::<32>().0 else {
                unreachable!()
            };
            for half in 0..2 {
                let dl = [0, 1, 2, 3].map(|k| d * scale(scales, 8 * h + 2 * k + half) as f32);
                for l in 16 * half..16 * half + 16 {
                    let q = q32[l] as i32;
                    // Bit k of `m` is set where element k of this column has no -4 offset.
                    let m = (hmask[l] >> (4 * h)) as i32;
                    o0[l] = dl[0] * ((q & 3) - (((m & 1) ^ 1) << 2)) as f32;
                    o1[l] = dl[1] * (((q >> 2) & 3) - ((((m >> 1) & 1) ^ 1) << 2)) as f32;
                    o2[l] = dl[2] * (((q >> 4) & 3) - ((((m >> 2) & 1) ^ 1) << 2)) as f32;
                    o3[l] = dl[3] * ((q >> 6) - ((((m >> 3) & 1) ^ 1) << 2)) as f32;
                }
            }
        }
    }
}

/// The signed 6-bit scale of sub-block `s` (0..16) from the 12 packed bytes.
#[inline(always)]
fn scale(scales: &[u8], s: usize) -> i32 {
    let low = if s < 8 {
        scales[s] & 0x0F
    } else {
        scales[s - 8] >> 4
    };
    let high = (scales[8 + s % 4] >> (2 * (s / 4))) & 3;
    (low | (high << 4)) as i32 - 32
}

/// Quantizes whole blocks: each sub-block of 16 gets its scale from [`make_q3_quants`]
/// (levels -4..4, `x²`-weighted); the scales are quantized to 6 bits against
/// `d = -(largest-magnitude scale) / 32`. Panics unless `dst` is exactly
/// `src.len() / 256` blocks.
pub fn quantize(src: &[f32], dst: &mut [u8]) {
    let (values, out) = values_to_blocks::<TYPE_SIZE, BLOCK_SIZE>(src, dst);
    for (x, b) in values.iter().zip(out) {
        let mut levels = [0i8; QK_K];
        let mut scales = [0f32; 16];
        for (s, (sub, l)) in scales
            .iter_mut()
            .zip(x.chunks_exact(16).zip(levels.chunks_exact_mut(16)))
        {
            *s = make_q3_quants(4, sub, l);
        }
        let (max_scale, _) = signed_max(&scales);
        let mut ls = [0u8; 16];
        let mut d = 0.0;
        if max_scale != 0.0 {
            let iscale = -32.0 / max_scale;
            for (l, &s) in ls.iter_mut().zip(&scales) {
                *l = (nearest_int(iscale * s).clamp(-32, 31) + 32) as u8;
            }
            d = 1.0 / iscale;
        }
        write_block(x, &ls, d, &mut levels, b);
    }
}

/// Quantizes whole blocks, element `i`'s squared error weighted by
/// `importance[i] * sqrt(sigma2 + x[i]²)` (`sigma2`: twice the super-block's mean
/// square): each sub-block's scale by [`make_qx_quants`], then the 16 scales to 6 bits
/// by the same search weighted by their sub-blocks' total weight. Panics unless `dst` is
/// exactly `src.len() / 256` blocks and `importance` is as long as `src`.
pub fn quantize_weighted(src: &[f32], importance: &[f32], dst: &mut [u8]) {
    assert_eq!(importance.len(), src.len(), "one importance per value");
    let (values, out) = values_to_blocks::<TYPE_SIZE, BLOCK_SIZE>(src, dst);
    let importance = importance.as_chunks::<BLOCK_SIZE>().0;
    for ((x, imp), b) in values.iter().zip(importance).zip(out) {
        let sigma2 = 2.0 * sum_squares(x) / QK_K as f32;
        let mut levels = [0i8; QK_K];
        let (mut scales, mut sw) = ([0f32; 16], [0f32; 16]);
        let subs = x.chunks_exact(16).zip(imp.chunks_exact(16));
        for (j, ((sub, q), l)) in subs.zip(levels.chunks_exact_mut(16)).enumerate() {
            let mut w = [0f32; 16];
            imatrix_weights(sub, q, sigma2, &mut w);
            sw[j] = w.iter().sum();
            scales[j] = make_qx_quants(4, sub, &w, l);
        }
        let mut ls = [0i8; 16];
        let d = make_qx_quants(32, &scales, &sw, &mut ls);
        write_block(x, &ls.map(|l| l as u8), d, &mut levels, b);
    }
}

/// Writes block `b` of values `x` with its 6-bit scales `ls` (stored values, 32 meaning
/// 0) and its `d` (before f16 rounding): each element gets the nearest level of -4..4
/// of the decoded scale, except in a sub-block whose decoded scale is 0, which keeps
/// its `levels` from the search (stored as `level + 4`, as ggml's do).
fn write_block(x: &[f32], ls: &[u8; 16], d: f32, levels: &mut [i8; QK_K], b: &mut [u8]) {
    let scales = &mut b[96..108];
    scales.fill(0);
    for (j, &l) in ls.iter().enumerate() {
        scales[j % 8] |= (l & 0x0F) << (4 * (j / 8));
        scales[8 + j % 4] |= (l >> 4) << (2 * (j / 4));
    }
    b[108..110].copy_from_slice(&f16_bytes(d));
    let d = f16_round(d);
    for (j, (sub, l)) in x
        .chunks_exact(16)
        .zip(levels.chunks_exact_mut(16))
        .enumerate()
    {
        let dd = d * scale(&b[96..108], j) as f32;
        if dd == 0.0 {
            continue;
        }
        for (l, &v) in l.iter_mut().zip(sub) {
            *l = (nearest_int(v / dd).clamp(-4, 3) + 4) as i8;
        }
    }
    let (hmask, rest) = b.split_at_mut(32);
    hmask.fill(0);
    for (j, l) in levels.iter_mut().enumerate() {
        if *l > 3 {
            hmask[j % 32] |= 1 << (j / 32);
            *l -= 4;
        }
    }
    for (h, q32) in rest[..64].chunks_exact_mut(32).enumerate() {
        let lv = &levels[128 * h..128 * h + 128];
        for (i, q) in q32.iter_mut().enumerate() {
            *q = (lv[i] | (lv[i + 32] << 2) | (lv[i + 64] << 4) | (lv[i + 96] << 6)) as u8;
        }
    }
}
