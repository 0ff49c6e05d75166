//! GGML block formats: one file per format, each with its block layout, a
//! `dequantize(src, dst)` over whole blocks and, where tandem writes the format, a
//! `quantize(src, dst)`. This module validates lengths and dispatches on [`GgmlType`].
//!
//! Dequantization is bit-identical to the reference numpy implementation in the
//! `gguf` Python package (`gguf.quants.dequantize`): every file performs the same
//! float32 operations in the same order (never fused), checked against golden data
//! in `tests/golden/dequant`. The only exception is the payload of NaN inputs to F16,
//! which may come out quieted when the CPU converts with F16C.
//!
//! The per-format functions take exactly `n` blocks of bytes and `n * BLOCK_SIZE`
//! values and panic otherwise; [`dequantize_row`] and [`quantize_row`] check first
//! and return errors instead.

pub mod bf16;
pub mod f16;
pub mod f32;
pub mod q2_k;
pub mod q3_k;
pub mod q4_0;
pub mod q4_1;
pub mod q4_k;
pub mod q5_0;
pub mod q5_1;
pub mod q5_k;
pub mod q6_k;
pub mod q8_0;

use crate::{Error, Result};
use gguf::GgmlType;

/// Elements per super-block of the K-quants.
pub const QK_K: usize = 256;

/// Whether dequantize_row supports `ty`.
pub fn is_supported(ty: GgmlType) -> bool {
    use GgmlType::*;
    matches!(
        ty,
        F32 | F16 | BF16 | Q4_0 | Q4_1 | Q5_0 | Q5_1 | Q8_0 | Q2_K | Q3_K | Q4_K | Q5_K | Q6_K
    )
}

/// Whether quantize_row supports `ty`.
pub fn is_quantize_supported(ty: GgmlType) -> bool {
    use GgmlType::*;
    matches!(
        ty,
        F32 | F16 | BF16 | Q4_0 | Q4_1 | Q5_0 | Q5_1 | Q8_0 | Q4_K | Q6_K
    )
}

/// Dequantizes `src` (exactly dst.len()/block_size whole blocks of `ty`) into `dst`.
/// Errors: UnsupportedType, LengthMismatch (dst.len() not a multiple of the block size,
/// or src.len() != blocks*type_size).
pub fn dequantize_row(ty: GgmlType, src: &[u8], dst: &mut [f32]) -> Result<()> {
    if !is_supported(ty) {
        return Err(Error::UnsupportedType(ty));
    }
    check_lengths(ty, src.len(), dst.len())?;
    use GgmlType::*;
    match ty {
        F32 => f32::dequantize(src, dst),
        F16 => f16::dequantize(src, dst),
        BF16 => bf16::dequantize(src, dst),
        Q4_0 => q4_0::dequantize(src, dst),
        Q4_1 => q4_1::dequantize(src, dst),
        Q5_0 => q5_0::dequantize(src, dst),
        Q5_1 => q5_1::dequantize(src, dst),
        Q8_0 => q8_0::dequantize(src, dst),
        Q2_K => q2_k::dequantize(src, dst),
        Q3_K => q3_k::dequantize(src, dst),
        Q4_K => q4_k::dequantize(src, dst),
        Q5_K => q5_k::dequantize(src, dst),
        Q6_K => q6_k::dequantize(src, dst),
        _ => unreachable!("is_supported admitted {ty}"),
    }
    Ok(())
}

/// Quantizes `src` into `dst` (exactly the bytes of src.len()/block_size blocks).
/// Supported: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 (ggml's reference
/// quantizers, bit-identical to `gguf.quants.quantize`) and Q4_K, Q6_K (plain
/// round-to-nearest, meant for synthetic test models).
/// Errors: UnsupportedType, LengthMismatch (src.len() not a multiple of the block
/// size, or dst.len() != blocks*type_size).
pub fn quantize_row(ty: GgmlType, src: &[f32], dst: &mut [u8]) -> Result<()> {
    if !is_quantize_supported(ty) {
        return Err(Error::UnsupportedType(ty));
    }
    check_lengths(ty, dst.len(), src.len())?;
    use GgmlType::*;
    match ty {
        F32 => f32::quantize(src, dst),
        F16 => f16::quantize(src, dst),
        BF16 => bf16::quantize(src, dst),
        Q4_0 => q4_0::quantize(src, dst),
        Q4_1 => q4_1::quantize(src, dst),
        Q5_0 => q5_0::quantize(src, dst),
        Q5_1 => q5_1::quantize(src, dst),
        Q8_0 => q8_0::quantize(src, dst),
        Q4_K => q4_k::quantize(src, dst),
        Q6_K => q6_k::quantize(src, dst),
        _ => unreachable!("is_quantize_supported admitted {ty}"),
    }
    Ok(())
}

