//! IQ1_S: 256 elements in 50 bytes, 32 entries of [`IQ1S`] (8 values in {-1, 0, 1}), a
//! 3-bit scale and a shift of ±1/8 per 32 values.
//!
//! | bytes  | meaning                                                                 |
//! |--------|-------------------------------------------------------------------------|
//! | 0..2   | `d`, f16 super-block scale                                              |
//! | 2..34  | byte `e`: the low 8 bits of the grid entry of elements `8e..8e + 8`     |
//! | 34..50 | u16 `qh[g]` for elements `32g..32g + 32`: bits `3i..3i + 3` are bits 8..11 of entry `4g + i`'s index, bits 12..15 the scale `ls`, bit 15 the sign of the shift |
//!
//! Element value, with `dl = d * (2 ls + 1)` its group's scale, `grid` its entry and
//! `delta` 0.125 (bit 15 clear) or -0.125: `dl * (grid[j] + delta)`.

use super::grids::search::iq1s;
use super::grids::{u16_at, IQ1S};
use super::kquants::{imatrix_weights, nearest_int, sum_squares};
use super::{blocks_to_values, f16_at, f16_bytes, values_to_blocks, WeightFormat, QK_K};
use gguf::GgmlType;

/// Elements per block.
pub const BLOCK_SIZE: usize = QK_K;
/// Bytes per block.
pub const TYPE_SIZE: usize = 50;
/// The shift of IQ1_S and IQ1_M, in units of the scale: `delta = DELTA * ±1`.
pub const DELTA: f32 = 0.125;

/// IQ1_S's row in [`super::FORMATS`].
pub const FORMAT: WeightFormat = WeightFormat {
    ty: GgmlType::IQ1_S,
    block_size: BLOCK_SIZE,
    type_size: TYPE_SIZE,
    scales: &[0],
    other_scales: None,
    dequantize,
    quantize: Some(quantize),
    quantize_weighted: Some(quantize_weighted),
};

/// Group `g` (0..8, elements `32g..32g + 32`) of block `b` whose `d` is given: its scale
/// `dl` and the sign (±1) of its shift.
#[inline(always)]
pub fn group(b: &[u8], d: f32, g: usize) -> (f32, i8) {
    let qh = u16_at(b, 34 + 2 * g);
    let dl = d * (2 * ((qh >> 12) & 7) + 1) as f32;
    (dl, if qh & 0x8000 == 0 { 1 } else { -1 })
}

/// The grid values of entry `e` (0..32, elements `8e..8e + 8`) of block `b`.
#[inline(always)]
pub fn entry(b: &[u8], e: usize) -> &'static [i8; 8] {
    let high = ((u16_at(b, 34 + 2 * (e / 4)) >> (3 * (e % 4))) & 7) as usize;
    &IQ1S[b[2 + e] as usize | (high << 8)]
}

/// Dequantizes whole blocks. Panics unless `src` is exactly `dst.len() / 256` blocks.
pub fn dequantize(src: &[u8], dst: &mut [f32]) {
    let (blocks, out) = blocks_to_values::<TYPE_SIZE, BLOCK_SIZE>(src, dst);
    for (b, o) in blocks.iter().zip(out) {
        let d = f16_at(b, 0);
        for (e, o8) in o.chunks_exact_mut(8).enumerate() {
            let (dl, s) = group(b, d, e / 4);
            let delta = DELTA * s as f32;
            for (v, &g) in o8.iter_mut().zip(entry(b, e)) {
                *v = dl * (g as f32 + delta);
            }
        }
    }
}

/// Quantizes whole blocks as [`quantize_weighted`] does with every importance 1 (ggml
/// has no quantizer without importances for IQ1_S). Panics unless `dst` is exactly
/// `src.len() / 256` blocks.
pub fn quantize(src: &[f32], dst: &mut [u8]) {
    quantize_weighted(src, &vec![1.0; src.len()], dst);
}

/// Groups of 32 below this largest magnitude quantize to zero (ggml's
/// `GROUP_MAX_EPS_IQ1_S`).
const GROUP_MAX_EPS: f32 = 1e-12;

