//! IQ4_NL: 32 elements in 18 bytes, 4-bit indices into a non-linear table of 16 levels.
//!
//! | bytes  | meaning                                                        |
//! |--------|----------------------------------------------------------------|
//! | 0..2   | `d`, f16 scale                                                 |
//! | 2..18  | `qs[j]`: low nibble is element `j`, high nibble element `j+16` |
//!
//! Element value: `d * KVALUES[q]` with `q` the nibble.

use super::{blocks_to_values, f16_at, WeightFormat};
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
    quantize: None,
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