/// Checks that `n_values` is whole blocks of `ty` and `n_bytes` is exactly their size.
fn check_lengths(ty: GgmlType, n_bytes: usize, n_values: usize) -> Result<()> {
    let block_size = ty.block_size() as usize;
    let type_size = ty.type_size() as usize;
    if !n_values.is_multiple_of(block_size) {
        return Err(Error::LengthMismatch {
            what: "values (a whole number of blocks)",
            expected: n_values.next_multiple_of(block_size),
            got: n_values,
        });
    }
    let expected = n_values / block_size * type_size;
    if n_bytes != expected {
        return Err(Error::LengthMismatch {
            what: "block bytes",
            expected,
            got: n_bytes,
        });
    }
    Ok(())
}

/// Views `bytes` as `[u8; TS]` blocks and `values` as `[f32; BS]` blocks for
/// dequantization. Panics unless both hold the same whole number of blocks.
#[track_caller]
#[inline]
fn blocks_to_values<'a, 'b, const TS: usize, const BS: usize>(
    bytes: &'a [u8],
    values: &'b mut [f32],
) -> (&'a [[u8; TS]], &'b mut [[f32; BS]]) {
    assert_same_blocks(bytes.len(), values.len(), TS, BS);
    (bytes.as_chunks::<TS>().0, values.as_chunks_mut::<BS>().0)
}

/// Views `values` as `[f32; BS]` blocks and `bytes` as `[u8; TS]` blocks for
/// quantization. Panics unless both hold the same whole number of blocks.
#[track_caller]
#[inline]
fn values_to_blocks<'a, 'b, const TS: usize, const BS: usize>(
    values: &'a [f32],
    bytes: &'b mut [u8],
) -> (&'a [[f32; BS]], &'b mut [[u8; TS]]) {
    assert_same_blocks(bytes.len(), values.len(), TS, BS);
    (values.as_chunks::<BS>().0, bytes.as_chunks_mut::<TS>().0)
}

#[track_caller]
#[inline]
fn assert_same_blocks(n_bytes: usize, n_values: usize, type_size: usize, block_size: usize) {
    assert!(
        n_values.is_multiple_of(block_size) && n_bytes == n_values / block_size * type_size,
        "{n_bytes} bytes and {n_values} values are not the same whole number of blocks \
         ({type_size} bytes, {block_size} values each)"
    );
}

/// The little-endian f16 at `b[at..at + 2]`, widened exactly to f32.
#[inline(always)]
fn f16_at(b: &[u8], at: usize) -> f32 {
    half::f16::from_bits(u16::from_le_bytes([b[at], b[at + 1]])).to_f32()
}

/// `x` rounded to the nearest f16, as its little-endian bytes.
#[inline(always)]
fn f16_bytes(x: f32) -> [u8; 2] {
    half::f16::from_f32(x).to_bits().to_le_bytes()
}

/// `x` rounded to the nearest f16 and widened back: the scale a decoder will see.
#[inline(always)]
fn f16_round(x: f32) -> f32 {
    half::f16::from_f32(x).to_f32()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constants_agree_with_gguf() {
        use GgmlType::*;
        let table: [(GgmlType, usize, usize); 13] = [
            (F32, f32::BLOCK_SIZE, f32::TYPE_SIZE),
            (F16, f16::BLOCK_SIZE, f16::TYPE_SIZE),
            (BF16, bf16::BLOCK_SIZE, bf16::TYPE_SIZE),
            (Q4_0, q4_0::BLOCK_SIZE, q4_0::TYPE_SIZE),
            (Q4_1, q4_1::BLOCK_SIZE, q4_1::TYPE_SIZE),
            (Q5_0, q5_0::BLOCK_SIZE, q5_0::TYPE_SIZE),
            (Q5_1, q5_1::BLOCK_SIZE, q5_1::TYPE_SIZE),
            (Q8_0, q8_0::BLOCK_SIZE, q8_0::TYPE_SIZE),
            (Q2_K, q2_k::BLOCK_SIZE, q2_k::TYPE_SIZE),
            (Q3_K, q3_k::BLOCK_SIZE, q3_k::TYPE_SIZE),
            (Q4_K, q4_k::BLOCK_SIZE, q4_k::TYPE_SIZE),
            (Q5_K, q5_k::BLOCK_SIZE, q5_k::TYPE_SIZE),
            (Q6_K, q6_k::BLOCK_SIZE, q6_k::TYPE_SIZE),
        ];
        for (ty, bs, ts) in table {
            assert!(is_supported(ty));
            assert_eq!(ty.block_size() as usize, bs, "{ty} block size");
            assert_eq!(ty.type_size() as usize, ts, "{ty} type size");
        }
    }
}
