//! Q3_K: 256 elements in 110 bytes, 16 sub-blocks of 16 with signed 6-bit scales.
//!
//! | bytes    | meaning                                                              |
//! |----------|----------------------------------------------------------------------|
//! | 0..32    | `hmask`: bit `k` of `hmask[l]` is the high bit of element `32k + l`  |
//! | 32..96   | `qs`: low 2 bits of element `128h + 32k + l` are bits `2k..2k+2` of `qs[32h + l]` |
//! | 96..108  | `scales`: 16 6-bit values, see below                                 |
//! | 108..110 | `d`, f16 super-block scale                                           |
//!
//! Scale `s` (0..16): low 4 bits are the low nibble of `scales[s]` for `s < 8`, the
//! high nibble of `scales[s - 8]` otherwise; high 2 bits are bits `2(s/4)..2(s/4)+2`
//! of `scales[8 + s % 4]`; the stored value minus 32 is the signed scale.
//!
//! Element value: `(d * scale) * q` with `q = low2 - 4` when the high bit is clear
//! and `q = low2` when it is set.

use super::{blocks_to_values, f16_at, WeightFormat, QK_K};
use gguf::GgmlType;

/// Elements per block.
pub const BLOCK_SIZE: usize = QK_K;
/// Bytes per block.
pub const TYPE_SIZE: usize = 110;

/// Q3_K's row in [`super::FORMATS`].
pub const FORMAT: WeightFormat = WeightFormat {
    ty: GgmlType::Q3_K,
    block_size: BLOCK_SIZE,
    type_size: TYPE_SIZE,
    scales: &[108],
    other_scales: None,
    dequantize,
    quantize: None,
    quantize_weighted: None,
};

/// Dequantizes whole blocks. Panics unless `src` is exactly `dst.len() / 256` blocks.
pub fn dequantize(src: &[u8], dst: &mut [f32]) {
    let (blocks, out) = blocks_to_values::<TYPE_SIZE, BLOCK_SIZE>(src, dst);
    for (b, o) in blocks.iter().zip(out) {
        let hmask: &[u8; 32] = b[0..32].try_into().unwrap();
        let qs = b[32..96].as_chunks::<32>().0;
        let scales = &b[96..108];
        let d = f16_at(b, 108);
        for (h, (o128, q32)) in o.as_chunks_mut::<128>().0.iter_mut().zip(qs).enumerate() {
            let [o0, o1, o2, o3] = o128.as_chunks_mut::<32>().0 else {
                unreachable!()
            };
            for half in 0..2 {
                let dl = [0, 1, 2, 3].map(|k| d * scale(scales, 8 * h + 2 * k + half) as f32);
                for l in 16 * half..16 * half + 16 {
                    let q = q32[l] as i32;
                    // Bit k of `m` is set where element k of this column has no -4 offset.
                    let m = (hmask[l] >> (4 * h)) as i32;
                    o0[l] = dl[0] * ((q & 3) - (((m & 1) ^ 1) << 2)) as f32;
                    o1[l] = dl[1] * (((q >> 2) & 3) - ((((m >> 1) & 1) ^ 1) << 2)) as f32;
                    o2[l] = dl[2] * (((q >> 4) & 3) - ((((m >> 2) & 1) ^ 1) << 2)) as f32;
                    o3[l] = dl[3] * ((q >> 6) - ((((m >> 3) & 1) ^ 1) << 2)) as f32;
                }
            }
        }
    }
}

/// The signed 6-bit scale of sub-block `s` (0..16) from the 12 packed bytes.
#[inline(always)]
fn scale(scales: &[u8], s: usize) -> i32 {
    let low = if s < 8 {
        scales[s] & 0x0F
    } else {
        scales[s - 8] >> 4
    };
    let high = (scales[8 + s % 4] >> (2 * (s / 4))) & 3;
    (low | (high << 4)) as i32 - 32
}
