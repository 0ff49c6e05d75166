//! Q5_K: 256 elements in 176 bytes, 8 sub-blocks of 32 with 6-bit scales and mins.
//!
//! | bytes   | meaning                                                              |
//! |---------|----------------------------------------------------------------------|
//! | 0..2    | `d`, f16 super-block scale                                           |
//! | 2..4    | `dmin`, f16 super-block min scale                                    |
//! | 4..16   | `scales`: 8 6-bit scales and mins, packed as in Q4_K ([`super::q4_k::scale_min`]) |
//! | 16..48  | `qh`: bit `j` of `qh[l]` is bit 4 of element `32j + l`               |
//! | 48..176 | `qs`: low 4 bits of element `64c + l` are the low nibble of `qs[32c + l]`, of element `64c + 32 + l` the high nibble |
//!
//! Element value, with `j` its sub-block (`element / 32`):
//! `(d * sc[j]) * q - (dmin * m[j])`, each product rounded, then the difference.
//!
//! The quantizers are ggml's (`quantize_row_q5_K_ref`, and `quantize_row_q5_K_impl`
//! with importances), bit for bit; they share Q4_K's search
//! ([`super::q4_k::scales_and_mins`]) with 32 levels.

use super::kquants::Qkx;
use super::q4_k::{scale_min, scales_and_mins, WEIGHTED_SEARCH};
use super::{blocks_to_values, f16_at, values_to_blocks, WeightFormat, QK_K};
use gguf::GgmlType;

/// Elements per block.
pub const BLOCK_SIZE: usize = QK_K;
/// Bytes per block.
pub const TYPE_SIZE: usize = 176;

/// Q5_K's row in [`super::FORMATS`].
pub const FORMAT: WeightFormat = WeightFormat {
    ty: GgmlType::Q5_K,
    block_size: BLOCK_SIZE,
    type_size: TYPE_SIZE,
    scales: &[0, 2],
    other_scales: None,
    dequantize,
    quantize: Some(quantize),
    quantize_weighted: Some(quantize_weighted),
};

/// Dequantizes whole blocks. Panics unless `src` is exactly `dst.len() / 256` blocks.
pub fn dequantize(src: &[u8], dst: &mut [f32]) {
    let (blocks, out) = blocks_to_values::<TYPE_SIZE, BLOCK_SIZE>(src, dst);
    for (b, o) in blocks.iter().zip(out) {
        let d = f16_at(b, 0);
        let dmin = f16_at(b, 2);
        let scales = &b[4..16];
        let qh = &b[16..48];
        let qs = &b[48..176];
        for (c, (pair, q32)) in o.chunks_exact_mut(64).zip(qs.chunks_exact(32)).enumerate() {
            let (sc0, m0) = scale_min(scales, 2 * c);
            let (sc1, m1) = scale_min(scales, 2 * c + 1);
            let d0 = d * sc0 as f32;
            let m0 = dmin * m0 as f32;
            let d1 = d * sc1 as f32;
            let m1 = dmin * m1 as f32;
            let (bit0, bit1) = (1u8 << (2 * c), 1u8 << (2 * c + 1));
            let (lo, hi) = pair.split_at_mut(32);
            for (((l, h), &q), &hb) in lo.iter_mut().zip(hi.iter_mut()).zip(q32).zip(qh) {
                let ql = (q & 0x0F) | if hb & bit0 != 0 { 16 } else { 0 };
                let qu = (q >> 4) | if hb & bit1 != 0 { 16 } else { 0 };
                *l = d0 * ql as f32 - m0;
                *h = d1 * qu as f32 - m1;
            }
        }
    }
}

/// Quantizes whole blocks: each sub-block of 32 gets the scale and min of least
/// squared error weighted by `rms + |x|`; both are quantized to 6 bits against the
/// largest of the block. Panics unless `dst` is exactly `src.len() / 256` blocks.
pub fn quantize(src: &[f32], dst: &mut [u8]) {
    const SEARCH: Qkx = Qkx {
        rmin: -0.5,
        rdelta: 0.1,
        nstep: 15,
        use_mad: false,
    };
    let (values, out) = values_to_blocks::<TYPE_SIZE, BLOCK_SIZE>(src, dst);
    for (x, b) in values.iter().zip(out) {
        let mut levels = [0u8; QK_K];
        let head = scales_and_mins(x, None, 31, &SEARCH, &mut levels);
        b[0..16].copy_from_slice(&head);
        pack_levels(&levels, b);
    }
}

/// Quantizes whole blocks, element `i`'s squared error weighted by
/// `importance[i] * sqrt(sigma2 + x[i]²)` (`sigma2`: twice the super-block's mean
/// square), as Q4_K's weighted quantizer does. Panics unless `dst` is exactly
/// `src.len() / 256` blocks and `importance` is as long as `src`.
pub fn quantize_weighted(src: &[f32], importance: &[f32], dst: &mut [u8]) {
    assert_eq!(importance.len(), src.len(), "one importance per value");
    let (values, out) = values_to_blocks::<TYPE_SIZE, BLOCK_SIZE>(src, dst);
    let importance = importance.as_chunks::<BLOCK_SIZE>().0;
    for ((x, imp), b) in values.iter().zip(importance).zip(out) {
        let mut levels = [0u8; QK_K];
        let head = scales_and_mins(x, Some(imp), 31, &WEIGHTED_SEARCH, &mut levels);
        b[0..16].copy_from_slice(&head);
        pack_levels(&levels, b);
    }
}

/// Packs 256 levels (each < 32) into the `qh` and `qs` of block `b`.
fn pack_levels(levels: &[u8; QK_K], b: &mut [u8]) {
    let (qh, qs) = b[16..176].split_at_mut(32);
    qh.fill(0);
    for (c, q32) in qs.chunks_exact_mut(32).enumerate() {
        let (lo, hi) = levels[64 * c..64 * c + 64].split_at(32);
        for (i, q) in q32.iter_mut().enumerate() {
            qh[i] |= (lo[i] >> 4) << (2 * c) | (hi[i] >> 4) << (2 * c + 1);
            *q = (lo[i] & 0x0F) | (hi[i] & 0x0F) << 4;
        }
    }
}
