//! Weights on the device: each GGUF block copied as it is and padded to whole words, so
//! that a shader finds every block at a word; the float types in chunks of 32 elements
//! (a row zero-padded to whole chunks). A shader dequantizes 32 elements (a *chunk*) at a
//! time: a block of the 32-element formats, a sub-block of the K-quants.
//!
//! Adding a weight type: its `deq` in `shaders/dequant/` and its row in [`SHADERS`] (the
//! device registry gives its block layout, and its codebooks where it has some);
//! `q8_1.wgsl` is such a type, in test builds only.

use device::formats::{format, grids};
use gguf::GgmlType;

/// One weight type on the GPU: the WGSL of its `deq(b, c, v)`, which writes the 32
/// elements of chunk `c` of the block at byte `b` of `w` into `v`, and the tables it
/// reads. Its block layout is the device registry's (`device::formats::FORMATS`).
#[derive(Debug)]
pub struct Shader {
    pub ty: GgmlType,
    pub wgsl: &'static str,
    pub tables: &'static [Table],
}

/// A table of bytes a `deq` reads, the device registry's own (a codebook): a kernel over
/// the type has its tables one after another (each padded to a word) in a buffer bound
/// as `tables: array<u32>` (group 1, binding 0), this one from word `<name>`.
#[derive(Debug)]
pub struct Table {
    pub name: &'static str,
    /// Its bytes (a function, as the codebooks are i8 tables viewed as bytes).
    pub bytes: fn() -> &'static [u8],
}

/// Every weight type the GPU backend runs, one shader each.
pub static SHADERS: &[Shader] = &[
    shader(GgmlType::F32, include_str!("shaders/dequant/f32.wgsl")),
    shader(GgmlType::F16, include_str!("shaders/dequant/f16.wgsl")),
    shader(GgmlType::BF16, include_str!("shaders/dequant/bf16.wgsl")),
    shader(GgmlType::Q4_0, include_str!("shaders/dequant/q4_0.wgsl")),
    shader(GgmlType::Q4_1, include_str!("shaders/dequant/q4_1.wgsl")),
    shader(GgmlType::Q5_0, include_str!("shaders/dequant/q5_0.wgsl")),
    shader(GgmlType::Q5_1, include_str!("shaders/dequant/q5_1.wgsl")),
    shader(GgmlType::Q8_0, include_str!("shaders/dequant/q8_0.wgsl")),
    shader(GgmlType::Q2_K, include_str!("shaders/dequant/q2_k.wgsl")),
    shader(GgmlType::Q3_K, include_str!("shaders/dequant/q3_k.wgsl")),
    shader(GgmlType::Q4_K, include_str!("shaders/dequant/q4_k.wgsl")),
    shader(GgmlType::Q5_K, include_str!("shaders/dequant/q5_k.wgsl")),
    shader(GgmlType::Q6_K, include_str!("shaders/dequant/q6_k.wgsl")),
    shader(
        GgmlType::IQ4_NL,
        include_str!("shaders/dequant/iq4_nl.wgsl"),
    ),
    shader(
        GgmlType::IQ4_XS,
        include_str!("shaders/dequant/iq4_xs.wgsl"),
    ),
    shader(GgmlType::TQ1_0, include_str!("shaders/dequant/tq1_0.wgsl")),
    shader(GgmlType::TQ2_0, include_str!("shaders/dequant/tq2_0.wgsl")),
    shader(GgmlType::MXFP4, include_str!("shaders/dequant/mxfp4.wgsl")),
    shader(GgmlType::NVFP4, include_str!("shaders/dequant/nvfp4.wgsl")),
    shader(GgmlType::Q1_0, include_str!("shaders/dequant/q1_0.wgsl")),
    shader(GgmlType::Q2_0, include_str!("shaders/dequant/q2_0.wgsl")),
    #[cfg(any(test, feature = "test-types"))]
    shader(GgmlType::Q8_1, include_str!("shaders/dequant/q8_1.wgsl")),
    Shader {
        ty: GgmlType::IQ2_XXS,
        wgsl: include_str!("shaders/dequant/iq2_xxs.wgsl"),
        tables: &[IQ2XXS_GRID, KSIGNS],
    },
    Shader {
        ty: GgmlType::IQ2_XS,
        wgsl: include_str!("shaders/dequant/iq2_xs.wgsl"),
        tables: &[IQ2XS_GRID, KSIGNS],
    },
    Shader {
        ty: GgmlType::IQ2_S,
        wgsl: include_str!("shaders/dequant/iq2_s.wgsl"),
        tables: &[IQ2S_GRID],
    },
    Shader {
        ty: GgmlType::IQ3_XXS,
        wgsl: include_str!("shaders/dequant/iq3_xxs.wgsl"),
        tables: &[IQ3XXS_GRID, KSIGNS],
    },
    Shader {
        ty: GgmlType::IQ3_S,
        wgsl: include_str!("shaders/dequant/iq3_s.wgsl"),
        tables: &[IQ3S_GRID],
    },
    Shader {
        ty: GgmlType::IQ1_S,
        wgsl: include_str!("shaders/dequant/iq1_s.wgsl"),
        tables: &[IQ1S_GRID],
    },
    Shader {
        ty: GgmlType::IQ1_M,
        wgsl: include_str!("shaders/dequant/iq1_m.wgsl"),
        tables: &[IQ1S_GRID],
    },
];

