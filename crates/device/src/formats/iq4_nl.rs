//! IQ4_NL: 32 elements in 18 bytes, 4-bit indices into a non-linear table of 16 levels.
//!
//! | bytes  | meaning                                                        |
//! |--------|----------------------------------------------------------------|
//! | 0..2   | `d`, f16 scale                                                 |
//! | 2..18  | `qs[j]`: low nibble is element `j`, high nibble element `j+16` |
//!
//! Element value: `d * KVALUES[q]` with `q` the nibble.
//!
//! The quantizer searches the scale that minimizes the weighted squared error over the
//! block, as ggml's `quantize_row_iq4_nl_impl` does (see [`sub_block_scale`]); IQ4_XS
//! shares it for its sub-blocks.

use super::q4_0::signed_absmax;
use super::{blocks_to_values, f16_at, f16_bytes, f16_round, values_to_blocks, WeightFormat};
use gguf::GgmlType;

/// Elements per block.
pub const BLOCK_SIZE: usize = 32;
/// Bytes per block.
pub const TYPE_SIZE: usize = 18;

/// The 16 levels a nibble selects (IQ4_NL and IQ4_XS).
pub const KVALUES: [i8; 16] = [
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
];

/// IQ4_NL's row in [`super::FORMATS`].
pub const FORMAT: WeightFormat = WeightFormat {
    ty: GgmlType::IQ4_NL,
    block_size: BLOCK_SIZE,
    type_size: TYPE_SIZE,
    scales: &[0],
    other_scales: None,
    dequantize,
    quantize: Some(quantize),
    quantize_weighted: Some(quantize_weighted),
};

/// Dequantizes whole blocks. Panics unless `src` is exactly `dst.len() / 32` blocks.
pub fn dequantize(src: &[u8], dst: &mut [f32]) {
    let (blocks, out) = blocks_to_values::<TYPE_SIZE, BLOCK_SIZE>(src, dst);
    for (b, o) in blocks.iter().zip(out) {
        nibbles(f16_at(b, 0), &b[2..18], o);
    }
}

/// `o[j] = d * KVALUES[low nibble of qs[j]]`, `o[j + 16]` from the high nibble.
pub(super) fn nibbles(d: f32, qs: &[u8], o: &mut [f32]) {
    let (lo, hi) = o.split_at_mut(16);
    for ((l, h), &q) in lo.iter_mut().zip(hi.iter_mut()).zip(qs) {
        *l = d * KVALUES[(q & 0x0F) as usize] as f32;
        *h = d * KVALUES[(q >> 4) as usize] as f32;
    }
}

/// Quantizes whole blocks, each element's squared error weighted by `x²` (the large
/// elements fit best). Panics unless `dst` is exactly `src.len() / 32` blocks.
pub fn quantize(src: &[f32], dst: &mut [u8]) {
    quantize_with(src, None, dst);
}

/// Quantizes whole blocks, element `i`'s squared error weighted by
/// `importance[i] * sqrt(sigma2 + x[i]²)` (`sigma2`: twice the block's mean square), as
/// ggml weighs an importance matrix. Panics unless `dst` is exactly `src.len() / 32`
/// blocks and `importance` is as long as `src`.
pub fn quantize_weighted(src: &[f32], importance: &[f32], dst: &mut [u8]) {
    assert_eq!(importance.len(), src.len(), "one importance per value");
    quantize_with(src, Some(importance), dst);
}

fn quantize_with(src: &[f32], importance: Option<&[f32]>, dst: &mut [u8]) {
    let (values, out) = values_to_blocks::<TYPE_SIZE, BLOCK_SIZE>(src, dst);
    let mut w = [0f32; BLOCK_SIZE];
    for (i, (x, b)) in values.iter().zip(out).enumerate() {
        let imp = importance.map(|m| &m[i * BLOCK_SIZE..(i + 1) * BLOCK_SIZE]);
        element_weights(x, imp, &mut w);
        let d = f16_round(sub_block_scale(x, &w));
        b[0..2].copy_from_slice(&f16_bytes(d));
        pack_nibbles(x, d, &mut b[2..18]);
    }
}

/// Quantizes whole blocks as ggml's `quantize_row_iq4_nl_ref` does (its `from_float`, which
/// writes a KV cache): each element's level is the nearest to it scaled so that the largest
/// element maps to `KVALUES[0]`, and `d` the least-squares scale of those levels, weights
/// `x²`; no further candidates are tried. Panics unless `dst` is exactly `src.len() / 32`
/// blocks.
pub fn quantize_first_candidate(src: &[f32], dst: &mut [u8]) {
    let (values, out) = values_to_blocks::<TYPE_SIZE, BLOCK_SIZE>(src, dst);
    let mut w = [0f32; BLOCK_SIZE];
    for (x, b) in values.iter().zip(out) {
        element_weights(x, None, &mut w);
        let max = signed_absmax(x);
        let id = if max.abs() < 1e-15 {
            0.0
        } else {
            KVALUES[0] as f32 / max
        };
        let (sqx, sq2) = fit(x, &w, id);
        let d = if sq2 > 0.0 { sqx / sq2 } else { 0.0 };
        b[0..2].copy_from_slice(&f16_bytes(d));
        pack_levels(x, id, &mut b[2..18]);
    }
}

