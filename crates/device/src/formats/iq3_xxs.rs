//! IQ3_XXS: 256 elements in 98 bytes, 64 entries of [`IQ3XXS`] (4 values each), signs
//! per 8 values and a 4-bit scale per 32.
//!
//! | bytes  | meaning                                                                  |
//! |--------|--------------------------------------------------------------------------|
//! | 0..2   | `d`, f16 super-block scale                                               |
//! | 2..66  | byte `e`: the grid entry of elements `4e..4e + 4`                        |
//! | 66..98 | u32 `aux[g]` for elements `32g..32g + 32`: bits `7i..7i + 7` the [`KSIGNS`] index of elements `32g + 8i..+8`, bits 28..32 the scale `ls` |
//!
//! Element value, with `db = (d * (0.5 + ls)) * 0.5` its group's scale, `grid` its entry
//! and `sign` ±1 by its bit of the sign pattern: `(db * grid[j]) * sign`.

use super::grids::{sign, u32_at, IQ3XXS, KSIGNS};
use super::{blocks_to_values, f16_at, WeightFormat, QK_K};
use gguf::GgmlType;

/// Elements per block.
pub const BLOCK_SIZE: usize = QK_K;
/// Bytes per block.
pub const TYPE_SIZE: usize = 98;

/// IQ3_XXS's row in [`super::FORMATS`].
pub const FORMAT: WeightFormat = WeightFormat {
    ty: GgmlType::IQ3_XXS,
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
    d * (0.5 + (u32_at(b, 66 + 4 * g) >> 28) as f32) * 0.5
}

/// Elements `8k..8k + 8` (`k` in 0..32) of block `b`: the grid values of their two entries
/// and their sign pattern.
#[inline(always)]
pub fn octet(b: &[u8], k: usize) -> ([&'static [i8; 4]; 2], u8) {
    let aux = u32_at(b, 66 + 4 * (k / 4));
    let grids = [
        &IQ3XXS[b[2 + 2 * k] as usize],
        &IQ3XXS[b[3 + 2 * k] as usize],
    ];
    (grids, KSIGNS[(aux >> (7 * (k % 4))) as usize & 127])
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
