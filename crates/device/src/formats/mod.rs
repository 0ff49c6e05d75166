//! GGML block formats: one file per format, each with its block layout, a
//! `dequantize(src, dst)` over whole blocks, where tandem writes the format a
//! `quantize(src, dst)`, and its [`WeightFormat`] row; [`FORMATS`] registers the rows,
//! and every function here reads them. A backend keeps its own per-type table (its
//! decoded form, its shader) keyed by the same [`GgmlType`], and [`support_matrix`]
//! joins the tables into what runs where.
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
//!
//! Adding a weight type: its file here with `BLOCK_SIZE`, `TYPE_SIZE`, `dequantize`,
//! optionally `quantize`, and `FORMAT`; its `mod` line and its row in [`FORMATS`]; then
//! a row in each backend's table that runs it (`kernels::forms::FORMS`,
//! `gpu::formats::SHADERS`). `q8_1.rs` is such a type, registered in test builds only.

pub mod bf16;
pub mod f16;
pub mod f32;
pub mod iq4_nl;
pub mod iq4_xs;
mod kquants;
pub mod mxfp4;
pub mod nvfp4;
pub mod q1_0;
pub mod q2_0;
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
#[cfg(any(test, feature = "test-types"))]
pub mod q8_1;
mod support;
pub mod tq1_0;
pub mod tq2_0;

pub mod grids;
pub mod iq1_m;
pub mod iq1_s;
pub mod iq2_s;
pub mod iq2_xs;
pub mod iq2_xxs;
pub mod iq3_s;
pub mod iq3_xxs;

use crate::{Error, Result};
use gguf::GgmlType;

pub use support::{reference_form, support_matrix, FormOf, SupportMatrix};

/// Elements per super-block of the K-quants.
pub const QK_K: usize = 256;

/// One GGML weight type: its block layout, how tandem reads it and, where tandem writes
/// it, how it writes it. Each format file declares its own as `FORMAT`.
#[derive(Debug)]
pub struct WeightFormat {
    pub ty: GgmlType,
    /// Elements per block (1 for the float types); equals `ty.block_size()`.
    pub block_size: usize,
    /// Bytes per block; equals `ty.type_size()`.
    pub type_size: usize,
    /// Byte offsets in a block of its f16 scales (empty for the float types, and for
    /// IQ1_M, whose f16 scale is split across bytes: see [`iq1_m::set_d`]).
    pub scales: &'static [usize],
    /// Its scales in another encoding than f16 at fixed offsets (an exponent byte,
    /// E4M3 codes, an f16 split across bytes), `None` where `scales` says it all.
    pub other_scales: Option<&'static OtherScales>,
    /// Dequantizes whole blocks: `src` is exactly `dst.len() / block_size` blocks, or
    /// it panics.
    pub dequantize: Dequantize,
    /// Quantizes whole blocks (`dst` exactly `src.len() / block_size` blocks, or it
    /// panics); `None` where tandem only reads the type.
    pub quantize: Option<Quantize>,
    /// Quantizes whole blocks minimizing each element's squared error weighted by its
    /// importance (an importance matrix's mean `x²` of the element's column), the same
    /// lengths as `quantize` and one importance per value; `None` where the quantizer
    /// takes no importance.
    pub quantize_weighted: Option<QuantizeWeighted>,
}

/// A block's scales in an encoding of their own.
#[derive(Debug)]
pub struct OtherScales {
    /// Whether every scale of the block (its bytes) is one an encoder writes: finite,
    /// not a reserved NaN code.
    pub valid: fn(&[u8]) -> bool,
    /// Sets every scale of the block to a finite value of about the magnitude `x`
    /// (tests build blocks of random quants with it).
    pub set: fn(&mut [u8], f32),
}

/// Whole blocks of bytes into their values: `(src, dst)`.
pub type Dequantize = fn(&[u8], &mut [f32]);
/// Values into whole blocks of bytes: `(src, dst)`.
pub type Quantize = fn(&[f32], &mut [u8]);
/// Values and their importances into whole blocks of bytes: `(src, importance, dst)`.
pub type QuantizeWeighted = fn(&[f32], &[f32], &mut [u8]);

