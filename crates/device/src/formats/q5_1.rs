//! Q5_1: 32 elements in 24 bytes, asymmetric 5-bit.
//!
//! | bytes  | meaning                                                             |
//! |--------|---------------------------------------------------------------------|
//! | 0..2   | `d`, f16 scale                                                      |
//! | 2..4   | `m`, f16 offset (the block minimum)                                 |
//! | 4..8   | `qh`, u32 LE: bit `j` is bit 4 of element `j`                       |
//! | 8..24  | `qs[j]`: low nibble is bits 0..4 of element `j`, high nibble of `j+16` |
//!
//! Element value: `(d * q) + m`, rounded after the product and after the sum.

use super::q4_1::min_max;
use super::q5_0::BITS;
use super::{blocks_to_values, f16_at, f16_bytes, values_to_blocks, WeightFormat};
use gguf::GgmlType;

/// Elements per block.
pub const BLOCK_SIZE: usize = 32;
/// Bytes per block.
pub const TYPE_SIZE: usize = 24;

/// Q5_1's row in [`super::FORMATS`].
pub const FORMAT: WeightFormat = WeightFormat {
    ty: GgmlType::Q5_1,
    block_size: BLOCK_SIZE,
    type_size: TYPE_SIZE,
    scales: &[0, 2],
    other_scales: None,
    dequantize,
    quantize: Some(quantize),
    quantize_weighted: None,
};

/// Dequantizes whole blocks. Panics unless `src` is exactly `dst.len() / 32` blocks.
pub fn dequantize(src: &[u8], dst: &mut [f32]) {
    let (blocks, out) = blocks_to_values::<TYPE_SIZE, BLOCK_SIZE>(src, dst);
    for (b, o) in blocks.iter().zip(out) {
        let d = f16_at(b, 0);
        let m = f16_at(b, 2);
        let qh = u32::from_le_bytes([b[4], b[5], b[6], b[7]]);
        let qs = &b[8..24];
        let (lo, hi) = o.split_at_mut(16);
        for (((l, h), &q), &bit) in lo.iter_mut().zip(hi.iter_mut()).zip(qs).zip(&BITS) {
            let bl = if qh & bit != 0 { 16 } else { 0 };
            let bh = if (qh >> 16) & bit != 0 { 16 } else { 0 };
            *l = d * ((q & 0x0F) as u32 | bl) as f32 + m;
            *h = d * ((q >> 4) as u32 | bh) as f32 + m;
        }
    }
}

/// Quantizes whole blocks like ggml's `quantize_row_q5_1_ref`: `d = (max - min) / 31`,
/// `m = min`, `q = min(31, trunc((x - min) / d + 0.5))`.
/// Panics unless `dst` is exactly `src.len() / 32` blocks.
pub fn quantize(src: &[f32], dst: &mut [u8]) {
    let (values, out) = values_to_blocks::<TYPE_SIZE, BLOCK_SIZE>(src, dst);
    for (x, b) in values.iter().zip(out) {
        let (min, max) = min_max(x);
        let d = (max - min) / 31.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        b[0..2].copy_from_slice(&f16_bytes(d));
        b[2..4].copy_from_slice(&f16_bytes(min));
        let mut qh = 0u32;
        let (lo, hi) = x.split_at(16);
        for (j, ((q, &l), &h)) in b[8..24].iter_mut().zip(lo).zip(hi).enumerate() {
            let ql = (((l - min) * id + 0.5) as u8).min(31);
            let qhi = (((h - min) * id + 0.5) as u8).min(31);
            *q = (ql & 0x0F) | ((qhi & 0x0F) << 4);
            qh |= ((ql >> 4) as u32) << j | ((qhi >> 4) as u32) << (j + 16);
        }
        b[4..8].copy_from_slice(&qh.to_le_bytes());
    }
}
