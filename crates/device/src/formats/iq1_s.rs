//! IQ1_S: 256 elements in 50 bytes, 32 entries of [`IQ1S`] (8 values in {-1, 0, 1}), a
//! 3-bit scale and a shift of ±1/8 per 32 values.
//!
//! | bytes  | meaning                                                                 |
//! |--------|-------------------------------------------------------------------------|
//! | 0..2   | `d`, f16 super-block scale                                              |
//! | 2..34  | byte `e`: the low 8 bits of the grid entry of elements `8e..8e + 8`     |
//! | 34..50 | u16 `qh[g]` for elements `32g..32g + 32`: bits `3i..3i + 3` are bits 8..11 of entry `4g + i`'s index, bits 12..15 the scale `ls`, bit 15 the sign of the shift |
//!
//! Element value, with `dl = d * (2 ls + 1)` its group's scale, `grid` its entry and
//! `delta` 0.125 (bit 15 clear) or -0.125: `dl * (grid[j] + delta)`.

use super::grids::{u16_at, IQ1S};
use super::{blocks_to_values, f16_at, WeightFormat, QK_K};
use gguf::GgmlType;

/// Elements per block.
pub const BLOCK_SIZE: usize = QK_K;
/// Bytes per block.
pub const TYPE_SIZE: usize = 50;
/// The shift of IQ1_S and IQ1_M, in units of the scale: `delta = DELTA * ±1`.
pub const DELTA: f32 = 0.125;

/// IQ1_S's row in [`super::FORMATS`].
pub const FORMAT: WeightFormat = WeightFormat {
    ty: GgmlType::IQ1_S,
    block_size: BLOCK_SIZE,
    type_size: TYPE_SIZE,
    scales: &[0],
    other_scales: None,
    dequantize,
    quantize: None,
    quantize_weighted: None,
};

/// Group `g` (0..8, elements `32g..32g + 32`) of block `b` whose `d` is given: its scale
/// `dl` and the sign (±1) of its shift.
#[inline(always)]
pub fn group(b: &[u8], d: f32, g: usize) -> (f32, i8) {
    let qh = u16_at(b, 34 + 2 * g);
    let dl = d * (2 * ((qh >> 12) & 7) + 1) as f32;
    (dl, if qh & 0x8000 == 0 { 1 } else { -1 })
}

/// The grid values of entry `e` (0..32, elements `8e..8e + 8`) of block `b`.
#[inline(always)]
pub fn entry(b: &[u8], e: usize) -> &'static [i8; 8] {
    let high = ((u16_at(b, 34 + 2 * (e / 4)) >> (3 * (e % 4))) & 7) as usize;
    &IQ1S[b[2 + e] as usize | (high << 8)]
}

/// Dequantizes whole blocks. Panics unless `src` is exactly `dst.len() / 256` blocks.
pub fn dequantize(src: &[u8], dst: &mut [f32]) {
    let (blocks, out) = blocks_to_values::<TYPE_SIZE, BLOCK_SIZE>(src, dst);
    for (b, o) in blocks.iter().zip(out) {
        let d = f16_at(b, 0);
        for (e, o8) in o.chunks_exact_mut(8).enumerate() {
            let (dl, s) = group(b, d, e / 4);
            let delta = DELTA * s as f32;
            for (v, &g) in o8.iter_mut().zip(entry(b, e)) {
                *v = dl * (g as f32 + delta);
            }
        }
    }
}
