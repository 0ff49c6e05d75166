//! IQ2_XXS: 256 elements in 66 bytes, 8 groups of 32 values, each group 4 entries of
//! [`IQ2XXS`] (8 values each) with their signs and one 4-bit scale.
//!
//! | bytes          | meaning                                                         |
//! |----------------|-----------------------------------------------------------------|
//! | 0..2           | `d`, f16 super-block scale                                      |
//! | 2..66          | 8 groups of 8 bytes; group `g` at `2 + 8g`:                     |
//! | +0..+4         | byte `i`: the grid entry of elements `32g + 8i..32g + 8i + 8`   |
//! | +4..+8         | u32 `aux`: bits `7i..7i + 7` the [`KSIGNS`] index of entry `i`, bits 28..32 the scale `ls` |
//!
//! Element value, with `db = (d * (0.5 + ls)) * 0.25` its group's scale, `grid` its
//! entry and `sign` ±1 by bit `j` of the entry's sign pattern: `(db * grid[j]) * sign`.
//!
//! The weighted quantizer is ggml's (`quantize_row_iq2_xxs_impl`), which llama.cpp runs
//! only with an importance matrix.

use super::grids::search::{even_signs, fit, iq2xxs, max_of};
use super::grids::{sign, u32_at, IQ2XXS, KSIGNS};
use super::iq3_xxs::{nibble, write_d};
use super::kquants::{make_qp_quants, sum_squares, GROUP_MAX_EPS};
use super::{blocks_to_values, f16_at, values_to_blocks, WeightFormat, QK_K};
use gguf::GgmlType;

/// Elements per block.
pub const BLOCK_SIZE: usize = QK_K;
/// Bytes per block.
pub const TYPE_SIZE: usize = 66;

/// IQ2_XXS's row in [`super::FORMATS`].
pub const FORMAT: WeightFormat = WeightFormat {
    ty: GgmlType::IQ2_XXS,
    block_size: BLOCK_SIZE,
    type_size: TYPE_SIZE,
    scales: &[0],
    other_scales: None,
    dequantize,
    quantize: Some(quantize),
    quantize_weighted: Some(quantize_weighted),
};

/// The scale of group `g` (0..8) of block `b` whose `d` is given.
#[inline(always)]
pub fn group_scale(b: &[u8], d: f32, g: usize) -> f32 {
    d * (0.5 + (u32_at(b, 6 + 8 * g) >> 28) as f32) * 0.25
}

/// Entry `e` (0..32, elements `8e..8e + 8`) of block `b`: its grid values and sign pattern.
#[inline(always)]
pub fn entry(b: &[u8], e: usize) -> (&'static [i8; 8], u8) {
    let (g, i) = (e / 4, e % 4);
    let aux = u32_at(b, 6 + 8 * g);
    let grid = &IQ2XXS[b[2 + 8 * g + i] as usize];
    (grid, KSIGNS[(aux >> (7 * i)) as usize & 127])
}

/// Dequantizes whole blocks. Panics unless `src` is exactly `dst.len() / 256` blocks.
pub fn dequantize(src: &[u8], dst: &mut [f32]) {
    let (blocks, out) = blocks_to_values::<TYPE_SIZE, BLOCK_SIZE>(src, dst);
    for (b, o) in blocks.iter().zip(out) {
        let d = f16_at(b, 0);
        for (e, o8) in o.chunks_exact_mut(8).enumerate() {
            let db = group_scale(b, d, e / 4);
            let (grid, signs) = entry(b, e);
            for (j, v) in o8.iter_mut().enumerate() {
                *v = db * grid[j] as f32 * sign(signs, j);
            }
        }
    }
}

/// Quantizes whole blocks as [`quantize_weighted`] does with every importance 1 (ggml
/// has no quantizer without importances for IQ2_XXS). Panics unless `dst` is exactly
/// `src.len() / 256` blocks.
pub fn quantize(src: &[f32], dst: &mut [u8]) {
    quantize_weighted(src, &vec![1.0; src.len()], dst);
}

