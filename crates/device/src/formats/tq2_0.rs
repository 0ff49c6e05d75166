//! TQ2_0: 256 ternary elements in 66 bytes, 2 bits each.
//!
//! | bytes  | meaning                                                            |
//! |--------|--------------------------------------------------------------------|
//! | 0..64  | `qs[32c + j]`: bits `2l..2l+2` are element `128c + 32l + j`        |
//! | 64..66 | `d`, f16 scale                                                     |
//!
//! Element value: `d * (q - 1)` with `q` the 2-bit field (3 does not occur in files
//! llama.cpp writes; it reads as `2d`).

use super::tq1_0::ternary;
use super::{blocks_to_values, f16_at, f16_bytes, values_to_blocks, WeightFormat, QK_K};
use gguf::GgmlType;

/// Elements per block.
pub const BLOCK_SIZE: usize = QK_K;
/// Bytes per block.
pub const TYPE_SIZE: usize = 66;

/// TQ2_0's row in [`super::FORMATS`].
pub const FORMAT: WeightFormat = WeightFormat {
    ty: GgmlType::TQ2_0,
    block_size: BLOCK_SIZE,
    type_size: TYPE_SIZE,
    scales: &[64],
    other_scales: None,
    dequantize,
    quantize: Some(quantize),
    quantize_weighted: None,
};

/// The 2-bit field of element `e` (0..256) of block `b`.
#[inline(always)]
pub fn field(b: &[u8], e: usize) -> u8 {
    (b[32 * (e / 128) + e % 32] >> (2 * ((e / 32) % 4))) & 3
}

/// Dequantizes whole blocks. Panics unless `src` is exactly `dst.len() / 256` blocks.
pub fn dequantize(src: &[u8], dst: &mut [f32]) {
    let (blocks, out) = blocks_to_values::<TYPE_SIZE, BLOCK_SIZE>(src, dst);
    for (b, o) in blocks.iter().zip(out) {
        let d = f16_at(b, 64);
        for (e, o) in o.iter_mut().enumerate() {
            *o = d * (field(b, e) as i8 - 1) as f32;
        }
    }
}

/// Quantizes whole blocks as ggml's `quantize_row_tq2_0_ref`.
/// Panics unless `dst` is exactly `src.len() / 256` blocks.
pub fn quantize(src: &[f32], dst: &mut [u8]) {
    let (values, out) = values_to_blocks::<TYPE_SIZE, BLOCK_SIZE>(src, dst);
    for (x, b) in values.iter().zip(out) {
        let (d, t) = ternary(x);
        b[64..66].copy_from_slice(&f16_bytes(d));
        b[..64].fill(0);
        for (e, &t) in t.iter().enumerate() {
            b[32 * (e / 128) + e % 32] |= (t & 3) << (2 * ((e / 32) % 4));
        }
    }
}