/// Quantizes whole blocks, element `i`'s squared error weighted by
/// `importance[i] * sqrt(sigma2 + x[i]²)` (`sigma2`: twice the super-block's mean
/// square), as ggml's `quantize_row_iq1_s_impl`: with 3 levels per value (`-1, 0, 1`
/// plus the group's shift), the best split of each group's sorted values into the 3
/// levels is found exhaustively for both shifts; each 8 is then snapped to the grid (the
/// weighted-nearest neighbour where it is no entry, the group refit). The group scales
/// are quantized to 3 bits against `d = largest / 15`, stored as `1.125 d`. Panics
/// unless `dst` is exactly `src.len() / 256` blocks and `importance` is as long as `src`.
pub fn quantize_weighted(src: &[f32], importance: &[f32], dst: &mut [u8]) {
    assert_eq!(importance.len(), src.len(), "one importance per value");
    let x_p = [-1.0 + DELTA, DELTA, 1.0 + DELTA];
    let x_m = [-1.0 - DELTA, -DELTA, 1.0 - DELTA];
    let grid = iq1s();
    let (values, out) = values_to_blocks::<TYPE_SIZE, BLOCK_SIZE>(src, dst);
    let importance = importance.as_chunks::<BLOCK_SIZE>().0;
    for ((x, imp), b) in values.iter().zip(importance).zip(out) {
        b.fill(0);
        let mut scales = [0f32; 8];
        let mut shifts = [1i8; 8];
        let sigma2 = 2.0 * sum_squares(x) / QK_K as f32;
        for (ib, (xb, qw)) in x.chunks_exact(32).zip(imp.chunks_exact(32)).enumerate() {
            let mut weight = [0f32; 32];
            imatrix_weights(xb, qw, sigma2, &mut weight);
            let max = xb[1..]
                .iter()
                .fold(xb[0].abs(), |m, &v| if m > v.abs() { m } else { v.abs() });
            if max < GROUP_MAX_EPS {
                continue;
            }
            let mut idx: [usize; 32] = std::array::from_fn(|i| i);
            idx.sort_by(|&a, &b| {
                xb[a]
                    .partial_cmp(&xb[b])
                    .unwrap_or(std::cmp::Ordering::Equal)
            });
            let (mut sumx, mut sumw) = ([0f32; 33], [0f32; 33]);
            for (j, &i) in idx.iter().enumerate() {
                sumx[j + 1] = sumx[j] + weight[i] * xb[i];
                sumw[j + 1] = sumw[j] + weight[i];
            }
            let mut best = -f32::MAX;
            let mut scale = max;
            let mut split = None;
            for i1 in 0..=32 {
                for i2 in i1..=32 {
                    for (shift, xx) in [(1i8, &x_p), (-1, &x_m)] {
                        let sumqx = (sumx[i1] - sumx[0]) * xx[0]
                            + (sumx[i2] - sumx[i1]) * xx[1]
                            + (sumx[32] - sumx[i2]) * xx[2];
                        let sumq2 = (sumw[i1] - sumw[0]) * xx[0] * xx[0]
                            + (sumw[i2] - sumw[i1]) * xx[1] * xx[1]
                            + (sumw[32] - sumw[i2]) * xx[2] * xx[2];
                        if sumq2 > 0.0 && sumqx * sumqx > best * sumq2 {
                            scale = sumqx / sumq2;
                            best = scale * sumqx;
                            split = Some((i1, i2, shift));
                        }
                    }
                }
            }
            let Some((i1, i2, mut shift)) = split else {
                continue;
            };
            let mut l = [0u8; 32];
            for (j, &i) in idx.iter().enumerate() {
                l[i] = (j >= i1) as u8 + (j >= i2) as u8;
            }
            if scale < 0.0 {
                l = l.map(|v| 2 - v);
                scale = -scale;
                shift = -shift;
            }
            let xx = if shift == 1 { &x_p } else { &x_m };
            let mut index = [0u16; 4];
            let mut all_on_grid = true;
            for (k, l8) in l.chunks_exact_mut(8).enumerate() {
                index[k] = match grid.lookup(l8) {
                    Ok(e) => e,
                    Err(near) => {
                        all_on_grid = false;
                        let r = 8 * k..8 * k + 8;
                        grid.best_neighbour(near, &xb[r.clone()], &weight[r], scale, xx, l8)
                    }
                };
            }
            if !all_on_grid {
                let (mut sumqx, mut sumq2) = (0f32, 0f32);
                for ((&v, &w), &q) in xb.iter().zip(&weight).zip(&l) {
                    let q = xx[q as usize];
                    sumqx += w * q * v;
                    sumq2 += w * q * q;
                }
                if sumqx > 0.0 && sumq2 > 0.0 {
                    scale = sumqx / sumq2;
                }
            }
            let mut h = 0u16;
            for (k, &e) in index.iter().enumerate() {
                b[2 + 4 * ib + k] = e as u8;
                h |= (e >> 8) << (3 * k);
            }
            b[34 + 2 * ib..36 + 2 * ib].copy_from_slice(&h.to_le_bytes());
            scales[ib] = scale;
            shifts[ib] = shift;
        }
        let max_scale = scales.iter().fold(0f32, |m, &s| if m > s { m } else { s });
        if max_scale == 0.0 {
            continue;
        }
        let d = max_scale / 15.0;
        b[0..2].copy_from_slice(&f16_bytes(d * 1.125));
        let id = 1.0 / d;
        for (ib, (&s, &shift)) in scales.iter().zip(&shifts).enumerate() {
            let l = nearest_int(0.5 * (id * s - 1.0)).clamp(0, 7) as u8;
            b[35 + 2 * ib] |= (l | if shift == -1 { 8 } else { 0 }) << 4;
        }
    }
}
