//! IQ3_XXS: 256 elements in 98 bytes, 64 entries of [`IQ3XXS`] (4 values each), signs
//! per 8 values and a 4-bit scale per 32.
//!
//! | bytes  | meaning                                                                  |
//! |--------|--------------------------------------------------------------------------|
//! | 0..2   | `d`, f16 super-block scale                                               |
//! | 2..66  | byte `e`: the grid entry of elements `4e..4e + 4`                        |
//! | 66..98 | u32 `aux[g]` for elements `32g..32g + 32`: bits `7i..7i + 7` the [`KSIGNS`] index of elements `32g + 8i..+8`, bits 28..32 the scale `ls` |
//!
//! Element value, with `db = (d * (0.5 + ls)) * 0.5` its group's scale, `grid` its entry
//! and `sign` ±1 by its bit of the sign pattern: `(db * grid[j]) * sign`.
//!
//! The quantizers are ggml's (`quantize_row_iq3_xxs_impl`, with and without importances);
//! llama.cpp runs them only with an importance matrix.

use super::grids::search::{even_signs, iq3xxs, max_of, Scan};
use super::grids::{sign, u32_at, IQ3XXS, KSIGNS};
use super::kquants::{imatrix_weights, nearest_int, sum_squares};
use super::{blocks_to_values, f16_at, f16_bytes, values_to_blocks, WeightFormat, QK_K};
use gguf::GgmlType;

/// Elements per block.
pub const BLOCK_SIZE: usize = QK_K;
/// Bytes per block.
pub const TYPE_SIZE: usize = 98;

/// IQ3_XXS's row in [`super::FORMATS`].
pub const FORMAT: WeightFormat = WeightFormat {
    ty: GgmlType::IQ3_XXS,
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
    d * (0.5 + (u32_at(b, 66 + 4 * g) >> 28) as f32) * 0.5
}

/// Elements `8k..8k + 8` (`k` in 0..32) of block `b`: the grid values of their two entries
/// and their sign pattern.
#[inline(always)]
pub fn octet(b: &[u8], k: usize) -> ([&'static [i8; 4]; 2], u8) {
    let aux = u32_at(b, 66 + 4 * (k / 4));
    let grids = [
        &IQ3XXS[b[2 + 2 * k] as usize],
        &IQ3XXS[b[3 + 2 * k] as usize],
    ];
    (grids, KSIGNS[(aux >> (7 * (k % 4))) as usize & 127])
}

/// Dequantizes whole blocks. Panics unless `src` is exactly `dst.len() / 256` blocks.
pub fn dequantize(src: &[u8], dst: &mut [f32]) {
    dequantize_octets::<TYPE_SIZE>(src, dst, group_scale, octet);
}

/// `octet(block, k)`: the two grid entries and the sign pattern of elements `8k..8k + 8`.
pub(super) type Octet = fn(&[u8], usize) -> ([&'static [i8; 4]; 2], u8);

/// Dequantizes whole blocks of `TS` bytes of IQ3_XXS or IQ3_S: element `8k + j` is
/// `scale(block, d, k / 4) · grid · sign` of `octet(block, k)`. Panics unless `src` is
/// exactly `dst.len() / 256` blocks.
pub(super) fn dequantize_octets<const TS: usize>(
    src: &[u8],
    dst: &mut [f32],
    scale: fn(&[u8], f32, usize) -> f32,
    octet: Octet,
) {
    let (blocks, out) = blocks_to_values::<TS, BLOCK_SIZE>(src, dst);
    for (b, o) in blocks.iter().zip(out) {
        let d = f16_at(b, 0);
        for (k, o8) in o.chunks_exact_mut(8).enumerate() {
            let db = scale(b, d, k / 4);
            let (grids, signs) = octet(b, k);
            for (j, v) in o8.iter_mut().enumerate() {
                *v = db * grids[j / 4][j % 4] as f32 * sign(signs, j);
            }
        }
    }
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

/// Groups of 32 below this largest magnitude quantize to zero (ggml's
/// `GROUP_MAX_EPS_IQ3_XXS`).
const GROUP_MAX_EPS: f32 = 1e-8;

/// ggml's `quantize_row_iq3_xxs_impl`: each group of 32 takes the magnitudes of its
/// values (signs by [`even_signs`]) and gets its scale and grid entries by
/// [`super::grids::search::GridSearch::search_group`] (31 scales 0.2 levels apart); the group scales are
/// quantized to 4 bits against `d = largest / 31`, stored as `1.0125 d`.
fn quantize_with(src: &[f32], importance: Option<&[f32]>, dst: &mut [u8]) {
    const SCAN: Scan = Scan {
        steps: 15,
        step: 0.2,
        refit_all: false,
    };
    let grid = iq3xxs();
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
            let mut signs = even_signs(xb, &weight, &mut xval);
            let max = max_of(&xval);
            if max < GROUP_MAX_EPS {
                continue;
            }
            let mut l = [0u8; 32];
            let mut scale = grid.search_group(&xval, &weight, max, &SCAN, &mut l);
            if scale < 0.0 {
                scale = -scale;
                signs = signs.map(|s| !s & 127);
            }
            for (k, l4) in l.chunks_exact(4).enumerate() {
                b[2 + 8 * ib + k] = grid.lookup(l4).expect("the levels are a grid entry") as u8;
            }
            let aux = signs
                .iter()
                .enumerate()
                .fold(0u32, |a, (k, &s)| a | (s as u32) << (7 * k));
            b[66 + 4 * ib..70 + 4 * ib].copy_from_slice(&aux.to_le_bytes());
            scales[ib] = scale;
        }
        let Some(id) = write_d(&scales, 1.0125, b) else {
            b.fill(0);
            continue;
        };
        for (ib, &s) in scales.iter().enumerate() {
            b[69 + 4 * ib] |= nibble(id, s) << 4;
        }
    }
}

/// The weights of one group `xb`: `importance * sqrt(sigma2 + x²)` where importances are
/// given, else `x²`.
pub(super) fn group_weights(xb: &[f32], importance: Option<&[f32]>, sigma2: f32) -> [f32; 32] {
    let mut w = [0f32; 32];
    let w_n = &mut w[..xb.len()];
    match importance {
        Some(imp) => imatrix_weights(xb, imp, sigma2, w_n),
        None => {
            for (w, &v) in w_n.iter_mut().zip(xb) {
                *w = v * v;
            }
        }
    }
    w
}

/// Writes the block scale `d = largest / 31` (times ggml's `fudge`) of the group `scales`
/// into `b[0..2]` and returns `1 / d`, or `None` when every scale is 0.
pub(super) fn write_d(scales: &[f32], fudge: f32, b: &mut [u8]) -> Option<f32> {
    let max_scale = scales.iter().fold(0f32, |m, &s| if m > s { m } else { s });
    if max_scale == 0.0 {
        return None;
    }
    let d = max_scale / 31.0;
    b[0..2].copy_from_slice(&f16_bytes(d * fudge));
    Some(1.0 / d)
}

/// A group scale `s` as its 4-bit `l` against `1 / d = id`: `s ≈ d (2l + 1)`.
pub(super) fn nibble(id: f32, s: f32) -> u8 {
    nearest_int(0.5 * (id * s - 1.0)).clamp(0, 15) as u8
}