/// Candidate scales tried on each side of the one that maps the largest element to
/// `KVALUES[0]` (ggml's `ntry`).
const NTRY: i32 = 7;

/// The weight of each element of one (super-)block `x` in its scale search, into `w`:
/// `importance[j] * sqrt(sigma2 + x[j]²)` with `sigma2 = 2 * mean(x²)` where an
/// importance is given, else `x[j]²`. A sub-block of 32 whose importances are all zero
/// (columns no calibration input reached) is weighted by `x²` instead of being zeroed.
pub(super) fn element_weights(x: &[f32], importance: Option<&[f32]>, w: &mut [f32]) {
    let plain = |w: &mut [f32], x: &[f32]| {
        for (w, &v) in w.iter_mut().zip(x) {
            *w = v * v;
        }
    };
    let Some(imp) = importance else {
        return plain(w, x);
    };
    let sigma2 = 2.0 * x.iter().map(|v| v * v).sum::<f32>() / x.len() as f32;
    for ((w, &v), &q) in w.iter_mut().zip(x).zip(imp) {
        *w = q * (sigma2 + v * v).sqrt();
    }
    for (w, x) in w.chunks_exact_mut(32).zip(x.chunks_exact(32)) {
        if w.iter().all(|&v| v == 0.0) {
            plain(w, x);
        }
    }
}

/// The scale `d` of one sub-block `x` that minimizes `sum(w * (x - d * KVALUES[q])²)`
/// over `2 * NTRY + 2` candidate assignments of levels: each candidate maps the largest
/// element near one end of the table (`id = (t + KVALUES[0]) / max` for `t` in
/// `-NTRY..=NTRY`, and `-KVALUES[0] / max`), takes every element's nearest level, and
/// gets the least-squares scale of those levels; the candidate that reduces the error
/// most wins. 0 for a block of (near) zeros.
pub(super) fn sub_block_scale(x: &[f32], w: &[f32]) -> f32 {
    let max = signed_absmax(x);
    if max.abs() < 1e-15 {
        return 0.0;
    }
    let (sqx, sq2) = fit(x, w, -(KVALUES[0] as f32) / max);
    let mut d = if sq2 > 0.0 { sqx / sq2 } else { 0.0 };
    let mut best = d * sqx;
    for t in -NTRY..=NTRY {
        let (sqx, sq2) = fit(x, w, (t + KVALUES[0] as i32) as f32 / max);
        if sq2 > 0.0 && sqx * sqx > best * sq2 {
            d = sqx / sq2;
            best = d * sqx;
        }
    }
    d
}

/// The index of the level of `KVALUES` nearest `v` (the upper one of a tie).
pub(super) fn nearest_level(v: f32) -> u8 {
    let upper = KVALUES.partition_point(|&k| (k as f32) < v);
    match upper {
        0 => 0,
        16 => 15,
        u => {
            let (lo, hi) = (KVALUES[u - 1] as f32, KVALUES[u] as f32);
            if v - lo < hi - v {
                u as u8 - 1
            } else {
                u as u8
            }
        }
    }
}

/// Packs the 32 values `x` at scale `d` (0: every value 0) into IQ4_NL's 16 bytes of
/// nibbles, each value to its nearest level.
pub(super) fn pack_nibbles(x: &[f32], d: f32, qs: &mut [u8]) {
    pack_levels(x, if d != 0.0 { 1.0 / d } else { 0.0 }, qs);
}

/// `qs[j]`: the nearest levels to `id · x[j]` (low nibble) and `id · x[j + 16]` (high).
fn pack_levels(x: &[f32], id: f32, qs: &mut [u8]) {
    let (lo, hi) = x.split_at(16);
    for ((q, &l), &h) in qs.iter_mut().zip(lo).zip(hi) {
        *q = nearest_level(id * l) | nearest_level(id * h) << 4;
    }
}

/// `(Σ w·q·x, Σ w·q²)` over the block, `q` each element's nearest level to `id · x`: the
/// least-squares fit of a scale to those levels.
fn fit(x: &[f32], w: &[f32], id: f32) -> (f32, f32) {
    x.iter().zip(w).fold((0f32, 0f32), |(sqx, sq2), (&v, &w)| {
        let q = KVALUES[nearest_level(id * v) as usize] as f32;
        (sqx + w * q * v, sq2 + w * q * q)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_level_picks_the_closest_and_clamps() {
        for (v, want) in [
            (-500.0, 0),
            (-127.0, 0),
            (-115.4, 1),
            (-115.6, 0),
            (0.0, 8),
            (-4.5, 8),
        ] {
            assert_eq!(nearest_level(v), want, "{v}");
        }
        assert_eq!(nearest_level(101.0), 15, "a tie goes up");
        assert_eq!(nearest_level(1e9), 15);
        for (i, &k) in KVALUES.iter().enumerate() {
            assert_eq!(nearest_level(k as f32) as usize, i);
        }
    }
}
