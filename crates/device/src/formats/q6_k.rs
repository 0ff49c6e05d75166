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
//!
//! The quantizers are ggml's (`quantize_row_q6_K_ref`, and `quantize_row_q6_K_impl`
//! with importances), bit for bit.

use super::kquants::{make_qx_quants, nearest_int, signed_max, GROUP_MAX_EPS};
use super::{blocks_to_values, f16_at, f16_bytes, values_to_blocks, WeightFormat, QK_K};
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
    quantize_weighted: Some(quantize_weighted),
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

/// Quantizes whole blocks: each sub-block of 16 gets its scale by [`make_qx_quants`]
/// (levels -32..32, `x²`-weighted); the scales are quantized to i8 against
/// `d = -(largest-magnitude scale) / 128`. Panics unless `dst` is exactly
/// `src.len() / 256` blocks.
pub fn quantize(src: &[f32], dst: &mut [u8]) {
    let (values, out) = values_to_blocks::<TYPE_SIZE, BLOCK_SIZE>(src, dst);
    for (x, b) in values.iter().zip(out) {
        let mut w = [0f32; QK_K];
        for (w, &v) in w.iter_mut().zip(x) {
            *w = v * v;
        }
        write_block(x, &w, b);
    }
}

/// Quantizes whole blocks, element `i`'s squared error weighted by `importance[i]`, as
/// ggml's `quantize_row_q6_K_impl` does. Panics unless `dst` is exactly
/// `src.len() / 256` blocks and `importance` is as long as `src`.
pub fn quantize_weighted(src: &[f32], importance: &[f32], dst: &mut [u8]) {
    assert_eq!(importance.len(), src.len(), "one importance per value");
    let (values, out) = values_to_blocks::<TYPE_SIZE, BLOCK_SIZE>(src, dst);
    let importance = importance.as_chunks::<BLOCK_SIZE>().0;
    for ((x, w), b) in values.iter().zip(importance).zip(out) {
        write_block(x, w, b);
    }
}

/// Quantizes one block `x` with weights `w` into `b`: the sub-block scales by
/// [`make_qx_quants`], then each element to the nearest level of its decoded scale (a
/// sub-block whose decoded scale is 0 keeps the levels of its search); a block whose
/// scales are all (near) 0 is all zero bytes.
fn write_block(x: &[f32; QK_K], w: &[f32; QK_K], b: &mut [u8]) {
    let mut levels = [0i8; QK_K];
    let mut scales = [0f32; 16];
    let subs = x.chunks_exact(16).zip(w.chunks_exact(16));
    for ((s, (x, w)), l) in scales.iter_mut().zip(subs).zip(levels.chunks_exact_mut(16)) {
        *s = make_qx_quants(32, x, w, l);
    }
    let (max_scale, max_abs) = signed_max(&scales);
    b.fill(0);
    if max_abs < GROUP_MAX_EPS {
        return;
    }
    let iscale = -128.0 / max_scale;
    b[208..210].copy_from_slice(&f16_bytes(1.0 / iscale));
    let d = f16_at(b, 208);
    for (j, (sub, l)) in x
        .chunks_exact(16)
        .zip(levels.chunks_exact_mut(16))
        .enumerate()
    {
        let ls = nearest_int(iscale * scales[j]).min(127) as i8;
        b[192 + j] = ls as u8;
        let dd = d * ls as f32;
        if dd == 0.0 {
            continue;
        }
        for (l, &v) in l.iter_mut().zip(sub) {
            *l = (nearest_int(v / dd).clamp(-32, 31) + 32) as i8;
        }
    }
    let (ql, qh) = b[..192].split_at_mut(128);
    for (e, &q) in levels.iter().enumerate() {
        let (h, r, q) = (e / 128, e % 128, q as u8);
        ql[64 * h + r % 64] |= (q & 0x0F) << (4 * (r / 64));
        qh[32 * h + r % 32] |= (q >> 4) << (2 * (r / 32));
    }
}
