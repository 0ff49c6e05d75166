//! Quantizing a model as llama.cpp's `llama-quantize` does: the importance matrices its
//! `llama-imatrix` writes ([`Imatrix`]; collected by a [`Collector`] and written as
//! [`ImatrixSums`]), the type each tensor gets ([`plan`]) and the re-encoding of a
//! tensor's rows ([`convert_rows`]). `tandem imatrix` and `tandem quantize` drive them.

mod collect;
mod imatrix;
mod plan;

use device::formats::{dequantize_row, first_bad_block, quantize_row_with};
use gguf::{GgmlType, TensorInfo};

use crate::{Error, Result};

pub use collect::{Collect, Collector, SharedSums};
pub use imatrix::{Imatrix, ImatrixFormat, ImatrixSums, Sums};
pub use plan::{
    fallback, file_type, parse_type, plan, writable_types, Choice, QuantSpec, TensorTypeOverride,
    NEED_IMATRIX,
};

/// The importances `m` holds for tensor `t`: `dims[0]` values per expert (`dims[2]`
/// experts, 1 for a matrix), `None` where `m` has no entry for it. An entry of another
/// length is an error naming the tensor, except for a token embedding, which no
/// importance matrix is collected for and which gets `None` (as llama.cpp ignores it).
pub fn importance_for<'a>(m: &'a Imatrix, t: &TensorInfo) -> Result<Option<&'a [f32]>> {
    let Some(values) = m.get(&t.name) else {
        return Ok(None);
    };
    let want = t.dims[0] * t.dims.get(2).copied().unwrap_or(1);
    if values.len() as u64 == want {
        return Ok(Some(values));
    }
    if t.name.ends_with("token_embd.weight") {
        return Ok(None);
    }
    Err(Error::Quantize(format!(
        "the importance matrix has {} values for tensor '{}', which needs {want} \
         (its row length times its experts)",
        values.len(),
        t.name
    )))
}

/// Re-encodes whole rows of tensor `t`: `src` holds rows `first_row..` in `t`'s type,
/// `dst` gets as many rows in `ty`, each quantized with its expert's part of
/// `importance` (from [`importance_for`]). Errors name the tensor: a type tandem does
/// not read or write, lengths that are not whole rows, or a quantized block with a
/// non-finite scale (non-finite weights in the input).
pub fn convert_rows(
    t: &TensorInfo,
    src: &[u8],
    first_row: usize,
    ty: GgmlType,
    importance: Option<&[f32]>,
    dst: &mut [u8],
) -> Result<()> {
    let bad = |what: String| Error::Quantize(format!("tensor '{}': {what}", t.name));
    let k = t.dims[0] as usize;
    let rows_per_expert = t.dims.get(1).copied().unwrap_or(1).max(1) as usize;
    let row_bytes = |ty: GgmlType| {
        ty.row_bytes(k as u64)
            .map(|b| b as usize)
            .ok_or_else(|| bad(format!("a row of {k} is not whole blocks of {ty}")))
    };
    let (sb, db) = (row_bytes(t.ggml_type)?, row_bytes(ty)?);
    if sb == 0
        || db == 0
        || src.len() / sb != dst.len() / db
        || src.len() % sb + dst.len() % db != 0
    {
        return Err(bad(format!(
            "{} bytes of {} and {} bytes of {ty} are not the same whole rows",
            src.len(),
            t.ggml_type,
            dst.len()
        )));
    }
    let mut row = vec![0f32; k];
    for (i, (s, d)) in src
        .chunks_exact(sb)
        .zip(dst.chunks_exact_mut(db))
        .enumerate()
    {
        let r = first_row + i;
        dequantize_row(t.ggml_type, s, &mut row).map_err(|e| bad(e.to_string()))?;
        let e = r / rows_per_expert;
        let imp = importance
            .map(|m| {
                m.get(e * k..(e + 1) * k)
                    .ok_or_else(|| bad(format!("no importances for row {r} (expert {e})")))
            })
            .transpose()?;
        quantize_row_with(ty, &row, imp, d).map_err(|e| bad(e.to_string()))?;
        if let Some(b) = first_bad_block(ty, d) {
            return Err(bad(format!(
                "row {r} quantized to a block ({b}) with a NaN or infinite scale: \
                 the weights are not finite"
            )));
        }
    }
    Ok(())
}
