//! Q8_0: 32 elements in 34 bytes, symmetric 8-bit.
//!
//! | bytes  | meaning                        |
//! |--------|--------------------------------|
//! | 0..2   | `d`, f16 scale                 |
//! | 2..34  | `qs[j]`: element `j`, i8       |
//!
//! Element value: `q * d`.

use super::{blocks_to_values, f16_at, f16_bytes, values_to_blocks, WeightFormat};
use gguf::GgmlType;

/// Elements per block.
pub const BLOCK_SIZE: usize = 32;
/// Bytes per block.
pub const TYPE_SIZE: usize = 34;

/// Q8_0's row in [`super::FORMATS`].
pub const FORMAT: WeightFormat = WeightFormat {
    ty: GgmlType::Q8_0,
    block_size: BLOCK_SIZE,
    type_size: TYPE_SIZE,
    scales: &[0],
    other_scales: None,
    dequantize,
    quantize: Some(quantize),
    quantize_weighted: None,
};

/// Dequantizes whole blocks. Panics unless `src` is exactly `dst.len() / 32` blocks.
pub fn dequantize(src: &[u8], dst: &mut [f32]) {
    let (blocks, out) = blocks_to_values::<TYPE_SIZE, BLOCK_SIZE>(src, dst);
    for (b, o) in blocks.iter().zip(out) {
        let d = f16_at(b, 0);
        for (v, &q) in o.iter_mut().zip(&b[2..34]) {
            *v = (q as i8) as f32 * d;
        }
    }
}

/// Quantizes whole blocks like ggml's `quantize_row_q8_0_ref`: `d = amax / 127`,
/// `q = round(x / d)` (half away from zero). Panics unless `dst` is exactly
/// `src.len() / 32` blocks.
pub fn quantize(src: &[f32], dst: &mut [u8]) {
    let (values, out) = values_to_blocks::<TYPE_SIZE, BLOCK_SIZE>(src, dst);
    for (x, b) in values.iter().zip(out) {
        let amax = abs_max(x);
        let d = amax / 127.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        b[0..2].copy_from_slice(&f16_bytes(d));
        for (q, &v) in b[2..34].iter_mut().zip(x) {
            *q = round_away(v * id).clamp(-128, 127) as i8 as u8;
        }
    }
}

/// The largest `|x|` of a block (0.0 for an empty or all-NaN block), reduced over 8
/// lanes so it vectorizes; max is exact, so the order does not change the result.
#[inline(always)]
pub fn abs_max(x: &[f32; BLOCK_SIZE]) -> f32 {
    let mut m = [0.0f32; 8];
    for c in x.as_chunks::<8>().0 {
        for (m, v) in m.iter_mut().zip(c) {
            *m = m.max(v.abs());
        }
    }
    m.iter().fold(0.0f32, |a, &b| a.max(b))
}

/// `x` rounded to the nearest integer, halves away from zero, exactly as C's `roundf`
/// for `|x| < 2^22`. Adding 1.5 * 2^23 rounds to nearest-even and leaves the integer in
/// the low mantissa bits; exact ties that went toward zero are then pushed outward.
/// Unlike `f32::round` and `as i32` this is plain SIMD arithmetic on baseline x86-64.
#[inline(always)]
pub fn round_away(x: f32) -> i32 {
    const MAGIC: f32 = 12_582_912.0;
    let y = x + MAGIC;
    let r = y.to_bits() as i32 - MAGIC.to_bits() as i32;
    let diff = x - (y - MAGIC);
    r + ((diff == 0.5) & (x > 0.0)) as i32 - ((diff == -0.5) & (x < 0.0)) as i32
}

#[cfg(test)]
mod tests {
    #[test]
    fn round_away_matches_roundf() {
        let mut x = -200.0f32;
        while x <= 200.0 {
            for v in [x, x.next_up(), x.next_down()] {
                assert_eq!(super::round_away(v), v.round() as i32, "{v}");
            }
            x += 0.25;
        }
        for v in [
            0.49999997f32,
            -0.49999997,
            0.5,
            -0.5,
            1.5,
            2.5,
            -2.5,
            127.49999,
            1e-30,
            -0.0,
        ] {
            assert_eq!(super::round_away(v), v.round() as i32, "{v}");
        }
    }
}
