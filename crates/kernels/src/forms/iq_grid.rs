//! The IQ grid types on the CPU (`device::formats::iq*`): each 8 (or 4) values are a
//! codebook entry with signs or a shift, decoded into the shared integer form exactly
//! (every product of the dequantization is exact in f32, so `d · sc · q` gives its bits).
//!
//! One scale per 32 values (IQ2_XXS, IQ3_XXS, IQ3_S, IQ1_S): 32-value blocks of signed
//! quants, `d[b]` the block's float scale, `q` the signed grid value (IQ1_S: `8 · grid ± 1`
//! against `d[b] = dl / 8`, the shift ±1/8 made whole).
//! One scale per 16 values (IQ2_XS, IQ2_S, IQ1_M): 256-value blocks of unsigned quants
//! with an offset, `d = d_f16 / 8`, `sc16 = 2 ls + 1`, `q - offset` the signed grid value
//! (IQ1_M: `8 · grid ± 1`); the quants stay at most 86, within `maddubs`' range.

use gguf::GgmlType;

use super::{int8, CpuForm};
use crate::formats::{iq1_m, iq1_s, iq2_s, iq2_xs, iq2_xxs, iq3_s, iq3_xxs};
use crate::qmatmul::act::ActLayout::{B256, B32};
use crate::qmatmul::decode::{f16_at, DecodedRow};
use crate::qmatmul::packed::layout::Format;

/// The offset of IQ2_XS's and IQ2_S's quants: their largest |grid value|.
const IQ2_OFFSET: i8 = 43;
/// The offset of IQ1_M's quants: their largest |8 · grid ± 1|.
const IQ1_OFFSET: i8 = 9;

/// IQ2_XXS's row in [`super::FORMS`].
pub const IQ2_XXS: CpuForm = int8(
    GgmlType::IQ2_XXS,
    B32,
    (0, true, false),
    iq2_xxs,
    Some(Format::IQ2_XXS),
);
/// IQ2_XS's row in [`super::FORMS`].
pub const IQ2_XS: CpuForm = int8(
    GgmlType::IQ2_XS,
    B256,
    (IQ2_OFFSET as i32, false, false),
    iq2_xs,
    None,
);
/// IQ2_S's row in [`super::FORMS`].
pub const IQ2_S: CpuForm = int8(
    GgmlType::IQ2_S,
    B256,
    (IQ2_OFFSET as i32, false, false),
    iq2_s,
    None,
);
/// IQ3_XXS's row in [`super::FORMS`].
pub const IQ3_XXS: CpuForm = int8(
    GgmlType::IQ3_XXS,
    B32,
    (0, true, false),
    iq3_xxs,
    Some(Format::IQ3_XXS),
);
/// IQ3_S's row in [`super::FORMS`].
pub const IQ3_S: CpuForm = int8(GgmlType::IQ3_S, B32, (0, true, false), iq3_s, None);
/// IQ1_S's row in [`super::FORMS`].
pub const IQ1_S: CpuForm = int8(GgmlType::IQ1_S, B32, (0, true, false), iq1_s, None);
/// IQ1_M's row in [`super::FORMS`].
pub const IQ1_M: CpuForm = int8(
    GgmlType::IQ1_M,
    B256,
    (IQ1_OFFSET as i32, false, false),
    iq1_m,
    None,
);

/// Writes `grid[j]`, negated where bit `j` of `signs` is set, plus `offset`, as the byte
/// of `q[j]` (i8 bits where the scheme is signed).
#[inline(always)]
fn signed(q: &mut [u8], grid: &[i8], signs: u8, offset: i8) {
    for (j, (q, &g)) in q.iter_mut().zip(grid).enumerate() {
        let v = if (signs >> j) & 1 == 0 { g } else { -g };
        *q = (v + offset) as u8;
    }
}

/// Writes `8 · grid[j] + shift + offset` (`shift` ±1) as the byte of `q[j]`.
#[inline(always)]
fn shifted(q: &mut [u8], grid: &[i8; 8], shift: i8, offset: i8) {
    for (q, &g) in q.iter_mut().zip(grid) {
        *q = (8 * g + shift + offset) as u8;
    }
}

