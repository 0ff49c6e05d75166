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
    quantize_weighted: None,
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

/// Quantizes whole blocks by plain round-to-nearest (no search, unlike llama.cpp):
/// each sub-block gets `scale = (max - min') / 15` and `min = -min'` with
/// `min' = min(0, smallest element)`; these are quantized to 6 bits against
/// `d = max scale / 63` and `dmin = max min / 63`, and each element then to the
/// nearest of the 16 levels the decoder will produce.
/// Panics unless `dst` is exactly `src.len() / 256` blocks.
pub fn quantize(src: &[f32], dst: &mut [u8]) {
    let (values, out) = values_to_blocks::<TYPE_SIZE, BLOCK_SIZE>(src, dst);
    for (x, b) in values.iter().zip(out) {
        let mut scales = [0f32; 8];
        let mut mins = [0f32; 8];
        for (j, sub) in x.chunks_exact(32).enumerate() {
            let (min, max) = super::q4_1::min_max(sub);
            let min = min.min(0.0);
            scales[j] = (max - min) / 15.0;
            mins[j] = -min;
        }
        let max_scale = scales.iter().fold(0f32, |a, &s| a.max(s));
        let max_min = mins.iter().fold(0f32, |a, &m| a.max(m));
        let (ls, d) = quantize_6bit(&scales, max_scale);
        let (lm, dmin) = quantize_6bit(&mins, max_min);
        b[0..2].copy_from_slice(&f16_bytes(d));
        b[2..4].copy_from_slice(&f16_bytes(dmin));
        b[4..16].copy_from_slice(&pack_scale_min(&ls, &lm));
        let (d, dmin) = (f16_round(d), f16_round(dmin));
        let mut levels = [0u8; QK_K];
        for (j, (sub, lv)) in x
            .chunks_exact(32)
            .zip(levels.chunks_exact_mut(32))
            .enumerate()
        {
            let dd = d * ls[j] as f32;
            let dm = dmin * lm[j] as f32;
            if dd == 0.0 {
                continue;
            }
            for (l, &v) in lv.iter_mut().zip(sub) {
                *l = ((v + dm) / dd).round().clamp(0.0, 15.0) as u8;
            }
        }
        for (c, q32) in b[16..144].chunks_exact_mut(32).enumerate() {
            let (lo, hi) = levels[64 * c..64 * c + 64].split_at(32);
            for ((q, &l), &h) in q32.iter_mut().zip(lo).zip(hi) {
                *q = l | (h << 4);
            }
        }
    }
}

/// Quantizes non-negative `v` to 6-bit integers against the super-block scale
/// `max / 63`, which is returned with them.
fn quantize_6bit(v: &[f32; 8], max: f32) -> ([u8; 8], f32) {
    let inv = if max > 0.0 { 63.0 / max } else { 0.0 };
    let mut q = [0u8; 8];
    for (q, &x) in q.iter_mut().zip(v) {
        *q = (inv * x).round().min(63.0) as u8;
    }
    (q, max / 63.0)
}