/// Every weight type tandem reads, one row each: the registry the functions of this
/// module, the reference backend and every backend's `supports_type` consult.
pub static FORMATS: &[WeightFormat] = &[
    f32::FORMAT,
    f16::FORMAT,
    bf16::FORMAT,
    q4_0::FORMAT,
    q4_1::FORMAT,
    q5_0::FORMAT,
    q5_1::FORMAT,
    q8_0::FORMAT,
    q2_k::FORMAT,
    q3_k::FORMAT,
    q4_k::FORMAT,
    q5_k::FORMAT,
    q6_k::FORMAT,
    iq4_nl::FORMAT,
    iq4_xs::FORMAT,
    tq1_0::FORMAT,
    tq2_0::FORMAT,
    mxfp4::FORMAT,
    nvfp4::FORMAT,
    q1_0::FORMAT,
    q2_0::FORMAT,
    iq2_xxs::FORMAT,
    iq2_xs::FORMAT,
    iq2_s::FORMAT,
    iq3_xxs::FORMAT,
    iq3_s::FORMAT,
    iq1_s::FORMAT,
    iq1_m::FORMAT,
    #[cfg(any(test, feature = "test-types"))]
    q8_1::FORMAT,
];

/// The registered row of `ty`, `None` for a type tandem does not read.
pub fn format(ty: GgmlType) -> Option<&'static WeightFormat> {
    FORMATS.iter().find(|f| f.ty == ty)
}

/// Whether dequantize_row supports `ty`.
pub fn is_supported(ty: GgmlType) -> bool {
    format(ty).is_some()
}

/// Whether quantize_row supports `ty`.
pub fn is_quantize_supported(ty: GgmlType) -> bool {
    format(ty).is_some_and(|f| f.quantize.is_some())
}

/// Dequantizes `src` (exactly dst.len()/block_size whole blocks of `ty`) into `dst`.
/// Errors: UnsupportedType, LengthMismatch (dst.len() not a multiple of the block size,
/// or src.len() != blocks*type_size).
pub fn dequantize_row(ty: GgmlType, src: &[u8], dst: &mut [f32]) -> Result<()> {
    let f = format(ty).ok_or(Error::UnsupportedType(ty))?;
    check_lengths(ty, src.len(), dst.len())?;
    (f.dequantize)(src, dst);
    Ok(())
}

/// Whether quantize_row_with uses the importances it is given for `ty`.
pub fn takes_importance(ty: GgmlType) -> bool {
    format(ty).is_some_and(|f| f.quantize_weighted.is_some())
}

/// Quantizes `src` into `dst` (exactly the bytes of src.len()/block_size blocks).
/// Supported: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, TQ1_0, TQ2_0, MXFP4, NVFP4,
/// Q1_0, Q2_0 (ggml's reference quantizers), IQ4_NL, IQ4_XS (a weighted scale search,
/// weights `x²`), Q2_K..Q6_K, IQ3_XXS, IQ3_S, IQ2_S (ggml's quantizers without
/// importances) and IQ2_XXS, IQ2_XS, IQ1_S (ggml's with every importance 1: ggml has
/// none without).
/// Errors: UnsupportedType, LengthMismatch (src.len() not a multiple of the block
/// size, or dst.len() != blocks*type_size).
pub fn quantize_row(ty: GgmlType, src: &[f32], dst: &mut [u8]) -> Result<()> {
    quantize_row_with(ty, src, None, dst)
}

/// Quantizes `src` into `dst` as a KV cache stores it, as ggml's `from_float` of `ty` (its
/// KV copy) does: [`quantize_row`], but for IQ4_NL, whose `from_float` keeps its first
/// candidate scale ([`iq4_nl::quantize_first_candidate`]).
/// Errors: those of [`quantize_row`].
pub fn quantize_kv(ty: GgmlType, src: &[f32], dst: &mut [u8]) -> Result<()> {
    if ty != GgmlType::IQ4_NL {
        return quantize_row(ty, src, dst);
    }
    check_lengths(ty, dst.len(), src.len())?;
    iq4_nl::quantize_first_candidate(src, dst);
    Ok(())
}