/// The super-blocks of a row of 256-value blocks of `ts` bytes, each with its `[256]`
/// quants and its `[8]` per-32 scales.
fn b32_blocks<'a>(
    row: &'a mut DecodedRow,
    bytes: &'a [u8],
    ts: usize,
) -> impl Iterator<Item = (&'a [u8], &'a mut [u8], &'a mut [f32])> {
    let q = row.q.chunks_exact_mut(256);
    let d = row.d.chunks_exact_mut(8);
    bytes
        .chunks_exact(ts)
        .zip(q)
        .zip(d)
        .map(|((b, q), d)| (b, q, d))
}

/// The super-blocks of a row of 256-value blocks of `ts` bytes, each with its `[256]`
/// quants, its `d` and its `[16]` scales.
fn b256_blocks<'a>(
    row: &'a mut DecodedRow,
    bytes: &'a [u8],
    ts: usize,
) -> impl Iterator<Item = (&'a [u8], &'a mut [u8], &'a mut f32, &'a mut [i16])> {
    let q = row.q.chunks_exact_mut(256);
    let sc = row.sc16.chunks_exact_mut(16);
    let parts = q.zip(row.d.iter_mut()).zip(sc);
    bytes
        .chunks_exact(ts)
        .zip(parts)
        .map(|(b, ((q, d), sc))| (b, q, d, sc))
}

/// Decodes an IQ2_XXS row into its form (see the module doc).
fn iq2_xxs(row: &mut DecodedRow, bytes: &[u8]) {
    for (b, q, d) in b32_blocks(row, bytes, iq2_xxs::TYPE_SIZE) {
        let d0 = f16_at(b, 0);
        for (g, d) in d.iter_mut().enumerate() {
            *d = iq2_xxs::group_scale(b, d0, g);
        }
        for (e, q8) in q.chunks_exact_mut(8).enumerate() {
            let (grid, signs) = iq2_xxs::entry(b, e);
            signed(q8, grid, signs, 0);
        }
    }
}

