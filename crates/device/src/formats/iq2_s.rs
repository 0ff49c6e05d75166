//! IQ2_S: 256 elements in 82 bytes, 32 entries of [`IQ2S`] (8 values each) with 8 sign
//! bits each, and a 4-bit scale per 16 values.
//!
//! | bytes  | meaning                                                                 |
//! |--------|-------------------------------------------------------------------------|
//! | 0..2   | `d`, f16 super-block scale                                              |
//! | 2..34  | byte `e`: the low 8 bits of the grid entry of elements `8e..8e + 8`     |
//! | 34..66 | byte `e`: the signs of entry `e`, bit `j` set for a negative value `j`  |
//! | 66..74 | `qh`: bits `2(e % 4)..+2` of byte `e / 4` are bits 8..10 of entry `e`'s index |
//! | 74..82 | scales, as IQ2_XS's (see [`super::iq2_xs::nibble_scale`])               |
//!
//! Element value, with `db = (d * (0.5 + ls)) * 0.25` its scale and `grid` its entry:
//! `(db * grid[j]) * sign`, `sign` ±1 by the sign bit.

use super::grids::{sign, IQ2S};
use super::iq2_xs::{nibble_scale, scale_of};
use super::{blocks_to_values, f16_at, WeightFormat, QK_K};
use gguf::GgmlType;

/// Elements per block.
pub const BLOCK_SIZE: usize = QK_K;
/// Bytes per block.
pub const TYPE_SIZE: usize = 82;
/// Offset of the scale bytes.
pub const SCALES: usize = 74;

/// IQ2_S's row in [`super::FORMATS`].
pub const FORMAT: WeightFormat = WeightFormat {
    ty: GgmlType::IQ2_S,
    block_size: BLOCK_SIZE,
    type_size: TYPE_SIZE,
    scales: &[0],
    other_scales: None,
    dequantize,
    quantize: None,
    quantize_weighted: None,
};

/// Entry `e` (0..32, elements `8e..8e + 8`) of block `b`: its grid values and sign bits.
#[inline(always)]
pub fn entry(b: &[u8], e: usize) -> (&'static [i8; 8], u8) {
    let high = ((b[66 + e / 4] >> (2 * (e % 4))) & 3) as usize;
    (&IQ2S[b[2 + e] as usize | (high << 8)], b[34 + e])
}

/// Dequantizes whole blocks. Panics unless `src` is exactly `dst.len() / 256` blocks.
pub fn dequantize(src: &[u8], dst: &mut [f32]) {
    let (blocks, out) = blocks_to_values::<TYPE_SIZE, BLOCK_SIZE>(src, dst);
    for (b, o) in blocks.iter().zip(out) {
        let d = f16_at(b, 0);
        for (e, o8) in o.chunks_exact_mut(8).enumerate() {
            let db = scale_of(d, nibble_scale(b, SCALES, e / 2));
            let (grid, signs) = entry(b, e);
            for (j, v) in o8.iter_mut().enumerate() {
                *v = db * grid[j] as f32 * sign(signs, j);
            }
        }
    }
}
