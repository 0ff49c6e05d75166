//! Q2_K: 256 elements in 84 bytes, 16 sub-blocks of 16 with 4-bit scale and min.
//!
//! | bytes  | meaning                                                                |
//! |--------|------------------------------------------------------------------------|
//! | 0..16  | `scales[s]` for sub-block `s`: low nibble scale, high nibble min       |
//! | 16..80 | `qs`: element `128h + 32k + l` is bits `2k..2k+2` of `qs[32h + l]`     |
//! | 80..82 | `d`, f16 super-block scale                                             |
//! | 82..84 | `dmin`, f16 super-block min scale                                      |
//!
//! Element value, with `s` its sub-block (`element / 16`):
//! `(d * (scales[s] & 15)) * q - (dmin * (scales[s] >> 4))`, each product rounded.

use super::{blocks_to_values, f16_at, WeightFormat, QK_K};
use gguf::GgmlType;

/// Elements per block.
pub const BLOCK_SIZE: usize = QK_K;
/// Bytes per block.
pub const TYPE_SIZE: usize = 84;

/// Q2_K's row in [`super::FORMATS`].
pub const FORMAT: WeightFormat = WeightFormat {
    ty: GgmlType::Q2_K,
    block_size: BLOCK_SIZE,
    type_size: TYPE_SIZE,
    scales: &[80, 82],
    other_scales: None,
    dequantize,
    quantize: None,
    quantize_weighted: None,
};

/// Dequantizes whole blocks. Panics unless `src` is exactly `dst.len() / 256` blocks.
pub fn dequantize(src: &[u8], dst: &mut [f32]) {
    let (blocks, out) = blocks_to_values::<TYPE_SIZE, BLOCK_SIZE>(src, dst);
    for (b, o) in blocks.iter().zip(out) {
        let d = f16_at(b, 80);
        let dmin = f16_at(b, 82);
        let scales = &b[0..16];
        let qs = b[16..80].as_chunks::<32>().0;
        for (h, (o128, q32)) in o.as_chunks_mut::<128>().0.iter_mut().zip(qs).enumerate() {
            let [o0, o1, o2, o3] = o128.as_chunks_mut::<32>().0 else {
                unreachable!()
            };
            for half in 0..2 {
                let sc = |k: usize| scales[8 * h + 2 * k + half];
                let dl = [0, 1, 2, 3].map(|k| d * (sc(k) & 0x0F) as f32);
                let ml = [0, 1, 2, 3].map(|k| dmin * (sc(k) >> 4) as f32);
                for l in 16 * half..16 * half + 16 {
                    let q = q32[l];
                    o0[l] = dl[0] * (q & 3) as f32 - ml[0];
                    o1[l] = dl[1] * ((q >> 2) & 3) as f32 - ml[1];
                    o2[l] = dl[2] * ((q >> 4) & 3) as f32 - ml[2];
                    o3[l] = dl[3] * (q >> 6) as f32 - ml[3];
                }
            }
        }
    }
}