/// `octet(block, k)` of IQ3_XXS and IQ3_S.
type Octet = fn(&[u8], usize) -> ([&'static [i8; 4]; 2], u8);

/// IQ3_XXS and IQ3_S: `scale(block, d, g)` gives group `g`'s scale, `octet(block, k)`
/// the two grid entries and the signs of elements `8k..8k + 8`.
fn iq3(
    row: &mut DecodedRow,
    bytes: &[u8],
    ts: usize,
    scale: fn(&[u8], f32, usize) -> f32,
    octet: Octet,
) {
    for (b, q, d) in b32_blocks(row, bytes, ts) {
        let d0 = f16_at(b, 0);
        for (g, d) in d.iter_mut().enumerate() {
            *d = scale(b, d0, g);
        }
        for (k, q8) in q.chunks_exact_mut(8).enumerate() {
            let ([lo, hi], signs) = octet(b, k);
            signed(&mut q8[..4], lo, signs, 0);
            signed(&mut q8[4..], hi, signs >> 4, 0);
        }
    }
}

/// Decodes an IQ3_XXS row into its form (see the module doc).
fn iq3_xxs(row: &mut DecodedRow, bytes: &[u8]) {
    iq3(
        row,
        bytes,
        iq3_xxs::TYPE_SIZE,
        iq3_xxs::group_scale,
        iq3_xxs::octet,
    );
}

/// Decodes an IQ3_S row into its form (see the module doc).
fn iq3_s(row: &mut DecodedRow, bytes: &[u8]) {
    iq3(
        row,
        bytes,
        iq3_s::TYPE_SIZE,
        iq3_s::group_scale,
        iq3_s::octet,
    );
}

/// Decodes an IQ1_S row into its form (see the module doc).
fn iq1_s(row: &mut DecodedRow, bytes: &[u8]) {
    for (b, q, d) in b32_blocks(row, bytes, iq1_s::TYPE_SIZE) {
        let d0 = f16_at(b, 0);
        for (g, (d, q32)) in d.iter_mut().zip(q.chunks_exact_mut(32)).enumerate() {
            let (dl, shift) = iq1_s::group(b, d0, g);
            *d = dl * 0.125;
            for (i, q8) in q32.chunks_exact_mut(8).enumerate() {
                shifted(q8, iq1_s::entry(b, 4 * g + i), shift, 0);
            }
        }
    }
}

/// IQ2_XS and IQ2_S: `entry(block, e)` gives entry `e`'s grid values and signs, the
/// scale nibbles start at byte `scales`.
fn iq2_b256(
    row: &mut DecodedRow,
    bytes: &[u8],
    ts: usize,
    scales: usize,
    entry: fn(&[u8], usize) -> (&'static [i8; 8], u8),
) {
    for (b, q, d, sc) in b256_blocks(row, bytes, ts) {
        *d = f16_at(b, 0) * 0.125;
        for (s, sc) in sc.iter_mut().enumerate() {
            *sc = 2 * iq2_xs::nibble_scale(b, scales, s) as i16 + 1;
        }
        for (e, q8) in q.chunks_exact_mut(8).enumerate() {
            let (grid, signs) = entry(b, e);
            signed(q8, grid, signs, IQ2_OFFSET);
        }
    }
}

/// Decodes an IQ2_XS row into its form (see the module doc).
fn iq2_xs(row: &mut DecodedRow, bytes: &[u8]) {
    iq2_b256(row, bytes, iq2_xs::TYPE_SIZE, iq2_xs::SCALES, iq2_xs::entry);
}

/// Decodes an IQ2_S row into its form (see the module doc).
fn iq2_s(row: &mut DecodedRow, bytes: &[u8]) {
    iq2_b256(row, bytes, iq2_s::TYPE_SIZE, iq2_s::SCALES, iq2_s::entry);
}

/// Decodes an IQ1_M row into its form (see the module doc).
fn iq1_m(row: &mut DecodedRow, bytes: &[u8]) {
    for (b, q, d, sc) in b256_blocks(row, bytes, iq1_m::TYPE_SIZE) {
        *d = iq1_m::d(b) * 0.125;
        for (s, sc) in sc.iter_mut().enumerate() {
            *sc = 2 * iq1_m::scale(b, s) as i16 + 1;
        }
        for (e, q8) in q.chunks_exact_mut(8).enumerate() {
            let (grid, shift) = iq1_m::entry(b, e);
            shifted(q8, grid, shift, IQ1_OFFSET);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::formats::dequantize_row;
    use crate::qmatmul::act::ActLayout;
    use device::testing::{noise_blocks, saturated_blocks};

    /// `d · sc · (q - offset)` of every value of a decoded row, as the kernels read it.
    fn values(form: &CpuForm, row: &DecodedRow) -> Vec<f32> {
        let s = form.int8.unwrap().scheme;
        (0..row.q.len())
            .map(|i| {
                let q = match s.signed {
                    true => row.q[i] as i8 as i32,
                    false => row.q[i] as i32 - s.offset,
                } as f32;
                match s.layout {
                    ActLayout::B32 => row.d[i / 32] * q,
                    ActLayout::B256 => row.d[i / 256] * row.sc16[i / 16] as f32 * q,
                }
            })
            .collect()
    }

    #[test]
    fn decoded_rows_give_the_dequantized_values_exactly() {
        let k = 1024;
        for form in [IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M] {
            let ty = form.ty;
            for bytes in [noise_blocks(ty, 1, k, 21), saturated_blocks(ty, 1, k)] {
                let mut want = vec![0f32; k];
                dequantize_row(ty, &bytes, &mut want).unwrap();
                let mut row = DecodedRow::default();
                crate::forms::int_form(ty)
                    .unwrap()
                    .decode_row(&mut row, &bytes, k);
                assert!(row
                    .q
                    .iter()
                    .all(|&q| q <= 128 || form.int8.unwrap().scheme.signed));
                assert_eq!(values(&form, &row), want, "{ty}");
            }
        }
    }
}
