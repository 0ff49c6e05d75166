//! F32: block size 1, 4 bytes per element.
//!
//! | bytes | meaning                          |
//! |-------|----------------------------------|
//! | 0..4  | the value, IEEE binary32, LE     |
//!
//! Both directions copy bits unchanged (NaN payloads included).

use super::{blocks_to_values, values_to_blocks, WeightFormat};
use gguf::GgmlType;

/// Elements per block.
pub const BLOCK_SIZE: usize = 1;
/// Bytes per block.
pub const TYPE_SIZE: usize = 4;

/// F32's row in [`super::FORMATS`].
pub const FORMAT: WeightFormat = WeightFormat {
    ty: GgmlType::F32,
    block_size: BLOCK_SIZE,
    type_size: TYPE_SIZE,
    scales: &[],
    other_scales: None,
    dequantize,
    quantize: Some(quantize),
    quantize_weighted: None,
};

/// Decodes `src` (4 bytes per value) into `dst`. Panics unless `src.len() == 4 * dst.len()`.
pub fn dequantize(src: &[u8], dst: &mut [f32]) {
    let (blocks, out) = blocks_to_values::<TYPE_SIZE, BLOCK_SIZE>(src, dst);
    for (b, o) in blocks.iter().zip(out) {
        o[0] = f32::from_le_bytes(*b);
    }
}

/// Encodes `src` into `dst` (4 bytes per value). Panics unless `dst.len() == 4 * src.len()`.
pub fn quantize(src: &[f32], dst: &mut [u8]) {
    let (values, out) = values_to_blocks::<TYPE_SIZE, BLOCK_SIZE>(src, dst);
    for (v, o) in values.iter().zip(out) {
        *o = v[0].to_le_bytes();
    }
}
