//! NVFP4: 64 E2M1 elements in 36 bytes, four sub-blocks of 16 with an unsigned E4M3
//! scale each.
//!
//! | bytes | meaning                                                                   |
//! |-------|---------------------------------------------------------------------------|
//! | 0..4  | `d[s]`, UE4M3 scale of sub-block `s`                                      |
//! | 4..36 | `qs[8s + j]`: low nibble is element `16s + j`, high nibble `16s + 8 + j`  |
//!
//! Element value: `scale(d[s]) * mxfp4::KVALUES[q]`, where [`scale`] is half the UE4M3
//! value (the levels are the E2M1 values doubled) and the codes 0 and 0x7F read as 0.

use super::mxfp4::{best_index, fp4_nibbles};
use super::{blocks_to_values, values_to_blocks, OtherScales, WeightFormat};
use gguf::GgmlType;

/// Elements per block.
pub const BLOCK_SIZE: usize = 64;
/// Bytes per block.
pub const TYPE_SIZE: usize = 36;

/// NVFP4's row in [`super::FORMATS`]. Every scale code is finite.
pub const FORMAT: WeightFormat = WeightFormat {
    ty: GgmlType::NVFP4,
    block_size: BLOCK_SIZE,
    type_size: TYPE_SIZE,
    scales: &[],
    other_scales: Some(&OtherScales {
        valid: |_| true,
        set: |b, x| b[..4].fill(ue4m3(x)),
    }),
    dequantize,
    quantize: Some(quantize),
    quantize_weighted: None,
};

/// Half the value of the UE4M3 code `x` (exponent bias 7, subnormals `m · 2⁻⁹`), as
/// ggml's `ggml_ue4m3_to_fp32`; 0 for the codes 0 and 0x7F.
#[inline(always)]
pub fn scale(x: u8) -> f32 {
    if x == 0 || x == 0x7F {
        return 0.0;
    }
    let (exp, man) = ((x >> 3) & 15, (x & 7) as f32);
    let raw = if exp == 0 {
        man * (-9f32).exp2()
    } else {
        (1.0 + man / 8.0) * (exp as f32 - 7.0).exp2()
    };
    raw * 0.5
}

/// The UE4M3 code of `x` as ggml's `ggml_fp32_to_ue4m3`: 0 for `x <= 0` (or NaN), at
/// most 448 (code 0x7E), the mantissa rounded by its next bit.
pub fn ue4m3(x: f32) -> u8 {
    if x.is_nan() || x <= 0.0 {
        return 0;
    }
    let x = x.min(448.0);
    let bits = x.to_bits();
    let exp = ((bits >> 23) & 0xFF) as i32 - 127 + 7;
    if exp <= 0 {
        let man = ((x * 512.0 + 0.5) as i32).min(7);
        return if man < 1 { 0 } else { man as u8 };
    }
    if exp >= 15 {
        return 0x7E;
    }
    let (mut exp, mut man) = (exp, ((bits >> 20) & 7) as i32 + ((bits >> 19) & 1) as i32);
    if man > 7 {
        man = 0;
        exp += 1;
        if exp >= 15 {
            return 0x7E;
        }
    }
    (exp << 3 | man) as u8
}

/// Dequantizes whole blocks. Panics unless `src` is exactly `dst.len() / 64` blocks.
pub fn dequantize(src: &[u8], dst: &mut [f32]) {
    let (blocks, out) = blocks_to_values::<TYPE_SIZE, BLOCK_SIZE>(src, dst);
    for (b, o) in blocks.iter().zip(out) {
        for (s, o) in o.chunks_exact_mut(16).enumerate() {
            fp4_nibbles(scale(b[s]), &b[4 + 8 * s..12 + 8 * s], o);
        }
    }
}

/// Quantizes whole blocks as ggml's `quantize_row_nvfp4_ref`: each sub-block's scale
/// the code of `amax / 6`, each element to its nearest level.
/// Panics unless `dst` is exactly `src.len() / 64` blocks.
pub fn quantize(src: &[f32], dst: &mut [u8]) {
    let (values, out) = values_to_blocks::<TYPE_SIZE, BLOCK_SIZE>(src, dst);
    for (x, b) in values.iter().zip(out) {
        for (s, x) in x.chunks_exact(16).enumerate() {
            let amax = x
                .iter()
                .fold(0f32, |a, v| if v.abs() > a { v.abs() } else { a });
            b[s] = ue4m3(amax / 6.0);
            let d = scale(b[s]);
            for j in 0..8 {
                b[4 + 8 * s + j] = best_index(x[j], d) | best_index(x[j + 8], d) << 4;
            }
        }
    }
}
