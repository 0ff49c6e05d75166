//! IQ4_XS: 256 elements in 136 bytes, IQ4_NL's levels with a 6-bit scale per 32.
//!
//! | bytes  | meaning                                                                |
//! |--------|------------------------------------------------------------------------|
//! | 0..2   | `d`, f16 super-block scale                                             |
//! | 2..4   | `scales_h`, u16: bits `2j..2j+2` are the high bits of sub-block `j`'s scale |
//! | 4..8   | `scales_l`: nibble `j % 2` of byte `j / 2` is the low 4 bits of scale `j` |
//! | 8..136 | 8 sub-blocks of 16 bytes, each laid out as IQ4_NL's `qs`               |
//!
//! Element value, with `j` its sub-block (`element / 32`) and `ls` its 6-bit scale:
//! `(d * (ls - 32)) * KVALUES[q]`.
//!
//! The quantizer finds each sub-block's scale by IQ4_NL's weighted search
//! ([`super::iq4_nl::sub_block_scale`]), then quantizes the 8 scales to 6 bits against
//! `d = -(largest scale) / 32`, as ggml's `quantize_iq4_xs` does.

use super::iq4_nl::{element_weights, nibbles, pack_nibbles, sub_block_scale};
use super::q4_0::signed_absmax;
use super::{blocks_to_values, f16_at, f16_bytes, f16_round, values_to_blocks, WeightFormat, QK_K};
use gguf::GgmlType;

/// Elements per block.
pub const BLOCK_SIZE: usize = QK_K;
/// Bytes per block.
pub const TYPE_SIZE: usize = 136;

/// IQ4_XS's row in [`super::FORMATS`].
pub const FORMAT: WeightFormat = WeightFormat {
    ty: GgmlType::IQ4_XS,
    block_size: BLOCK_SIZE,
    type_size: TYPE_SIZE,
    scales: &[0],
    other_scales: None,
    dequantize,
    quantize: Some(quantize),
    quantize_weighted: Some(quantize_weighted),
};

/// The signed scale (`ls - 32`, in -32..=31) of sub-block `j` (0..8) of block `b`.
#[inline(always)]
pub fn scale(b: &[u8], j: usize) -> i32 {
    let high = (u16::from_le_bytes([b[2], b[3]]) >> (2 * j)) & 3;
    let low = (b[4 + j / 2] >> (4 * (j % 2))) & 15;
    (low as i32 | (high as i32) << 4) - 32
}

/// Dequantizes whole blocks. Panics unless `src` is exactly `dst.len() / 256` blocks.
pub fn dequantize(src: &[u8], dst: &mut [f32]) {
    let (blocks, out) = blocks_to_values::<TYPE_SIZE, BLOCK_SIZE>(src, dst);
    for (b, o) in blocks.iter().zip(out) {
        let d = f16_at(b, 0);
        for (j, (o, qs)) in o
            .chunks_exact_mut(32)
            .zip(b[8..].chunks_exact(16))
            .enumerate()
        {
            nibbles(d * scale(b, j) as f32, qs, o);
        }
    }
}

/// Quantizes whole blocks, each element's squared error weighted by `x²`.
/// Panics unless `dst` is exactly `src.len() / 256` blocks.
pub fn quantize(src: &[f32], dst: &mut [u8]) {
    quantize_with(src, None, dst);
}

/// Quantizes whole blocks, element `i`'s squared error weighted by
/// `importance[i] * sqrt(sigma2 + x[i]²)` (`sigma2`: twice the super-block's mean square).
/// Panics unless `dst` is exactly `src.len() / 256` blocks and `importance` is as long
/// as `src`.
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
        let mut scales = [0f32; 8];
        for (s, (x, w)) in scales
            .iter_mut()
            .zip(x.chunks_exact(32).zip(w.chunks_exact(32)))
        {
            *s = sub_block_scale(x, w);
        }
        let d = f16_round(-signed_absmax(&scales) / 32.0);
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        b[0..2].copy_from_slice(&f16_bytes(d));
        let mut scales_h = 0u16;
        b[4..8].fill(0);
        for (j, (&s, x)) in scales.iter().zip(x.chunks_exact(32)).enumerate() {
            let l = (id * s).round().clamp(-32.0, 31.0) as i32;
            pack_nibbles(x, d * l as f32, &mut b[8 + 16 * j..24 + 16 * j]);
            let ls = (l + 32) as u16;
            b[4 + j / 2] |= ((ls & 15) as u8) << (4 * (j % 2));
            scales_h |= (ls >> 4) << (2 * j);
        }
        b[2..4].copy_from_slice(&scales_h.to_le_bytes());
    }
}
