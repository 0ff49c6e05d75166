//! Weights on the device: each GGUF block copied as it is and padded to whole words, so
//! that a shader finds every block at a word; the float types in chunks of 32 elements
//! (a row zero-padded to whole chunks). A shader dequantizes 32 elements (a *chunk*) at a
//! time: a block of the 32-element formats, a sub-block of the K-quants.

use gguf::GgmlType;

/// How a type sits on the device.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Layout {
    /// Elements per block (32 for the float types' chunks).
    pub block_elems: usize,
    /// Bytes of a block in GGUF.
    pub block_bytes: usize,
    /// Bytes of a block on the device (`block_bytes` padded to a word).
    pub padded: usize,
    /// The WGSL of its `deq(b, c, v)`.
    pub wgsl: &'static str,
}

impl Layout {
    pub fn of(ty: GgmlType) -> Option<Layout> {
        use GgmlType::*;
        let (block_elems, block_bytes, wgsl) = match ty {
            F32 => (32, 128, include_str!("shaders/dequant/f32.wgsl")),
            F16 => (32, 64, include_str!("shaders/dequant/f16.wgsl")),
            BF16 => (32, 64, include_str!("shaders/dequant/bf16.wgsl")),
            Q4_0 => (32, 18, include_str!("shaders/dequant/q4_0.wgsl")),
            Q4_1 => (32, 20, include_str!("shaders/dequant/q4_1.wgsl")),
            Q5_0 => (32, 22, include_str!("shaders/dequant/q5_0.wgsl")),
            Q5_1 => (32, 24, include_str!("shaders/dequant/q5_1.wgsl")),
            Q8_0 => (32, 34, include_str!("shaders/dequant/q8_0.wgsl")),
            Q2_K => (256, 84, include_str!("shaders/dequant/q2_k.wgsl")),
            Q3_K => (256, 110, include_str!("shaders/dequant/q3_k.wgsl")),
            Q4_K => (256, 144, include_str!("shaders/dequant/q4_k.wgsl")),
            Q5_K => (256, 176, include_str!("shaders/dequant/q5_k.wgsl")),
            Q6_K => (256, 210, include_str!("shaders/dequant/q6_k.wgsl")),
            _ => return None,
        };
        Some(Layout {
            block_elems,
            block_bytes,
            padded: block_bytes.next_multiple_of(4),
            wgsl,
        })
    }

    fn is_float(&self) -> bool {
        self.block_elems == 32 && self.block_bytes >= 64
    }

    /// Device bytes of a row of `n_cols` elements.
    pub fn row_bytes(&self, n_cols: usize) -> usize {
        n_cols.div_ceil(self.block_elems) * self.padded
    }

    /// The WGSL constants and `deq` a kernel over this type is prefixed with.
    pub fn prelude(&self) -> String {
        format!(
            "const BLOCK_BYTES: u32 = {}u;\nconst CPB: u32 = {}u;\n{}\n{}",
            self.padded,
            self.block_elems / 32,
            include_str!("shaders/dequant/common.wgsl"),
            self.wgsl
        )
    }

    /// Rows `rows` of a matrix of `n_cols` elements per row (GGUF bytes `src`) as the
    /// device keeps them.
    pub fn repack(&self, src: &[u8], n_cols: usize, rows: std::ops::Range<usize>) -> Vec<u8> {
        let row_bytes = self.row_bytes(n_cols);
        let mut out = vec![0u8; rows.len() * row_bytes];
        if self.is_float() {
            let src_row = self.block_bytes / 32 * n_cols;
            for (i, r) in rows.enumerate() {
                out[i * row_bytes..i * row_bytes + src_row]
                    .copy_from_slice(&src[r * src_row..(r + 1) * src_row]);
            }
            return out;
        }
        let src_row = n_cols / self.block_elems * self.block_bytes;
        for (i, r) in rows.enumerate() {
            let from = src[r * src_row..(r + 1) * src_row].chunks_exact(self.block_bytes);
            let to = out[i * row_bytes..(i + 1) * row_bytes].chunks_exact_mut(self.padded);
            for (b, o) in from.zip(to) {
                o[..self.block_bytes].copy_from_slice(b);
            }
        }
        out
    }
}
