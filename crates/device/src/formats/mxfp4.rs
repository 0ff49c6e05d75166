//! MXFP4 (OCP microscaling, E2M1 elements): 32 elements in 17 bytes.
//!
//! | bytes  | meaning                                                        |
//! |--------|----------------------------------------------------------------|
//! | 0      | `e`, E8M0 shared exponent                                      |
//! | 1..17  | `qs[j]`: low nibble is element `j`, high nibble element `j+16` |
//!
//! Element value: `half(e) * KVALUES[q]`, where `KVALUES` are the E2M1 values doubled
//! and `half(e) = 2^(e - 128)` (ggml's `GGML_E8M0_TO_FP32_HALF`, exact for every `e`;
//! `e = 0xFF`, NaN in the OCP format, is refused at load).

use super::{blocks_to_values, values_to_blocks, OtherScales, WeightFormat};
use gguf::GgmlType;

/// Elements per block.
pub const BLOCK_SIZE: usize = 32;
/// Bytes per block.
pub const TYPE_SIZE: usize = 17;

/// The E2M1 values doubled (MXFP4 and NVFP4): nibbles 8..16 are the negatives.
pub const KVALUES: [i8; 16] = [0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12];

/// MXFP4's row in [`super::FORMATS`].
pub const FORMAT: WeightFormat = WeightFormat {
    ty: GgmlType::MXFP4,
    block_size: BLOCK_SIZE,
    type_size: TYPE_SIZE,
    scales: &[],
    other_scales: Some(&OtherScales {
        valid: |b| b[0] != 0xFF,
        set: |b, x| b[0] = exponent(x),
    }),
    dequantize,
    quantize: Some(quantize),
    quantize_weighted: None,
};

/// `2^(e - 128)`: half the E8M0 value `e`, exact (subnormal for `e < 2`).
#[inline(always)]
pub fn half(e: u8) -> f32 {
    let bits = if e < 2 {
        0x0020_0000u32 << e
    } else {
        (e as u32 - 1) << 23
    };
    f32::from_bits(bits)
}

/// The shared exponent ggml gives a block whose largest magnitude is `amax`:
/// `floor(log2(amax)) - 2 + 127` (0 for `amax = 0`).
fn exponent(amax: f32) -> u8 {
    if amax > 0.0 {
        (amax.log2().floor() - 2.0 + 127.0) as u8
    } else {
        0
    }
}

/// Dequantizes whole blocks. Panics unless `src` is exactly `dst.len() / 32` blocks.
pub fn dequantize(src: &[u8], dst: &mut [f32]) {
    let (blocks, out) = blocks_to_values::<TYPE_SIZE, BLOCK_SIZE>(src, dst);
    for (b, o) in blocks.iter().zip(out) {
        fp4_nibbles(half(b[0]), &b[1..17], o);
    }
}

/// `o[j] = d * KVALUES[low nibble of qs[j]]` and `o[j + n]` from its high nibble, for the
/// `n = qs.len()` bytes.
pub(super) fn fp4_nibbles(d: f32, qs: &[u8], o: &mut [f32]) {
    let (lo, hi) = o.split_at_mut(qs.len());
    for ((l, h), &q) in lo.iter_mut().zip(hi.iter_mut()).zip(qs) {
        *l = d * KVALUES[(q & 0x0F) as usize] as f32;
        *h = d * KVALUES[(q >> 4) as usize] as f32;
    }
}

/// The index of the level of `KVALUES` nearest to `x / d` (the first of equals), as
/// ggml's `best_index_mxfp4`: errors `|KVALUES[i] * d - x|` compared in f32.
pub(super) fn best_index(x: f32, d: f32) -> u8 {
    let mut best = 0;
    let mut best_err = (KVALUES[0] as f32 * d - x).abs();
    for (i, &k) in KVALUES.iter().enumerate().skip(1) {
        let err = (k as f32 * d - x).abs();
        if err < best_err {
            best = i;
            best_err = err;
        }
    }
    best as u8
}

/// Quantizes whole blocks as ggml's `quantize_row_mxfp4_ref`: the exponent from the
/// largest magnitude, each element to its nearest level.
/// Panics unless `dst` is exactly `src.len() / 32` blocks.
pub fn quantize(src: &[f32], dst: &mut [u8]) {
    let (values, out) = values_to_blocks::<TYPE_SIZE, BLOCK_SIZE>(src, dst);
    for (x, b) in values.iter().zip(out) {
        let amax = x.iter().fold(0f32, |a, v| a.max(v.abs()));
        b[0] = exponent(amax);
        let d = half(b[0]);
        for j in 0..16 {
            b[1 + j] = best_index(x[j], d) | best_index(x[j + 16], d) << 4;
        }
    }
}
