//! IQ3_S: 256 elements in 110 bytes, 64 entries of [`IQ3S`] (4 values each), a sign bit
//! per value and a 4-bit scale per 32.
//!
//! | bytes   | meaning                                                                 |
//! |---------|-------------------------------------------------------------------------|
//! | 0..2    | `d`, f16 super-block scale                                              |
//! | 2..66   | byte `e`: the low 8 bits of the grid entry of elements `4e..4e + 4`     |
//! | 66..74  | `qh`: bit `e % 8` of byte `e / 8` is bit 8 of entry `e`'s index         |
//! | 74..106 | byte `k`: the signs of elements `8k..8k + 8`, bit `j` set for a negative value |
//! | 106..110 | scales: the low nibble of byte `t` is `ls` of elements `64t..64t + 32`, the high nibble of the next 32 |
//!
//! Element value, with `db = d * (1 + 2 ls)` its scale and `grid` its entry:
//! `(db * grid[j]) * sign`, `sign` ±1 by the sign bit.

use super::grids::search::{iq3s, max_of, signs, Scan};
use super::grids::IQ3S;
use super::iq3_xxs::{dequantize_octets, group_weights, nibble, write_d};
use super::kquants::sum_squares;
use super::{values_to_blocks, WeightFormat, QK_K};
use gguf::GgmlType;

/// Elements per block.
pub const BLOCK_SIZE: usize = QK_K;
/// Bytes per block.
pub const TYPE_SIZE: usize = 110;

/// IQ3_S's row in [`super::FORMATS`].
pub const FORMAT: WeightFormat = WeightFormat {
    ty: GgmlType::IQ3_S,
    block_size: BLOCK_SIZE,
    type_size: TYPE_SIZE,
    scales: &[0],
    other_scales: None,
    dequantize,
    quantize: Some(quantize),
    quantize_weighted: Some(quantize_weighted),
};

/// The scale of group `g` (0..8, elements `32g..32g + 32`) of block `b` whose `d` is given.
#[inline(always)]
pub fn group_scale(b: &[u8], d: f32, g: usize) -> f32 {
    let ls = (b[106 + g / 2] >> (4 * (g % 2))) & 15;
    d * (1 + 2 * ls) as f32
}

/// Elements `8k..8k + 8` (`k` in 0..32) of block `b`: the grid values of their two entries
/// and their sign bits.
#[inline(always)]
pub fn octet(b: &[u8], k: usize) -> ([&'static [i8; 4]; 2], u8) {
    let grid = |e: usize| {
        let high = ((b[66 + e / 8] >> (e % 8)) & 1) as usize;
        &IQ3S[b[2 + e] as usize | (high << 8)]
    };
    ([grid(2 * k), grid(2 * k + 1)], b[74 + k])
}

/// Dequantizes whole blocks. Panics unless `src` is exactly `dst.len() / 256` blocks.
pub fn dequantize(src: &[u8], dst: &mut [f32]) {
    dequantize_octets::<TYPE_SIZE>(src, dst, group_scale, octet);
}

/// Quantizes whole blocks, each element's squared error weighted by `x²`. Panics unless
/// `dst` is exactly `src.len() / 256` blocks.
pub fn quantize(src: &[f32], dst: &mut [u8]) {
    quantize_with(src, None, dst);
}

/// Quantizes whole blocks, element `i`'s squared error weighted by
/// `importance[i] * sqrt(sigma2 + x[i]²)` (`sigma2`: twice the super-block's mean
/// square). Panics unless `dst` is exactly `src.len() / 256` blocks and `importance` is
/// as long as `src`.
pub fn quantize_weighted(src: &[f32], importance: &[f32], dst: &mut [u8]) {
    assert_eq!(importance.len(), src.len(), "one importance per value");
    quantize_with(src, Some(importance), dst);
}

/// ggml's `quantize_row_iq3_s_impl`: each group of 32 stores its signs and gets its
/// scale and grid entries from the magnitudes by
/// [`super::grids::search::GridSearch::search_group`] (19 scales 0.2 levels apart, every
/// entry snapped again at the best); the group scales are quantized to 4 bits against
/// `d = largest / 31`, stored as `1.033 d`.
fn quantize_with(src: &[f32], importance: Option<&[f32]>, dst: &mut [u8]) {
    const SCAN: Scan = Scan {
        steps: 9,
        step: 0.2,
        refit_all: true,
    };
    let grid = iq3s();
    let (values, out) = values_to_blocks::<TYPE_SIZE, BLOCK_SIZE>(src, dst);
    for (ibl, (x, b)) in values.iter().zip(out).enumerate() {
        b.fill(0);
        let mut scales = [0f32; 8];
        let sigma2 = 2.0 * sum_squares(x) / QK_K as f32;
        for (ib, xb) in x.chunks_exact(32).enumerate() {
            let weight = group_weights(
                xb,
                importance.map(|m| &m[QK_K * ibl + 32 * ib..][..32]),
                sigma2,
            );
            let mut xval = [0f32; 32];
            let mut signs = signs(xb, &mut xval);
            let max = max_of(&xval);
            if max == 0.0 {
                continue;
            }
            let mut l = [0u8; 32];
            let mut scale = grid.search_group(&xval, &weight, max, &SCAN, &mut l);
            if scale < 0.0 {
                scale = -scale;
                signs = signs.map(|s| !s);
            }
            for (k, l4) in l.chunks_exact(4).enumerate() {
                let e = grid.lookup(l4).expect("the levels are a grid entry");
                b[2 + 8 * ib + k] = e as u8;
                b[66 + ib] |= ((e >> 8) as u8) << k;
            }
            b[74 + 4 * ib..78 + 4 * ib].copy_from_slice(&signs);
            scales[ib] = scale;
        }
        let Some(id) = write_d(&scales, 1.033, b) else {
            continue;
        };
        for (t, pair) in scales.chunks_exact(2).enumerate() {
            b[106 + t] = nibble(id, pair[0]) | nibble(id, pair[1]) << 4;
        }
    }
}
