//! IQ1_M: 256 elements in 56 bytes, 32 entries of [`IQ1S`] (8 values in {-1, 0, 1}) with
//! a shift of ±1/8 each, and a 3-bit scale per 16 values. It has no f16 field: `d`'s 16
//! bits are the top nibbles of the four scale words.
//!
//! | bytes  | meaning                                                                 |
//! |--------|-------------------------------------------------------------------------|
//! | 0..32  | byte `e`: the low 8 bits of the grid entry of elements `8e..8e + 8`     |
//! | 32..48 | nibble `e % 2` of byte `32 + e / 2` for entry `e`: bits 0..3 are bits 8..11 of its index, bit 3 the sign of its shift |
//! | 48..56 | u16 `sc[t]`: bits `3i..3i + 3` the scale `ls` of elements `64t + 16i..+16`, bits 12..16 bits `4t..4t + 4` of `d` (an f16) |
//!
//! Element value, with `dl = d * (2 ls + 1)` its scale, `grid` its entry and `delta`
//! 0.125 (shift bit clear) or -0.125: `dl * (grid[j] + delta)`.

use super::grids::{u16_at, IQ1S};
use super::iq1_s::DELTA;
use super::{blocks_to_values, OtherScales, WeightFormat, QK_K};
use gguf::GgmlType;

/// Elements per block.
pub const BLOCK_SIZE: usize = QK_K;
/// Bytes per block.
pub const TYPE_SIZE: usize = 56;

/// IQ1_M's row in [`super::FORMATS`]: no f16 field (see [`d`] and [`set_d`]).
pub const FORMAT: WeightFormat = WeightFormat {
    ty: GgmlType::IQ1_M,
    block_size: BLOCK_SIZE,
    type_size: TYPE_SIZE,
    scales: &[],
    other_scales: Some(&OtherScales {
        valid: |b| d(b).is_finite(),
        set: |b, x| set_d(b, half::f16::from_f32(x).to_bits()),
    }),
    dequantize,
    quantize: None,
    quantize_weighted: None,
};

/// The f16 bits of `d` of block `b`, from the top nibbles of its scale words.
#[inline(always)]
pub fn d_bits(b: &[u8]) -> u16 {
    (0..4).fold(0, |d, t| d | ((u16_at(b, 48 + 2 * t) >> 12) << (4 * t)))
}

/// `d` of block `b`, widened exactly to f32.
#[inline(always)]
pub fn d(b: &[u8]) -> f32 {
    half::f16::from_bits(d_bits(b)).to_f32()
}

/// Sets `d` of block `b` to the f16 `bits`, leaving its scales as they are.
pub fn set_d(b: &mut [u8], bits: u16) {
    for t in 0..4 {
        let nibble = ((bits >> (4 * t)) & 15) as u8;
        b[49 + 2 * t] = (b[49 + 2 * t] & 0x0F) | (nibble << 4);
    }
}

/// The 3-bit scale `ls` of elements `16s..16s + 16` (`s` in 0..16) of block `b`.
#[inline(always)]
pub fn scale(b: &[u8], s: usize) -> u16 {
    (u16_at(b, 48 + 2 * (s / 4)) >> (3 * (s % 4))) & 7
}

/// Entry `e` (0..32, elements `8e..8e + 8`) of block `b`: its grid values and the sign
/// (±1) of its shift.
#[inline(always)]
pub fn entry(b: &[u8], e: usize) -> (&'static [i8; 8], i8) {
    let h = (b[32 + e / 2] >> (4 * (e % 2))) & 15;
    let grid = &IQ1S[b[e] as usize | (((h & 7) as usize) << 8)];
    (grid, if h & 8 == 0 { 1 } else { -1 })
}

/// Dequantizes whole blocks. Panics unless `src` is exactly `dst.len() / 256` blocks.
pub fn dequantize(src: &[u8], dst: &mut [f32]) {
    let (blocks, out) = blocks_to_values::<TYPE_SIZE, BLOCK_SIZE>(src, dst);
    for (b, o) in blocks.iter().zip(out) {
        let d = d(b);
        for (e, o8) in o.chunks_exact_mut(8).enumerate() {
            let dl = d * (2 * scale(b, e / 2) + 1) as f32;
            let (grid, s) = entry(b, e);
            let delta = DELTA * s as f32;
            for (v, &g) in o8.iter_mut().zip(grid) {
                *v = dl * (g as f32 + delta);
            }
        }
    }
}