/// Quantizes `src` into `dst` as [`quantize_row`] does, weighing each value's squared
/// error by `importance` (one per value) where `ty`'s quantizer takes importances
/// ([`takes_importance`]: IQ4_NL, IQ4_XS, the K types and the IQ grid types tandem
/// writes); other types ignore it.
/// Errors: those of [`quantize_row`], and LengthMismatch when `importance` is not as
/// long as `src`.
pub fn quantize_row_with(
    ty: GgmlType,
    src: &[f32],
    importance: Option<&[f32]>,
    dst: &mut [u8],
) -> Result<()> {
    let f = format(ty).ok_or(Error::UnsupportedType(ty))?;
    let quantize = f.quantize.ok_or(Error::UnsupportedType(ty))?;
    check_lengths(ty, dst.len(), src.len())?;
    if let Some(imp) = importance.filter(|imp| imp.len() != src.len()) {
        return Err(Error::LengthMismatch {
            what: "importances (one per value)",
            expected: src.len(),
            got: imp.len(),
        });
    }
    match importance.zip(f.quantize_weighted) {
        Some((imp, weighted)) => weighted(src, imp, dst),
        None => quantize(src, dst),
    }
    Ok(())
}

/// The index of the first block of `bytes` (whole blocks of the registered type `ty`)
/// whose scales no encoder writes: an f16 scale that is NaN or infinite, or a scale of
/// another encoding its format calls invalid. `None` when every block is sound.
pub fn first_bad_block(ty: GgmlType, bytes: &[u8]) -> Option<usize> {
    let f = format(ty)?;
    bytes.chunks_exact(f.type_size).position(|b| {
        f.scales.iter().any(|&at| !f16_at(b, at).is_finite())
            || f.other_scales.is_some_and(|o| !(o.valid)(b))
    })
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
    fn every_row_agrees_with_gguf_and_names_its_type_once() {
        for (i, f) in FORMATS.iter().enumerate() {
            let ty = f.ty;
            assert_eq!(ty.block_size() as usize, f.block_size, "{ty} block size");
            assert_eq!(ty.type_size() as usize, f.type_size, "{ty} type size");
            assert!(
                f.scales.iter().all(|&at| at + 2 <= f.type_size),
                "{ty} scales"
            );
            assert!(
                f.quantize.is_some() || f.quantize_weighted.is_none(),
                "{ty} weighted quantizer without a plain one"
            );
            assert!(
                FORMATS[i + 1..].iter().all(|g| g.ty != ty),
                "{ty} registered twice"
            );
            assert!(std::ptr::eq(format(ty).unwrap(), f));
        }
        assert!(!is_supported(GgmlType::Q8_K));
        assert!(is_supported(GgmlType::IQ1_M) && !is_quantize_supported(GgmlType::IQ1_M));
    }

    #[test]
    fn a_block_with_a_nan_scale_or_a_reserved_code_is_found() {
        let blocks = |ty: GgmlType| vec![0u8; 4 * ty.type_size() as usize];
        for ty in [GgmlType::Q4_K, GgmlType::IQ4_XS, GgmlType::TQ1_0] {
            let mut b = blocks(ty);
            assert_eq!(first_bad_block(ty, &b), None, "{ty}");
            let at = 2 * ty.type_size() as usize + format(ty).unwrap().scales[0];
            b[at..at + 2].copy_from_slice(&0x7E00u16.to_le_bytes());
            assert_eq!(first_bad_block(ty, &b), Some(2), "{ty}");
        }
        let mut b = blocks(GgmlType::MXFP4);
        b[3 * mxfp4::TYPE_SIZE] = 0xFE;
        assert_eq!(first_bad_block(GgmlType::MXFP4, &b), None);
        b[3 * mxfp4::TYPE_SIZE] = 0xFF;
        assert_eq!(first_bad_block(GgmlType::MXFP4, &b), Some(3));
        assert_eq!(first_bad_block(GgmlType::NVFP4, &[0xFF; 36]), None);
    }
}
