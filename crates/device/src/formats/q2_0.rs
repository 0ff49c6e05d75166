//! Q2_0: 64 elements in 18 bytes, 2 bits each.
//!
//! | bytes | meaning                                                      |
//! |-------|--------------------------------------------------------------|
//! | 0..2  | `d`, f16 scale                                               |
//! | 2..18 | bits `2(j % 4)..` of byte `2 + j / 4`: the field `q` of element `j` |
//!
//! Element value: `(q - 1) * d`, so `-d, 0, d, 2d`.

use super::{blocks_to_values, f16_at, f16_bytes, values_to_blocks, WeightFormat};
use gguf::GgmlType;

/// Elements per block.
pub const BLOCK_SIZE: usize = 64;
/// Bytes per block.
pub const TYPE_SIZE: usize = 18;

/// Q2_0's row in [`super::FORMATS`].
pub const FORMAT: WeightFormat = WeightFormat {
    ty: GgmlType::Q2_0,
    block_size: BLOCK_SIZE,
    type_size: TYPE_SIZE,
    scales: &[0],
    other_scales: None,
    dequantize,
    quantize: Some(quantize),
    quantize_weighted: None,
};

/// The field `q` (0..4) of element `j` of block `b`.
#[inline(always)]
pub fn field(b: &[u8], j: usize) -> u8 {
    (b[2 + j / 4] >> (2 * (j % 4))) & 3
}

/// Dequantizes whole blocks. Panics unless `src` is exactly `dst.len() / 64` blocks.
pub fn dequantize(src: &[u8], dst: &mut [f32]) {
    let (blocks, out) = blocks_to_values::<TYPE_SIZE, BLOCK_SIZE>(src, dst);
    for (b, o) in blocks.iter().zip(out) {
        let d = f16_at(b, 0);
        for (j, o) in o.iter_mut().enumerate() {
            *o = (field(b, j) as i32 - 1) as f32 * d;
        }
    }
}

/// Quantizes whole blocks as ggml's `quantize_row_q2_0_ref`: `d` the largest magnitude,
/// `q = clamp(round(x / d) + 1, 0, 3)` (halves away from zero).
/// Panics unless `dst` is exactly `src.len() / 64` blocks.
pub fn quantize(src: &[f32], dst: &mut [u8]) {
    let (values, out) = values_to_blocks::<TYPE_SIZE, BLOCK_SIZE>(src, dst);
    for (x, b) in values.iter().zip(out) {
        let d = x
            .iter()
            .fold(0f32, |a, v| if v.abs() > a { v.abs() } else { a });
        let id = if d > 0.0 { 1.0 / d } else { 0.0 };
        b[0..2].copy_from_slice(&f16_bytes(d));
        b[2..].fill(0);
        for (j, &v) in x.iter().enumerate() {
            let q = ((v * id).round() as i32 + 1).clamp(0, 3) as u8;
            b[2 + j / 4] |= q << (2 * (j % 4));
        }
    }
}
