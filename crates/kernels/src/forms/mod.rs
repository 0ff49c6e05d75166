//! The CPU's table of weight types: one row per type the CPU backend runs, with the form
//! its kernels read. A quantized type has an integer form (its [`Scheme`], the function
//! decoding a stored row into it, and its packed tile layout where the tiled kernels have
//! one); a float type is dequantized to f32 and multiplied in f32. A type the device
//! registry reads but this table lacks is refused at load (`supports_type`).
//!
//! Adding a quantized type: its decode function (a `DecodedRow` filled from its blocks)
//! and its row in [`FORMS`]; `q8_1.rs` is such a type, in test builds only.

mod lut;
#[cfg(any(test, feature = "test-types"))]
mod q8_1;
mod ternary;

mod iq_grid;

use gguf::GgmlType;

use crate::qmatmul::act::ActLayout::{B256, B32};
use crate::qmatmul::decode::{self, DecodedRow, RowDecoder, Scheme};
use crate::qmatmul::packed::layout::Format;

/// How the CPU runs one weight type.
#[derive(Debug, Clone, Copy)]
pub struct CpuForm {
    pub ty: GgmlType,
    /// The integer kernels' form; `None`: dequantized rows in f32.
    pub int8: Option<IntForm>,
}

/// A quantized type's form for the integer kernels.
#[derive(Debug, Clone, Copy)]
pub struct IntForm {
    pub scheme: Scheme,
    pub decode: RowDecoder,
    /// Its tile layout for the packed kernels, where they have one.
    pub packed: Option<Format>,
}

impl IntForm {
    /// Decodes one stored row of this type (`bytes` holds exactly `k` values) into `row`.
    pub fn decode_row(&self, row: &mut DecodedRow, bytes: &[u8], k: usize) {
        row.decode(self.scheme, self.decode, bytes, k);
    }
}

/// A type multiplied in f32: its rows dequantized (the float types, and a quantized type
/// whose scales fit no integer form, NVFP4's E4M3 scale per 16 values).
const fn float(ty: GgmlType) -> CpuForm {
    CpuForm { ty, int8: None }
}

/// A quantized type: `(offset, signed, has_min)` of its [`Scheme`] over `layout`.
const fn int8(
    ty: GgmlType,
    layout: crate::qmatmul::act::ActLayout,
    (offset, signed, has_min): (i32, bool, bool),
    decode: RowDecoder,
    packed: Option<Format>,
) -> CpuForm {
    let scheme = Scheme {
        layout,
        offset,
        signed,
        has_min,
    };
    CpuForm {
        ty,
        int8: Some(IntForm {
            scheme,
            decode,
            packed,
        }),
    }
}

/// Every weight type the CPU backend runs.
pub static FORMS: &[CpuForm] = &[
    float(GgmlType::F32),
    float(GgmlType::F16),
    float(GgmlType::BF16),
    int8(
        GgmlType::Q4_0,
        B32,
        (8, false, false),
        decode::q4_0,
        Some(Format::Q4_0),
    ),
    int8(
        GgmlType::Q4_1,
        B32,
        (0, false, true),
        decode::q4_1,
        Some(Format::Q4_1),
    ),
    int8(
        GgmlType::Q5_0,
        B32,
        (16, false, false),
        decode::q5_0,
        Some(Format::Q5_0),
    ),
    int8(
        GgmlType::Q5_1,
        B32,
        (0, false, true),
        decode::q5_1,
        Some(Format::Q5_1),
    ),
    int8(
        GgmlType::Q8_0,
        B32,
        (0, true, false),
        decode::q8_0,
        Some(Format::Q8_0),
    ),
    int8(GgmlType::Q2_K, B256, (0, false, true), decode::q2_k, None),
    int8(GgmlType::Q3_K, B256, (4, false, false), decode::q3_k, None),
    int8(
        GgmlType::Q4_K,
        B256,
        (0, false, true),
        decode::q4_k,
        Some(Format::Q4_K),
    ),
    int8(GgmlType::Q5_K, B256, (0, false, true), decode::q5_k, None),
    int8(
        GgmlType::Q6_K,
        B256,
        (32, false, false),
        decode::q6_k,
        Some(Format::Q6_K),
    ),
    lut::IQ4_NL,
    lut::IQ4_XS,
    ternary::TQ1_0,
    ternary::TQ2_0,
    lut::MXFP4,
    float(GgmlType::NVFP4),
    ternary::Q1_0,
    ternary::Q2_0,
    iq_grid::IQ2_XXS,
    iq_grid::IQ2_XS,
    iq_grid::IQ2_S,
    iq_grid::IQ3_XXS,
    iq_grid::IQ3_S,
    iq_grid::IQ1_S,
    iq_grid::IQ1_M,
    #[cfg(any(test, feature = "test-types"))]
    q8_1::FORM,
];

/// The CPU's row of `ty`, `None` for a type it does not run.
pub fn form(ty: GgmlType) -> Option<&'static CpuForm> {
    FORMS.iter().find(|f| f.ty == ty)
}

/// The integer form of `ty`, `None` for the types the CPU multiplies in f32 (and those it
/// does not run).
pub fn int_form(ty: GgmlType) -> Option<&'static IntForm> {
    form(ty)?.int8.as_ref()
}

/// The CPU's column of the support matrix (see [`device::formats::FormOf`]): `f32`,
/// `int8`, or `int8 packed` where the tiled kernels have its layout (on CPUs that have
/// them); `None` for a type the CPU refuses, one the registry does not read included.
pub fn form_name(ty: GgmlType) -> Option<&'static str> {
    if !crate::formats::is_supported(ty) {
        return None;
    }
    Some(match form(ty)?.int8 {
        None => "f32",
        Some(IntForm { packed: None, .. }) => "int8",
        Some(IntForm {
            packed: Some(_), ..
        }) => "int8 packed",
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use device::formats::{format, reference_form, support_matrix};

    #[test]
    fn every_row_is_a_registered_type_once_with_its_block() {
        for (i, f) in FORMS.iter().enumerate() {
            let reg = format(f.ty).unwrap_or_else(|| panic!("{} not registered", f.ty));
            assert!(
                FORMS[i + 1..].iter().all(|g| g.ty != f.ty),
                "{} twice",
                f.ty
            );
            if let Some(int) = f.int8 {
                let block = int.scheme.layout.block();
                assert_eq!(reg.block_size % block, 0, "{}", f.ty);
                if let Some(p) = int.packed {
                    assert_eq!(p.block(), reg.block_size, "{}", f.ty);
                }
            }
        }
    }

    #[test]
    fn the_cpu_runs_every_registered_type_and_packs_twelve() {
        let m = support_matrix(&[("reference", reference_form), ("cpu", form_name)]);
        assert!(m.gaps("cpu").is_empty(), "{m}");
        let packed: Vec<_> = m
            .rows
            .iter()
            .filter(|r| r.2[1] == Some("int8 packed"))
            .map(|r| r.0.to_string())
            .collect();
        assert_eq!(
            packed.join(" "),
            "Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q4_K Q6_K IQ4_NL IQ4_XS MXFP4 IQ2_XXS IQ3_XXS"
        );
        assert_eq!(form_name(GgmlType::Q8_K), None);
    }
}
