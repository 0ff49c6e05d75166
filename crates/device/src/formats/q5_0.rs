//! Q5_0: 32 elements in 22 bytes, symmetric 5-bit.
//!
//! | bytes  | meaning                                                             |
//! |--------|---------------------------------------------------------------------|
//! | 0..2   | `d`, f16 scale                                                      |
//! | 2..6   | `qh`, u32 LE: bit `j` is bit 4 of element `j`                       |
//! | 6..22  | `qs[j]`: low nibble is bits 0..4 of element `j`, high nibble of `j+16` |
//!
//! Element value: `d * (q - 16)` with `q` the unsigned 5-bit value.

use super::q4_0::signed_absmax;
use super::{blocks_to_values, f16_at, f16_bytes, values_to_blocks, WeightFormat};
use gguf::GgmlType;

/// Elements per block.
pub const BLOCK_SIZE: usize = 32;
/// Bytes per block.
pub const TYPE_SIZE: usize = 22;

/// Q5_0's row in [`super::FORMATS`].
pub const FORMAT: WeightFormat = WeightFormat {
    ty: GgmlType::Q5_0,
    block_size: BLOCK_SIZE,
    type_size: TYPE_SIZE,
    scales: &[0],
    other_scales: None,
    dequantize,
    quantize: Some(quantize),
    quantize_weighted: None,
};

/// `1 << j` for lane `j`: a constant vector, so the bit tests vectorize.
pub(super) const BITS: [u32; 16] = {
    let mut b = [0u32; 16];
    let mut j = 0;
    while j < 16 {
        b[j] = 1 << j;
        j += 1;
    }
    b
};

/// Dequantizes whole blocks. Panics unless `src` is exactly `dst.len() / 32` blocks.
pub fn dequantize(src: &[u8], dst: &mut [f32]) {
    let (blocks, out) = blocks_to_values::<TYPE_SIZE, BLOCK_SIZE>(src, dst);
    for (b, o) in blocks.iter().zip(out) {
        let d = f16_at(b, 0);
        let qh = u32::from_le_bytes([b[2], b[3], b[4], b[5]]);
        let qs = &b[6..22];
        let (lo, hi) = o.split_at_mut(16);
        for (((l, h), &q), &bit) in lo.iter_mut().zip(hi.iter_mut()).zip(qs).zip(&BITS) {
            let bl = if qh & bit != 0 { 16 } else { 0 };
            let bh = if (qh >> 16) & bit != 0 { 16 } else { 0 };
            *l = d * (((q & 0x0F) as i32 | bl) - 16) as f32;
            *h = d * (((q >> 4) as i32 | bh) - 16) as f32;
        }
    }
}

/// Quantizes whole blocks like ggml's `quantize_row_q5_0_ref`: `d = -max / 16` where
/// `max` is the first element of largest magnitude, `q = min(31, trunc(x / d + 16.5))`.
/// Panics unless `dst` is exactly `src.len() / 32` blocks.
pub fn quantize(src: &[f32], dst: &mut [u8]) {
    let (values, out) = values_to_blocks::<TYPE_SIZE, BLOCK_SIZE>(src, dst);
    for (x, b) in values.iter().zip(out) {
        let max = signed_absmax(x);
        let d = max / -16.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        b[0..2].copy_from_slice(&f16_bytes(d));
        let mut qh = 0u32;
        let (lo, hi) = x.split_at(16);
        for (j, ((q, &l), &h)) in b[6..22].iter_mut().zip(lo).zip(hi).enumerate() {
            let ql = ((l * id + 16.5) as u8).min(31);
            let qhi = ((h * id + 16.5) as u8).min(31);
            *q = (ql & 0x0F) | ((qhi & 0x0F) << 4);
            qh |= ((ql >> 4) as u32) << j | ((qhi >> 4) as u32) << (j + 16);
        }
        b[2..6].copy_from_slice(&qh.to_le_bytes());
    }
}
