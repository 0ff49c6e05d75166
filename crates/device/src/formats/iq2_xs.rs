//! IQ2_XS: 256 elements in 74 bytes, 32 entries of [`IQ2XS`] (8 values each) with their
//! signs, and a 4-bit scale per 16 values.
//!
//! | bytes  | meaning                                                                 |
//! |--------|-------------------------------------------------------------------------|
//! | 0..2   | `d`, f16 super-block scale                                              |
//! | 2..66  | u16 `q[e]` for elements `8e..8e + 8`: bits 0..9 the grid entry, bits 9..16 the [`KSIGNS`] index |
//! | 66..74 | scales: the low nibble of byte `t` is `ls` of elements `32t..32t + 16`, the high nibble of the next 16 |
//!
//! Element value, with `db = (d * (0.5 + ls)) * 0.25` its scale, `grid` its entry and
//! `sign` ±1 by bit `j` of the entry's sign pattern: `(db * grid[j]) * sign`.

use super::grids::search::{even_signs, iq2xs, max_of, Scan};
use super::grids::{sign, u16_at, IQ2XS, KSIGNS};
use super::iq3_xxs::{nibble, write_d};
use super::kquants::{imatrix_weights, sum_squares, GROUP_MAX_EPS};
use super::{blocks_to_values, f16_at, values_to_blocks, WeightFormat, QK_K};
use gguf::GgmlType;

/// Elements per block.
pub const BLOCK_SIZE: usize = QK_K;
/// Bytes per block.
pub const TYPE_SIZE: usize = 74;
/// Offset of the scale bytes.
pub const SCALES: usize = 66;

/// IQ2_XS's row in [`super::FORMATS`].
pub const FORMAT: WeightFormat = WeightFormat {
    ty: GgmlType::IQ2_XS,
    block_size: BLOCK_SIZE,
    type_size: TYPE_SIZE,
    scales: &[0],
    other_scales: None,
    dequantize,
    quantize: Some(quantize),
    quantize_weighted: Some(quantize_weighted),
};

/// The 4-bit scale `ls` of elements `16s..16s + 16` (`s` in 0..16) of a block whose scale
/// bytes start at `b[at]`; IQ2_S shares the layout.
#[inline(always)]
pub fn nibble_scale(b: &[u8], at: usize, s: usize) -> u8 {
    (b[at + s / 2] >> (4 * (s % 2))) & 15
}

/// The scale of the 16 values whose `ls` is given: `(d * (0.5 + ls)) * 0.25`.
#[inline(always)]
pub fn scale_of(d: f32, ls: u8) -> f32 {
    d * (0.5 + ls as f32) * 0.25
}

/// Entry `e` (0..32, elements `8e..8e + 8`) of block `b`: its grid values and sign pattern.
#[inline(always)]
pub fn entry(b: &[u8], e: usize) -> (&'static [i8; 8], u8) {
    let q = u16_at(b, 2 + 2 * e) as usize;
    (&IQ2XS[q & 511], KSIGNS[q >> 9])
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

/// Quantizes whole blocks as [`quantize_weighted`] does with every importance 1 (ggml
/// has no quantizer without importances for IQ2_XS). Panics unless `dst` is exactly
/// `src.len() / 256` blocks.
pub fn quantize(src: &[f32], dst: &mut [u8]) {
    quantize_weighted(src, &vec![1.0; src.len()], dst);
}

/// The scan of ggml's IQ2_XS and IQ2_S quantizers: 19 scales 0.1 levels apart, entries
/// off the grid snapped again at the best.
pub(super) const SCAN: Scan = Scan {
    steps: 9,
    step: 0.1,
    refit_all: false,
};

/// Quantizes whole blocks, element `i`'s squared error weighted by
/// `importance[i] * sqrt(sigma2 + x[i]²)` (`sigma2`: the super-block's mean square), as
/// ggml's `quantize_row_iq2_xs_impl`: each group of 16 takes the magnitudes of its
/// values (signs by [`even_signs`]) and gets its scale and two grid entries by
/// [`super::grids::search::GridSearch::search_group`]; the group scales are quantized
/// to 4 bits against `d = largest / 31`. Panics unless `dst` is exactly
/// `src.len() / 256` blocks and `importance` is as long as `src`.
pub fn quantize_weighted(src: &[f32], importance: &[f32], dst: &mut [u8]) {
    assert_eq!(importance.len(), src.len(), "one importance per value");
    let grid = iq2xs();
    let (values, out) = values_to_blocks::<TYPE_SIZE, BLOCK_SIZE>(src, dst);
    let importance = importance.as_chunks::<BLOCK_SIZE>().0;
    for ((x, imp), b) in values.iter().zip(importance).zip(out) {
        b.fill(0);
        let mut scales = [0f32; 16];
        let sigma2 = sum_squares(x) / QK_K as f32;
        for (ib, (xb, qw)) in x.chunks_exact(16).zip(imp.chunks_exact(16)).enumerate() {
            let mut weight = [0f32; 16];
            imatrix_weights(xb, qw, sigma2, &mut weight);
            let mut xval = [0f32; 16];
            let mut signs = even_signs(xb, &weight, &mut xval);
            let max = max_of(&xval);
            if max < GROUP_MAX_EPS {
                continue;
            }
            let mut l = [0u8; 16];
            let mut scale = grid.search_group(&xval, &weight, max, &SCAN, &mut l);
            if scale < 0.0 {
                scale = -scale;
                signs = signs.map(|s| !s & 127);
            }
            for (k, l8) in l.chunks_exact(8).enumerate() {
                let e = grid.lookup(l8).expect("the levels are a grid entry");
                let q = e | (signs[k] as u16) << 9;
                b[2 + 4 * ib + 2 * k..4 + 4 * ib + 2 * k].copy_from_slice(&q.to_le_bytes());
            }
            scales[ib] = scale;
        }
        let Some(id) = write_d(&scales, 1.0, b) else {
            b.fill(0);
            continue;
        };
        write_nibble_scales(&scales, id, &mut b[SCALES..SCALES + 8]);
    }
}

/// The 16 group scales as 4-bit `l` (see [`nibble`]) two to a byte, the even group in the
/// low nibble: IQ2_XS's and IQ2_S's layout.
pub(super) fn write_nibble_scales(scales: &[f32; 16], id: f32, out: &mut [u8]) {
    for (o, pair) in out.iter_mut().zip(scales.chunks_exact(2)) {
        *o = nibble(id, pair[0]) | nibble(id, pair[1]) << 4;
    }
}
