//! IQ2_XS: 256 elements in 74 bytes, 32 entries of [`IQ2XS`] (8 values each) with their
//! signs, and a 4-bit scale per 16 values.
//!
//! | bytes  | meaning                                                                 |
//! |--------|-------------------------------------------------------------------------|
//! | 0..2   | `d`, f16 super-block scale                                              |
//! | 2..66  | u16 `q[e]` for elements `8e..8e + 8`: bits 0..9 the grid entry, bits 9..16 the [`KSIGNS`] index |
//! | 66..74 | scales: the low nibble of byte `t` is `ls` of elements `32t..32t + 16`, the high nibble of the next 16 |
//!
//! Element value, with `db = (d * (0.5 + ls)) * 0.25` its scale, `grid` its entry and
//! `sign` ±1 by bit `j` of the entry's sign pattern: `(db * grid[j]) * sign`.

use super::grids::{sign, u16_at, IQ2XS, KSIGNS};
use super::{blocks_to_values, f16_at, WeightFormat, QK_K};
use gguf::GgmlType;

/// Elements per block.
pub const BLOCK_SIZE: usize = QK_K;
/// Bytes per block.
pub const TYPE_SIZE: usize = 74;
/// Offset of the scale bytes.
pub const SCALES: usize = 66;

/// IQ2_XS's row in [`super::FORMATS`].
pub const FORMAT: WeightFormat = WeightFormat {
    ty: GgmlType::IQ2_XS,
    block_size: BLOCK_SIZE,
    type_size: TYPE_SIZE,
    scales: &[0],
    other_scales: None,
    dequantize,
    quantize: None,
    quantize_weighted: None,
};

/// The 4-bit scale `ls` of elements `16s..16s + 16` (`s` in 0..16) of a block whose scale
/// bytes start at `b[at]`; IQ2_S shares the layout.
#[inline(always)]
pub fn nibble_scale(b: &[u8], at: usize, s: usize) -> u8 {
    (b[at + s / 2] >> (4 * (s % 2))) & 15
}

/// The scale of the 16 values whose `ls` is given: `(d * (0.5 + ls)) * 0.25`.
#[inline(always)]
pub fn scale_of(d: f32, ls: u8) -> f32 {
    d * (0.5 + ls as f32) * 0.25
}

/// Entry `e` (0..32, elements `8e..8e + 8`) of block `b`: its grid values and sign pattern.
#[inline(always)]
pub fn entry(b: &[u8], e: usize) -> (&'static [i8; 8], u8) {
    let q = u16_at(b, 2 + 2 * e) as usize;
    (&IQ2XS[q & 511], KSIGNS[q >> 9])
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