/// Quantizes whole blocks, element `i`'s squared error weighted by
/// `importance[i] * sqrt(sigma2 + x[i]²)` (`sigma2`: the super-block's mean square).
/// Each group of 32 takes the magnitudes of its values (its signs by [`even_signs`]),
/// then tries 13 scales near the one [`make_qp_quants`] finds: each rounds every
/// magnitude to a level index 0..3 (value `2l + 1`), snaps each 8 to the grid (the
/// weighted-nearest neighbour where they are no entry) and gets the least-squares
/// scale; the best scale's entries are refit once more. The 8 group scales are then
/// quantized to 4 bits against `d = largest / 31`. Panics unless `dst` is exactly
/// `src.len() / 256` blocks and `importance` is as long as `src`.
pub fn quantize_weighted(src: &[f32], importance: &[f32], dst: &mut [u8]) {
    const K_MAX_Q: i32 = 3;
    assert_eq!(importance.len(), src.len(), "one importance per value");
    let grid = iq2xxs();
    let (values, out) = values_to_blocks::<TYPE_SIZE, BLOCK_SIZE>(src, dst);
    let importance = importance.as_chunks::<BLOCK_SIZE>().0;
    for ((x, imp), b) in values.iter().zip(importance).zip(out) {
        b.fill(0);
        let mut q2 = [0u32; 16];
        let mut scales = [0f32; 8];
        let sigma2 = sum_squares(x) / QK_K as f32;
        for (ib, (xb, qw)) in x.chunks_exact(32).zip(imp.chunks_exact(32)).enumerate() {
            let weight: [f32; 32] =
                std::array::from_fn(|i| qw[i] * (sigma2 + xb[i] * xb[i]).sqrt());
            let waux = weight.map(f32::sqrt);
            let mut xval = [0f32; 32];
            let signs = even_signs(xb, &weight, &mut xval);
            let max = max_of(&xval);
            if max < GROUP_MAX_EPS {
                continue;
            }
            let mut l = [0u8; 32];
            let mut scale = make_qp_quants(K_MAX_Q + 1, &xval, &weight, &mut l);
            let eff_max = scale * K_MAX_Q as f32;
            if eff_max <= 0.0 {
                continue;
            }
            let mut best = 0f32;
            let mut laux = [0u8; 32];
            for is in -6..=6 {
                let id = ((2 * K_MAX_Q - 1) as f32 + is as f32 * 0.1) / eff_max;
                grid.snap(&xval, &waux, id, 1.0 / id, &mut laux, 0);
                let (sumqx, sumq2) = fit(&xval, &weight, &laux);
                if sumq2 > 0.0 && sumqx * sumqx > best * sumq2 {
                    scale = sumqx / sumq2;
                    best = scale * sumqx;
                    l = laux;
                }
            }
            if scale > 0.0 {
                grid.snap(&xval, &waux, 1.0 / scale, scale, &mut l, 0);
                let (sumqx, sumq2) = fit(&xval, &weight, &l);
                if sumq2 > 0.0 {
                    scale = sumqx / sumq2;
                }
            }
            let mut signs = signs;
            if scale < 0.0 {
                scale = -scale;
                signs = signs.map(|s| !s & 127);
            }
            for (k, (l8, &s)) in l.chunks_exact(8).zip(&signs).enumerate() {
                let e = grid.lookup(l8).expect("the levels are a grid entry");
                q2[2 * ib] |= (e as u32) << (8 * k);
                q2[2 * ib + 1] |= (s as u32) << (7 * k);
            }
            scales[ib] = scale;
        }
        let Some(id) = write_d(&scales, 1.0, b) else {
            continue;
        };
        for (ib, &s) in scales.iter().enumerate() {
            q2[2 * ib + 1] |= (nibble(id, s) as u32) << 28;
        }
        for (dst, q) in b[2..].chunks_exact_mut(4).zip(q2) {
            dst.copy_from_slice(&q.to_le_bytes());
        }
    }
}
