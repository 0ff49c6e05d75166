//! IQ2_S: 256 elements in 82 bytes, 32 entries of [`IQ2S`] (8 values each) with 8 sign
//! bits each, and a 4-bit scale per 16 values.
//!
//! | bytes  | meaning                                                                 |
//! |--------|-------------------------------------------------------------------------|
//! | 0..2   | `d`, f16 super-block scale                                              |
//! | 2..34  | byte `e`: the low 8 bits of the grid entry of elements `8e..8e + 8`     |
//! | 34..66 | byte `e`: the signs of entry `e`, bit `j` set for a negative value `j`  |
//! | 66..74 | `qh`: bits `2(e % 4)..+2` of byte `e / 4` are bits 8..10 of entry `e`'s index |
//! | 74..82 | scales, as IQ2_XS's (see [`super::iq2_xs::nibble_scale`])               |
//!
//! Element value, with `db = (d * (0.5 + ls)) * 0.25` its scale and `grid` its entry:
//! `(db * grid[j]) * sign`, `sign` ±1 by the sign bit.

use super::grids::search::{iq2s, max_of, signs};
use super::grids::{sign, IQ2S};
use super::iq2_xs::{nibble_scale, scale_of, write_nibble_scales, SCAN};
use super::iq3_xxs::write_d;
use super::kquants::{imatrix_weights, sum_squares};
use super::{blocks_to_values, f16_at, values_to_blocks, WeightFormat, QK_K};
use gguf::GgmlType;

/// Elements per block.
pub const BLOCK_SIZE: usize = QK_K;
/// Bytes per block.
pub const TYPE_SIZE: usize = 82;
/// Offset of the scale bytes.
pub const SCALES: usize = 74;

/// IQ2_S's row in [`super::FORMATS`].
pub const FORMAT: WeightFormat = WeightFormat {
    ty: GgmlType::IQ2_S,
    block_size: BLOCK_SIZE,
    type_size: TYPE_SIZE,
    scales: &[0],
    other_scales: None,
    dequantize,
    quantize: Some(quantize),
    quantize_weighted: Some(quantize_weighted),
};

/// Entry `e` (0..32, elements `8e..8e + 8`) of block `b`: its grid values and sign bits.
#[inline(always)]
pub fn entry(b: &[u8], e: usize) -> (&'static [i8; 8], u8) {
    let high = ((b[66 + e / 4] >> (2 * (e % 4))) & 3) as usize;
    (&IQ2S[b[2 + e] as usize | (high << 8)], b[34 + e])
}

/// Dequantizes whole blocks. Panics unless `src` is exactly `dst.len() / 256` blocks.
pub fn dequantize(src: &[u8], dst: &mut [f32]) {
    let (blocks, out) = blocks_to_values::<TYPE_SIZE, BLOCK_SIZE>(src, dst);
    for (b, o) in blocks.iter().zip(out) {
        let d = f16_at(b, 0);
        for (e, o8) in o.chunks_exact_mut(8).enumerate() {
            let db = scale_of(d, nibble_scale(b, SCALES, e / 2));
            let (grid, signs) = entry(b, e);
            for (j, v) in o8.iter_mut().enumerate() {
                *v = db * grid[j] as f32 * sign(signs, j);
            }
        }
    }
}

/// Quantizes whole blocks, element `i`'s squared error weighted by `sigma2 / 4 + x[i]²`
/// (`sigma2`: twice the super-block's mean square). Panics unless `dst` is exactly
/// `src.len() / 256` blocks.
pub fn quantize(src: &[f32], dst: &mut [u8]) {
    quantize_with(src, None, dst);
}

/// Quantizes whole blocks, element `i`'s squared error weighted by
/// `importance[i] * sqrt(sigma2 + x[i]²)`. Panics unless `dst` is exactly
/// `src.len() / 256` blocks and `importance` is as long as `src`.
pub fn quantize_weighted(src: &[f32], importance: &[f32], dst: &mut [u8]) {
    assert_eq!(importance.len(), src.len(), "one importance per value");
    quantize_with(src, Some(importance), dst);
}

/// Groups of 16 below this largest magnitude quantize to zero (ggml's
/// `GROUP_MAX_EPS_IQ2_S`).
const GROUP_MAX_EPS: f32 = 1e-8;

/// ggml's `quantize_row_iq2_s_impl`: IQ2_XS's search ([`super::iq2_xs::SCAN`]) with the
/// signs stored as they are, on IQ2_S's grid; `d` stored as `0.9875 d`.
fn quantize_with(src: &[f32], importance: Option<&[f32]>, dst: &mut [u8]) {
    let grid = iq2s();
    let (values, out) = values_to_blocks::<TYPE_SIZE, BLOCK_SIZE>(src, dst);
    for (ibl, (x, b)) in values.iter().zip(out).enumerate() {
        b.fill(0);
        let mut scales = [0f32; 16];
        let sigma2 = 2.0 * sum_squares(x) / QK_K as f32;
        for (ib, xb) in x.chunks_exact(16).enumerate() {
            let mut weight = [0f32; 16];
            match importance {
                Some(imp) => {
                    imatrix_weights(xb, &imp[QK_K * ibl + 16 * ib..][..16], sigma2, &mut weight)
                }
                None => {
                    for (w, &v) in weight.iter_mut().zip(xb) {
                        *w = 0.25 * sigma2 + v * v;
                    }
                }
            }
            let mut xval = [0f32; 16];
            let mut signs = signs(xb, &mut xval);
            let max = max_of(&xval);
            if max < GROUP_MAX_EPS {
                continue;
            }
            let mut l = [0u8; 16];
            let mut scale = grid.search_group(&xval, &weight, max, &SCAN, &mut l);
            if scale < 0.0 {
                scale = -scale;
                signs = signs.map(|s| !s);
            }
            for (k, l8) in l.chunks_exact(8).enumerate() {
                let e = grid.lookup(l8).expect("the levels are a grid entry");
                let i8 = 2 * ib + k;
                b[2 + i8] = e as u8;
                b[66 + i8 / 4] |= ((e >> 8) as u8) << (2 * (i8 % 4));
                b[34 + i8] = signs[k];
            }
            scales[ib] = scale;
        }
        let Some(id) = write_d(&scales, 0.9875, b) else {
            continue;
        };
        write_nibble_scales(&scales, id, &mut b[SCALES..SCALES + 8]);
    }
}
