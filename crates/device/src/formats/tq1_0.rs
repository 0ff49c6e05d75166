//! TQ1_0: 256 ternary elements in 54 bytes, five trits per byte (1.69 bits each).
//!
//! | bytes  | meaning                                                               |
//! |--------|-----------------------------------------------------------------------|
//! | 0..32  | `qs[j]`: trit `n` (0..5) is element `32n + j`                         |
//! | 32..48 | `qs[32 + j]`: trit `n` is element `160 + 16n + j`                     |
//! | 48..52 | `qh[j]`: trit `n` (0..4) is element `240 + 4n + j`                    |
//! | 52..54 | `d`, f16 scale                                                        |
//!
//! A byte holds its trits as a fixed-point fraction: trit `n` of byte `q` is
//! `((q · 3ⁿ mod 256) · 3) >> 8` (the product wrapping in a byte), in 0..3. Element value:
//! `d * (trit - 1)`.

use super::{blocks_to_values, f16_at, f16_bytes, values_to_blocks, WeightFormat, QK_K};
use gguf::GgmlType;

/// Elements per block.
pub const BLOCK_SIZE: usize = QK_K;
/// Bytes per block.
pub const TYPE_SIZE: usize = 54;

/// TQ1_0's row in [`super::FORMATS`].
pub const FORMAT: WeightFormat = WeightFormat {
    ty: GgmlType::TQ1_0,
    block_size: BLOCK_SIZE,
    type_size: TYPE_SIZE,
    scales: &[52],
    other_scales: None,
    dequantize,
    quantize: Some(quantize),
    quantize_weighted: None,
};

const POW3: [u8; 5] = [1, 3, 9, 27, 81];

/// Trit `n` of byte `q`, in 0..3.
#[inline(always)]
pub fn trit(q: u8, n: usize) -> u8 {
    ((q.wrapping_mul(POW3[n]) as u16 * 3) >> 8) as u8
}

/// Calls `f(element, trit)` for the 256 elements of block `b`.
#[inline(always)]
pub fn for_each_trit(b: &[u8], mut f: impl FnMut(usize, u8)) {
    for n in 0..5 {
        for (j, &q) in b[..32].iter().enumerate() {
            f(32 * n + j, trit(q, n));
        }
        for (j, &q) in b[32..48].iter().enumerate() {
            f(160 + 16 * n + j, trit(q, n));
        }
    }
    for n in 0..4 {
        for (j, &q) in b[48..52].iter().enumerate() {
            f(240 + 4 * n + j, trit(q, n));
        }
    }
}

/// Dequantizes whole blocks. Panics unless `src` is exactly `dst.len() / 256` blocks.
pub fn dequantize(src: &[u8], dst: &mut [f32]) {
    let (blocks, out) = blocks_to_values::<TYPE_SIZE, BLOCK_SIZE>(src, dst);
    for (b, o) in blocks.iter().zip(out) {
        let d = f16_at(b, 52);
        for_each_trit(b, |e, t| o[e] = d * (t as i8 - 1) as f32);
    }
}

/// Quantizes whole blocks as ggml's `quantize_row_tq1_0_ref`: `d` the largest magnitude,
/// each element to the nearest of `-d, 0, d`, trits packed by ceiling division.
/// Panics unless `dst` is exactly `src.len() / 256` blocks.
pub fn quantize(src: &[f32], dst: &mut [u8]) {
    let (values, out) = values_to_blocks::<TYPE_SIZE, BLOCK_SIZE>(src, dst);
    for (x, b) in values.iter().zip(out) {
        let (d, t) = ternary(x);
        b[52..54].copy_from_slice(&f16_bytes(d));
        let pack = |trits: &mut dyn Iterator<Item = u8>, extra: u16| {
            let q = trits.fold(0u16, |q, t| q * 3 + t as u16) * extra;
            (q * 256).div_ceil(243) as u8
        };
        for j in 0..32 {
            b[j] = pack(&mut (0..5).map(|n| t[32 * n + j]), 1);
        }
        for j in 0..16 {
            b[32 + j] = pack(&mut (0..5).map(|n| t[160 + 16 * n + j]), 1);
        }
        for j in 0..4 {
            b[48 + j] = pack(&mut (0..4).map(|n| t[240 + 4 * n + j]), 3);
        }
    }
}

/// `d` (the largest magnitude) and each element's trit `round(x / d) + 1` (ggml's
/// `lroundf`, halves away from zero), for TQ1_0 and TQ2_0.
pub(super) fn ternary(x: &[f32; QK_K]) -> (f32, [u8; QK_K]) {
    let d = x.iter().fold(0f32, |a, v| a.max(v.abs()));
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let mut t = [0u8; QK_K];
    for (t, &v) in t.iter_mut().zip(x) {
        *t = ((v * id).round() as i32 + 1) as u8;
    }
    (d, t)
}
