//! Q4_1: 32 elements in 20 bytes, asymmetric 4-bit.
//!
//! | bytes  | meaning                                                        |
//! |--------|----------------------------------------------------------------|
//! | 0..2   | `d`, f16 scale                                                 |
//! | 2..4   | `m`, f16 offset (the block minimum)                            |
//! | 4..20  | `qs[j]`: low nibble is element `j`, high nibble element `j+16` |
//!
//! Element value: `(d * q) + m`, rounded after the product and after the sum.

use super::{blocks_to_values, f16_at, f16_bytes, values_to_blocks, WeightFormat};
use gguf::GgmlType;

/// Elements per block.
pub const BLOCK_SIZE: usize = 32;
/// Bytes per block.
pub const TYPE_SIZE: usize = 20;

/// Q4_1's row in [`super::FORMATS`].
pub const FORMAT: WeightFormat = WeightFormat {
    ty: GgmlType::Q4_1,
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
        let qs = &b[4..20];
        let (lo, hi) = o.split_at_mut(16);
        for ((l, h), &q) in lo.iter_mut().zip(hi.iter_mut()).zip(qs) {
            *l = d * (q & 0x0F) as f32 + m;
            *h = d * (q >> 4) as f32 + m;
        }
    }
}

/// Quantizes whole blocks like ggml's `quantize_row_q4_1_ref`: `d = (max - min) / 15`,
/// `m = min`, `q = min(15, trunc((x - min) / d + 0.5))`.
/// Panics unless `dst` is exactly `src.len() / 32` blocks.
pub fn quantize(src: &[f32], dst: &mut [u8]) {
    let (values, out) = values_to_blocks::<TYPE_SIZE, BLOCK_SIZE>(src, dst);
    for (x, b) in values.iter().zip(out) {
        let (min, max) = min_max(x);
        let d = (max - min) / 15.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        b[0..2].copy_from_slice(&f16_bytes(d));
        b[2..4].copy_from_slice(&f16_bytes(min));
        let (lo, hi) = x.split_at(16);
        for ((q, &l), &h) in b[4..20].iter_mut().zip(lo).zip(hi) {
            let ql = (((l - min) * id + 0.5) as u8).min(15);
            let qh = (((h - min) * id + 0.5) as u8).min(15);
            *q = ql | (qh << 4);
        }
    }
}

/// The smallest and largest element of a non-empty block.
#[inline]
pub(super) fn min_max(x: &[f32]) -> (f32, f32) {
    let mut min = x[0];
    let mut max = x[0];
    for &v in &x[1..] {
        if v < min {
            min = v;
        }
        if v > max {
            max = v;
        }
    }
    (min, max)
}