const fn shader(ty: GgmlType, wgsl: &'static str) -> Shader {
    Shader {
        ty,
        wgsl,
        tables: &[],
    }
}

/// The IQ codebooks (`device::formats::grids`): an entry's i8 values in 1 word (4 values)
/// or 2 (8 values); and the sign patterns, 4 to a word.
const IQ2XXS_GRID: Table = Table {
    name: "IQ2XXS_GRID",
    bytes: || bytemuck::cast_slice(grids::IQ2XXS.as_flattened()),
};
const IQ2XS_GRID: Table = Table {
    name: "IQ2XS_GRID",
    bytes: || bytemuck::cast_slice(grids::IQ2XS.as_flattened()),
};
const IQ2S_GRID: Table = Table {
    name: "IQ2S_GRID",
    bytes: || bytemuck::cast_slice(grids::IQ2S.as_flattened()),
};
const IQ3XXS_GRID: Table = Table {
    name: "IQ3XXS_GRID",
    bytes: || bytemuck::cast_slice(grids::IQ3XXS.as_flattened()),
};
const IQ3S_GRID: Table = Table {
    name: "IQ3S_GRID",
    bytes: || bytemuck::cast_slice(grids::IQ3S.as_flattened()),
};
const IQ1S_GRID: Table = Table {
    name: "IQ1S_GRID",
    bytes: || bytemuck::cast_slice(grids::IQ1S.as_flattened()),
};
const KSIGNS: Table = Table {
    name: "KSIGNS",
    bytes: || &grids::KSIGNS,
};

/// The GPU's column of the support matrix (see `device::formats::FormOf`): `wgsl` for a
/// type it has a shader for and the registry reads, `None` for one it refuses at load.
pub fn form_name(ty: GgmlType) -> Option<&'static str> {
    Layout::of(ty).map(|_| "wgsl")
}

/// How a type sits on the device.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Layout {
    /// Elements per block (32 for the float types' chunks).
    pub block_elems: usize,
    /// Bytes of a block in GGUF.
    pub block_bytes: usize,
    /// Bytes of a block on the device (`block_bytes` padded to a word).
    pub padded: usize,
    /// A float type, kept in chunks of 32 elements (a row zero-padded to whole chunks).
    float: bool,
    /// The WGSL of its `deq(b, c, v)`.
    pub wgsl: &'static str,
    /// The tables its `deq` reads.
    tables: &'static [Table],
}

impl Layout {
    /// The layout of a type with a row in [`SHADERS`] and in the device registry.
    pub fn of(ty: GgmlType) -> Option<Layout> {
        let shader = SHADERS.iter().find(|s| s.ty == ty)?;
        let f = format(ty)?;
        let float = f.block_size == 1;
        let block_elems = if float { 32 } else { f.block_size };
        let block_bytes = block_elems / f.block_size * f.type_size;
        Some(Layout {
            block_elems,
            block_bytes,
            padded: block_bytes.next_multiple_of(4),
            float,
            wgsl: shader.wgsl,
            tables: shader.tables,
        })
    }

    /// The contents of the buffer bound as `tables` to a kernel over this type (see
    /// [`Table`]); `None` for a type without tables.
    pub fn table_bytes(&self) -> Option<Vec<u8>> {
        if self.tables.is_empty() {
            return None;
        }
        let mut out = Vec::new();
        for t in self.tables {
            out.extend_from_slice((t.bytes)());
            out.resize(out.len().next_multiple_of(4), 0);
        }
        Some(out)
    }

    /// Device bytes of a row of `n_cols` elements.
    pub fn row_bytes(&self, n_cols: usize) -> usize {
        n_cols.div_ceil(self.block_elems) * self.padded
    }

    /// The WGSL constants, tables binding and `deq` a kernel over this type is prefixed
    /// with.
    pub fn prelude(&self) -> String {
        let mut tables = String::new();
        if !self.tables.is_empty() {
            tables += "@group(1) @binding(0) var<storage, read> tables: array<u32>;\n";
            let mut at = 0;
            for t in self.tables {
                tables += &format!("const {}: u32 = {at}u;\n", t.name);
                at += (t.bytes)().len().div_ceil(4);
            }
        }
        format!(
            "const BLOCK_BYTES: u32 = {}u;\nconst CPB: u32 = {}u;\n{}\n{tables}{}",
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
        if self.float {
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
