//! F16: block size 1, 2 bytes per element.
//!
//! | bytes | meaning                          |
//! |-------|----------------------------------|
//! | 0..2  | the value, IEEE binary16, LE     |
//!
//! Widening is exact. A NaN stays NaN, but its payload may be quieted when the CPU
//! converts with F16C (numpy keeps signalling NaNs signalling). Narrowing rounds to
//! nearest even and overflows to infinity, as numpy's `astype(np.float16)` does.

use super::{blocks_to_values, values_to_blocks, WeightFormat};
use gguf::GgmlType;
use half::f16;
use half::slice::HalfFloatSliceExt;

/// Elements per block.
pub const BLOCK_SIZE: usize = 1;
/// Bytes per block.
pub const TYPE_SIZE: usize = 2;

/// F16's row in [`super::FORMATS`].
pub const FORMAT: WeightFormat = WeightFormat {
    ty: GgmlType::F16,
    block_size: BLOCK_SIZE,
    type_size: TYPE_SIZE,
    scales: &[],
    other_scales: None,
    dequantize,
    quantize: Some(quantize),
    quantize_weighted: None,
};

/// Values converted per batch through the vectorized slice conversion of `half`.
const CHUNK: usize = 64;

/// Decodes `src` (2 bytes per value) into `dst`. Panics unless `src.len() == 2 * dst.len()`.
pub fn dequantize(src: &[u8], dst: &mut [f32]) {
    let (blocks, out) = blocks_to_values::<TYPE_SIZE, BLOCK_SIZE>(src, dst);
    let out = out.as_flattened_mut();
    let mut buf = [f16::ZERO; CHUNK];
    for (b, o) in blocks.chunks(CHUNK).zip(out.chunks_mut(CHUNK)) {
        let buf = &mut buf[..b.len()];
        for (h, bytes) in buf.iter_mut().zip(b) {
            *h = f16::from_bits(u16::from_le_bytes(*bytes));
        }
        buf.convert_to_f32_slice(o);
    }
}

/// Encodes `src` into `dst` (2 bytes per value). Panics unless `dst.len() == 2 * src.len()`.
pub fn quantize(src: &[f32], dst: &mut [u8]) {
    let (values, out) = values_to_blocks::<TYPE_SIZE, BLOCK_SIZE>(src, dst);
    let values = values.as_flattened();
    let mut buf = [f16::ZERO; CHUNK];
    for (v, o) in values.chunks(CHUNK).zip(out.chunks_mut(CHUNK)) {
        let buf = &mut buf[..v.len()];
        buf.convert_from_f32_slice(v);
        for (bytes, h) in o.iter_mut().zip(buf.iter()) {
            *bytes = h.to_bits().to_le_bytes();
        }
    }
}
