//! Q4_0: 32 elements in 18 bytes, symmetric 4-bit.
//!
//! | bytes  | meaning                                                        |
//! |--------|----------------------------------------------------------------|
//! | 0..2   | `d`, f16 scale                                                 |
//! | 2..18  | `qs[j]`: low nibble is element `j`, high nibble element `j+16` |
//!
//! Element value: `d * (q - 8)` with `q` the unsigned nibble.

use super::{blocks_to_values, f16_at, f16_bytes, values_to_blocks, WeightFormat};
use gguf::GgmlType;

/// Elements per block.
pub const BLOCK_SIZE: usize = 32;
/// Bytes per block.
pub const TYPE_SIZE: usize = 18;

/// Q4_0's row in [`super::FORMATS`].
pub const FORMAT: WeightFormat = WeightFormat {
    ty: GgmlType::Q4_0,
    block_size: BLOCK_SIZE,
    type_size: TYPE_SIZE,
    scales: &[0],
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
        let qs = &b[2..18];
        let (lo, hi) = o.split_at_mut(16);
        for ((l, h), &q) in lo.iter_mut().zip(hi.iter_mut()).zip(qs) {
            *l = d * ((q & 0x0F) as i32 - 8) as f32;
            *h = d * ((q >> 4) as i32 - 8) as f32;
        }
    }
}

/// Quantizes whole blocks like ggml's `quantize_row_q4_0_ref`: `d = -max / 8` where
/// `max` is the first element of largest magnitude, `q = min(15, trunc(x / d + 8.5))`.
/// Panics unless `dst` is exactly `src.len() / 32` blocks.
pub fn quantize(src: &[f32], dst: &mut [u8]) {
    let (values, out) = values_to_blocks::<TYPE_SIZE, BLOCK_SIZE>(src, dst);
    for (x, b) in values.iter().zip(out) {
        let max = signed_absmax(x);
        let d = max / -8.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        b[0..2].copy_from_slice(&f16_bytes(d));
        let (lo, hi) = x.split_at(16);
        for ((q, &l), &h) in b[2..18].iter_mut().zip(lo).zip(hi) {
            let ql = ((l * id + 8.5) as u8).min(15);
            let qh = ((h * id + 8.5) as u8).min(15);
            *q = ql | (qh << 4);
        }
    }
}

/// The first element of largest magnitude (0.0 for an all-zero block).
#[inline]
pub(super) fn signed_absmax(x: &[f32]) -> f32 {
    let mut amax = 0.0f32;
    let mut max = 0.0f32;
    for &v in x {
        if amax < v.abs() {
            amax = v.abs();
            max = v;
        }
    }
    max
}
