//! IQ4_XS: 256 elements in 136 bytes, IQ4_NL's levels with a 6-bit scale per 32.
//!
//! | bytes  | meaning                                                                |
//! |--------|------------------------------------------------------------------------|
//! | 0..2   | `d`, f16 super-block scale                                             |
//! | 2..4   | `scales_h`, u16: bits `2j..2j+2` are the high bits of sub-block `j`'s scale |
//! | 4..8   | `scales_l`: nibble `j % 2` of byte `j / 2` is the low 4 bits of scale `j` |
//! | 8..136 | 8 sub-blocks of 16 bytes, each laid out as IQ4_NL's `qs`               |
//!
//! Element value, with `j` its sub-block (`element / 32`) and `ls` its 6-bit scale:
//! `(d * (ls - 32)) * KVALUES[q]`.

use super::iq4_nl::nibbles;
use super::{blocks_to_values, f16_at, WeightFormat, QK_K};
use gguf::GgmlType;

/// Elements per block.
pub const BLOCK_SIZE: usize = QK_K;
/// Bytes per block.
pub const TYPE_SIZE: usize = 136;

/// IQ4_XS's row in [`super::FORMATS`].
pub const FORMAT: WeightFormat = WeightFormat {
    ty: GgmlType::IQ4_XS,
    block_size: BLOCK_SIZE,
    type_size: TYPE_SIZE,
    scales: &[0],
    other_scales: None,
    dequantize,
    quantize: None,
};

/// The signed scale (`ls - 32`, in -32..=31) of sub-block `j` (0..8) of block `b`.
#[inline(always)]
pub fn scale(b: &[u8], j: usize) -> i32 {
    let high = (u16::from_le_bytes([b[2], b[3]]) >> (2 * j)) & 3;
    let low = (b[4 + j / 2] >> (4 * (j % 2))) & 15;
    (low as i32 | (high as i32) << 4) - 32
}

/// Dequantizes whole blocks. Panics unless `src` is exactly `dst.len() / 256` blocks.
pub fn dequantize(src: &[u8], dst: &mut [f32]) {
    let (blocks, out) = blocks_to_values::<TYPE_SIZE, BLOCK_SIZE>(src, dst);
    for (b, o) in blocks.iter().zip(out) {
        let d = f16_at(b, 0);
        for (j, (o, qs)) in o
            .chunks_exact_mut(32)
            .zip(b[8..].chunks_exact(16))
            .enumerate()
        {
            nibbles(d * scale(b, j) as f32, qs, o);
        }
    }
}
