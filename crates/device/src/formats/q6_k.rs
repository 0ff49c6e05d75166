//! Q6_K: 256 elements in 210 bytes, 16 sub-blocks of 16 with signed 8-bit scales.
//!
//! | bytes    | meaning                                                            |
//! |----------|--------------------------------------------------------------------|
//! | 0..128   | `ql`: low 4 bits of element `128h + 64n + k` are nibble `n` (0 low, 1 high) of `ql[64h + k]` |
//! | 128..192 | `qh`: high 2 bits of element `128h + 32t + l` are bits `2t..2t+2` of `qh[32h + l]` |
//! | 192..208 | `scales[s]`: i8 scale of sub-block `s`                             |
//! | 208..210 | `d`, f16 super-block scale                                         |
//!
//! Element value, with `s` its sub-block (`element / 16`):
//! `(d * scales[s]) * (q - 32)` with `q` the unsigned 6-bit value.

use super::{blocks_to_values, f16_at, f16_bytes, f16_round, values_to_blocks, WeightFormat, QK_K};
use gguf::GgmlType;

/// Elements per block.
pub const BLOCK_SIZE: usize = QK_K;
/// Bytes per block.
pub const TYPE_SIZE: usize = 210;

/// Q6_K's row in [`super::FORMATS`].
pub const FORMAT: WeightFormat = WeightFormat {
    ty: GgmlType::Q6_K,
    block_size: BLOCK_SIZE,
    type_size: TYPE_SIZE,
    scales: &[208],
    other_scales: None,
    dequantize,
    quantize: Some(quantize),
    quantize_weighted: None,
};

/// Dequantizes whole blocks. Panics unless `src` is exactly `dst.len() / 256` blocks.
pub fn dequantize(src: &[u8], dst: &mut [f32]) {
    let (blocks, out) = blocks_to_values::<TYPE_SIZE, BLOCK_SIZE>(src, dst);
    for (b, o) in blocks.iter().zip(out) {
        let ql = b[0..128].as_chunks::<64>().0;
        let qh = b[128..192].as_chunks::<32>().0;
        let scales = &b[192..208];
        let d = f16_at(b, 208);
        let halves = o
            .as_chunks_mut::<128>()
            .0
            .iter_mut()
            .zip(ql)
            .zip(qh)
            .enumerate();
        for (h, ((o128, ql), qh)) in halves {
            let [o0, o1, o2, o3] = o128.as_chunks_mut::<32>().0 else {
                unreachable!()
            };
            for half in 0..2 {
                let dl = [0, 1, 2, 3].map(|t| d * (scales[8 * h + 2 * t + half] as i8) as f32);
                for l in 16 * half..16 * half + 16 {
                    let (a, c, hi) = (ql[l] as i32, ql[l + 32] as i32, qh[l] as i32);
                    o0[l] = dl[0] * (((a & 0x0F) | ((hi & 3) << 4)) - 32) as f32;
                    o1[l] = dl[1] * (((c & 0x0F) | (((hi >> 2) & 3) << 4)) - 32) as f32;
                    o2[l] = dl[2] * (((a >> 4) | (((hi >> 4) & 3) << 4)) - 32) as f32;
                    o3[l] = dl[3] * (((c >> 4) | ((hi >> 6) << 4)) - 32) as f32;
                }
            }
        }
    }
}

/// Quantizes whole blocks by plain round-to-nearest (no search, unlike llama.cpp):
/// each sub-block of 16 gets `scale = -max / 32` (`max` its first element of largest
/// magnitude); the scales are quantized to i8 against `d = -max scale / 128`, and each
/// element then to the nearest of the 64 levels the decoder will produce.
/// Panics unless `dst` is exactly `src.len() / 256` blocks.
pub fn quantize(src: &[f32], dst: &mut [u8]) {
    let (values, out) = values_to_blocks::<TYPE_SIZE, BLOCK_SIZE>(src, dst);
    for (x, b) in values.iter().zip(out) {
        let mut scales = [0f32; 16];
        for (sc, sub) in scales.iter_mut().zip(x.chunks_exact(16)) {
            *sc = super::q4_0::signed_absmax(sub) / -32.0;
        }
        let max_scale = super::q4_0::signed_absmax(&scales);
        let mut ls = [0i8; 16];
        let mut d = 0.0f32;
        if max_scale != 0.0 {
            let iscale = -128.0 / max_scale;
            d = 1.0 / iscale;
            for (l, &s) in ls.iter_mut().zip(&scales) {
                *l = (iscale * s).round().min(127.0) as i8;
            }
        }
        let dr = f16_round(d);
        let mut levels = [32u8; QK_K];
        for (s, (sub, lv)) in x
            .chunks_exact(16)
            .zip(levels.chunks_exact_mut(16))
            .enumerate()
        {
            let dd = dr * ls[s] as f32;
            if dd == 0.0 {
                continue;
            }
            for (l, &v) in lv.iter_mut().zip(sub) {
                *l = ((v / dd).round().clamp(-32.0, 31.0) + 32.0) as u8;
            }
        }
        let (ql, rest) = b.split_at_mut(128);
        let (qh, rest) = rest.split_at_mut(64);
        ql.fill(0);
        qh.fill(0);
        for (e, &q) in levels.iter().enumerate() {
            let (h, r) = (e / 128, e % 128);
            ql[64 * h + r % 64] |= (q & 0x0F) << (4 * (r / 64));
            qh[32 * h + r % 32] |= (q >> 4) << (2 * (r / 32));
        }
        for (dst, &l) in rest[..16].iter_mut().zip(&ls) {
            *dst = l as u8;
        }
        rest[16..18].copy_from_slice(&f16_bytes(d));
    }
}
