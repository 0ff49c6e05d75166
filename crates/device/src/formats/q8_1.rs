//! Q8_1, a test-only weight type: 32 elements in 36 bytes, symmetric 8-bit with the
//! block's sum. ggml uses it for activations and no model stores weights in it; tandem
//! registers it only in test builds (feature `test-types`), to prove that a weight type
//! is added through one file per backend and a registry row.
//!
//! | bytes  | meaning                                  |
//! |--------|------------------------------------------|
//! | 0..2   | `d`, f16 scale                           |
//! | 2..4   | `s`, f16: `d * Σ q` (unused when read)   |
//! | 4..36  | `qs[j]`: element `j`, i8                 |
//!
//! Element value: `q * d`.

use super::q8_0::{abs_max, round_away};
use super::{blocks_to_values, f16_at, f16_bytes, values_to_blocks, WeightFormat};
use gguf::GgmlType;

/// Elements per block.
pub const BLOCK_SIZE: usize = 32;
/// Bytes per block.
pub const TYPE_SIZE: usize = 36;

/// Q8_1's row in [`super::FORMATS`].
pub const FORMAT: WeightFormat = WeightFormat {
    ty: GgmlType::Q8_1,
    block_size: BLOCK_SIZE,
    type_size: TYPE_SIZE,
    scales: &[0, 2],
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
        for (v, &q) in o.iter_mut().zip(&b[4..36]) {
            *v = (q as i8) as f32 * d;
        }
    }
}

/// Quantizes whole blocks like ggml's `quantize_row_q8_1_ref`: `d = amax / 127`,
/// `q = round(x / d)` (half away from zero), `s = d * Σ q`. Panics unless `dst` is
/// exactly `src.len() / 32` blocks.
pub fn quantize(src: &[f32], dst: &mut [u8]) {
    let (values, out) = values_to_blocks::<TYPE_SIZE, BLOCK_SIZE>(src, dst);
    for (x, b) in values.iter().zip(out) {
        let d = abs_max(x) / 127.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        let mut sum = 0i32;
        for (q, &v) in b[4..36].iter_mut().zip(x) {
            let r = round_away(v * id).clamp(-128, 127);
            sum += r;
            *q = r as i8 as u8;
        }
        b[0..2].copy_from_slice(&f16_bytes(d));
        b[2..4].copy_from_slice(&f16_bytes(sum as f32 * d));
    }
}

#[cfg(test)]
mod tests {
    use crate::formats::{dequantize_row, quantize_row};
    use gguf::GgmlType;

    #[test]
    fn q8_1_round_trips_within_half_a_step_and_reads_its_bytes() {
        let x: Vec<f32> = (0..64)
            .map(|i| ((i * 37 % 64) as f32 - 31.5) / 8.0)
            .collect();
        let mut bytes = vec![0u8; 72];
        quantize_row(GgmlType::Q8_1, &x, &mut bytes).unwrap();
        let mut y = vec![0f32; 64];
        dequantize_row(GgmlType::Q8_1, &bytes, &mut y).unwrap();
        for (blk, (x, y)) in x.chunks(32).zip(y.chunks(32)).enumerate() {
            let step = x.iter().fold(0f32, |a, v| a.max(v.abs())) / 127.0;
            for (a, b) in x.iter().zip(y) {
                assert!(
                    (a - b).abs() <= 0.5 * step + 1e-3,
                    "block {blk}: {a} vs {b}"
                );
            }
        }
        let mut one = [0u8; 36];
        one[0..2].copy_from_slice(&half::f16::from_f32(0.5).to_bits().to_le_bytes());
        one[4] = (-3i8) as u8;
        one[35] = 7;
        let mut v = [0f32; 32];
        dequantize_row(GgmlType::Q8_1, &one, &mut v).unwrap();
        assert_eq!((v[0], v[1], v[31]), (-1.5, 0.0, 3.5));
    }
}
