//! IQ3_S: 256 elements in 110 bytes, 64 entries of [`IQ3S`] (4 values each), a sign bit
//! per value and a 4-bit scale per 32.
//!
//! | bytes   | meaning                                                                 |
//! |---------|-------------------------------------------------------------------------|
//! | 0..2    | `d`, f16 super-block scale                                              |
//! | 2..66   | byte `e`: the low 8 bits of the grid entry of elements `4e..4e + 4`     |
//! | 66..74  | `qh`: bit `e % 8` of byte `e / 8` is bit 8 of entry `e`'s index         |
//! | 74..106 | byte `k`: the signs of elements `8k..8k + 8`, bit `j` set for a negative value |
//! | 106..110 | scales: the low nibble of byte `t` is `ls` of elements `64t..64t + 32`, the high nibble of the next 32 |
//!
//! Element value, with `db = d * (1 + 2 ls)` its scale and `grid` its entry:
//! `(db * grid[j]) * sign`, `sign` ±1 by the sign bit.

use super::grids::{sign, IQ3S};
use super::{blocks_to_values, f16_at, WeightFormat, QK_K};
use gguf::GgmlType;

/// Elements per block.
pub const BLOCK_SIZE: usize = QK_K;
/// Bytes per block.
pub const TYPE_SIZE: usize = 110;

/// IQ3_S's row in [`super::FORMATS`].
pub const FORMAT: WeightFormat = WeightFormat {
    ty: GgmlType::IQ3_S,
    block_size: BLOCK_SIZE,
    type_size: TYPE_SIZE,
    scales: &[0],
    other_scales: None,
    dequantize,
    quantize: None,
    quantize_weighted: None,
};

/// The scale of group `g` (0..8, elements `32g..32g + 32`) of block `b` whose `d` is given.
#[inline(always)]
pub fn group_scale(b: &[u8], d: f32, g: usize) -> f32 {
    let ls = (b[106 + g / 2] >> (4 * (g % 2))) & 15;
    d * (1 + 2 * ls) as f32
}

/// Elements `8k..8k + 8` (`k` in 0..32) of block `b`: the grid values of their two entries
/// and their sign bits.
#[inline(always)]
pub fn octet(b: &[u8], k: usize) -> ([&'static [i8; 4]; 2], u8) {
    let grid = |e: usize| {
        let high = ((b[66 + e / 8] >> (e % 8)) & 1) as usize;
        &IQ3S[b[2 + e] as usize | (high << 8)]
    };
    ([grid(2 * k), grid(2 * k + 1)], b[74 + k])
}

/// Dequantizes whole blocks. Panics unless `src` is exactly `dst.len() / 256` blocks.
pub fn dequantize(src: &[u8], dst: &mut [f32]) {
    let (blocks, out) = blocks_to_values::<TYPE_SIZE, BLOCK_SIZE>(src, dst);
    for (b, o) in blocks.iter().zip(out) {
        let d = f16_at(b, 0);
        for (k, o8) in o.chunks_exact_mut(8).enumerate() {
            let db = group_scale(b, d, k / 4);
            let (grids, signs) = octet(b, k);
            for (j, v) in o8.iter_mut().enumerate() {
                *v = db * grids[j / 4][j % 4] as f32 * sign(signs, j);
            }
        }
    }
}
