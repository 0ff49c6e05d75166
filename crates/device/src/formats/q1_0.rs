//! Q1_0: 128 elements in 18 bytes, one sign bit each.
//!
//! | bytes | meaning                                           |
//! |-------|---------------------------------------------------|
//! | 0..2  | `d`, f16 scale                                    |
//! | 2..18 | bit `j % 8` of byte `2 + j / 8`: element `j` is `+d` when set, `-d` otherwise |

use super::{blocks_to_values, f16_at, f16_bytes, values_to_blocks, WeightFormat};
use gguf::GgmlType;

/// Elements per block.
pub const BLOCK_SIZE: usize = 128;
/// Bytes per block.
pub const TYPE_SIZE: usize = 18;

/// Q1_0's row in [`super::FORMATS`].
pub const FORMAT: WeightFormat = WeightFormat {
    ty: GgmlType::Q1_0,
    block_size: BLOCK_SIZE,
    type_size: TYPE_SIZE,
    scales: &[0],
    other_scales: None,
    dequantize,
    quantize: Some(quantize),
    quantize_weighted: None,
};

/// Dequantizes whole blocks. Panics unless `src` is exactly `dst.len() / 128` blocks.
pub fn dequantize(src: &[u8], dst: &mut [f32]) {
    let (blocks, out) = blocks_to_values::<TYPE_SIZE, BLOCK_SIZE>(src, dst);
    for (b, o) in blocks.iter().zip(out) {
        let d = f16_at(b, 0);
        for (j, o) in o.iter_mut().enumerate() {
            *o = if (b[2 + j / 8] >> (j % 8)) & 1 == 1 {
                d
            } else {
                -d
            };
        }
    }
}

/// Quantizes whole blocks as ggml's `quantize_row_q1_0_ref`: `d` the mean magnitude
/// (summed in order, in f32), each element's sign (set for `x >= 0`).
/// Panics unless `dst` is exactly `src.len() / 128` blocks.
pub fn quantize(src: &[f32], dst: &mut [u8]) {
    let (values, out) = values_to_blocks::<TYPE_SIZE, BLOCK_SIZE>(src, dst);
    for (x, b) in values.iter().zip(out) {
        let d = x.iter().fold(0f32, |s, v| s + v.abs()) / BLOCK_SIZE as f32;
        b[0..2].copy_from_slice(&f16_bytes(d));
        b[2..].fill(0);
        for (j, &v) in x.iter().enumerate() {
            if v >= 0.0 {
                b[2 + j / 8] |= 1 << (j % 8);
            }
        }
    }
}
