//! BF16: block size 1, 2 bytes per element.
//!
//! | bytes | meaning                                        |
//! |-------|------------------------------------------------|
//! | 0..2  | the upper 16 bits of an IEEE binary32, LE      |
//!
//! Widening shifts the bits up (exact, NaN payloads kept). Narrowing follows ggml's
//! `ggml_compute_fp32_to_bf16`: NaN becomes a quiet NaN with the same sign and upper
//! payload, everything else rounds to nearest even (overflowing to infinity).

use super::{blocks_to_values, values_to_blocks, WeightFormat};
use gguf::GgmlType;

/// Elements per block.
pub const BLOCK_SIZE: usize = 1;
/// Bytes per block.
pub const TYPE_SIZE: usize = 2;

/// BF16's row in [`super::FORMATS`].
pub const FORMAT: WeightFormat = WeightFormat {
    ty: GgmlType::BF16,
    block_size: BLOCK_SIZE,
    type_size: TYPE_SIZE,
    scales: &[],
    other_scales: None,
    dequantize,
    quantize: Some(quantize),
    quantize_weighted: None,
};

/// Decodes `src` (2 bytes per value) into `dst`. Panics unless `src.len() == 2 * dst.len()`.
pub fn dequantize(src: &[u8], dst: &mut [f32]) {
    let (blocks, out) = blocks_to_values::<TYPE_SIZE, BLOCK_SIZE>(src, dst);
    for (b, o) in blocks.iter().zip(out) {
        o[0] = f32::from_bits((u16::from_le_bytes(*b) as u32) << 16);
    }
}

/// Encodes `src` into `dst` (2 bytes per value). Panics unless `dst.len() == 2 * src.len()`.
pub fn quantize(src: &[f32], dst: &mut [u8]) {
    let (values, out) = values_to_blocks::<TYPE_SIZE, BLOCK_SIZE>(src, dst);
    for (v, o) in values.iter().zip(out) {
        *o = from_f32(v[0]).to_le_bytes();
    }
}

/// The bf16 bits nearest to `x` (ties to even; NaN quieted).
#[inline(always)]
pub fn from_f32(x: f32) -> u16 {
    let n = x.to_bits();
    if n & 0x7fff_ffff > 0x7f80_0000 {
        return ((n >> 16) | 0x40) as u16;
    }
    ((n as u64 + 0x7fff + ((n >> 16) & 1) as u64) >> 16) as u16
}
