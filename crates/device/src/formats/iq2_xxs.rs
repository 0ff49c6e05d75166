//! IQ2_XXS: 256 elements in 66 bytes, 8 groups of 32 values, each group 4 entries of
//! [`IQ2XXS`] (8 values each) with their signs and one 4-bit scale.
//!
//! | bytes          | meaning                                                         |
//! |----------------|-----------------------------------------------------------------|
//! | 0..2           | `d`, f16 super-block scale                                      |
//! | 2..66          | 8 groups of 8 bytes; group `g` at `2 + 8g`:                     |
//! | +0..+4         | byte `i`: the grid entry of elements `32g + 8i..32g + 8i + 8`   |
//! | +4..+8         | u32 `aux`: bits `7i..7i + 7` the [`KSIGNS`] index of entry `i`, bits 28..32 the scale `ls` |
//!
//! Element value, with `db = (d * (0.5 + ls)) * 0.25` its group's scale, `grid` its
//! entry and `sign` ±1 by bit `j` of the entry's sign pattern: `(db * grid[j]) * sign`.

use super::grids::{sign, u32_at, IQ2XXS, KSIGNS};
use super::{blocks_to_values, f16_at, WeightFormat, QK_K};
use gguf::GgmlType;

/// Elements per block.
pub const BLOCK_SIZE: usize = QK_K;
/// Bytes per block.
pub const TYPE_SIZE: usize = 66;

/// IQ2_XXS's row in [`super::FORMATS`].
pub const FORMAT: WeightFormat = WeightFormat {
    ty: GgmlType::IQ2_XXS,
    block_size: BLOCK_SIZE,
    type_size: TYPE_SIZE,
    scales: &[0],
    other_scales: None,
    dequantize,
    quantize: None,
    quantize_weighted: None,
};

/// The scale of group `g` (0..8) of block `b` whose `d` is given.
#[inline(always)]
pub fn group_scale(b: &[u8], d: f32, g: usize) -> f32 {
    d * (0.5 + (u32_at(b, 6 + 8 * g) >> 28) as f32) * 0.25
}

/// Entry `e` (0..32, elements `8e..8e + 8`) of block `b`: its grid values and sign pattern.
#[inline(always)]
pub fn entry(b: &[u8], e: usize) -> (&'static [i8; 8], u8) {
    let (g, i) = (e / 4, e % 4);
    let aux = u32_at(b, 6 + 8 * g);
    let grid = &IQ2XXS[b[2 + 8 * g + i] as usize];
    (grid, KSIGNS[(aux >> (7 * i)) as usize & 127])
}

/// Dequantizes whole blocks. Panics unless `src` is exactly `dst.len() / 256` blocks.
pub fn dequantize(src: &[u8], dst: &mut [f32]) {
    let (blocks, out) = blocks_to_values::<TYPE_SIZE, BLOCK_SIZE>(src, dst);
    for (b, o) in blocks.iter().zip(out) {
        let d = f16_at(b, 0);
        for (e, o8) in o.chunks_exact_mut(8).enumerate() {
            let db = group_scale(b, d, e / 4);
            let (grid, signs) = entry(b, e);
            for (j, v) in o8.iter_mut().enumerate() {
                *v = db * grid[j] as f32 * sign(signs, j);
            }
        }
    }
}
