//! The backend seam. A [`Device`] owns buffers on its memory, the weights uploaded to it
//! (repacked the way its kernels want), the storage of the KV pool, and the ops of one
//! forward. A model's recipe (the `model` crate) is written against this trait only; a
//! backend (`kernels::cpu`, the [`reference`] one here, GPU ones) implements it.
//!
//! What a new backend implements: every method of [`Device`]; [`Device::supports`] and
//! [`Device::supports_type`] say which ops and weight types it runs, and an executor
//! refuses at load a model that needs something else (never falling back to another device
//! behind the user's back). Its results are checked op by op against [`reference`].
//!
//! Shared here because every backend must agree on them: the GGUF block formats
//! ([`formats`]), the row and step types, and the parameters of each op.

mod attn;
pub mod conformance;
mod delegate;
pub mod encoder;
pub mod formats;
pub mod host;
pub mod host_kv;
pub mod hyper;
pub mod math;
pub mod records;
pub mod reference;
pub mod scan;
mod seam;
pub mod sparse;
pub mod state;
pub mod testing;

pub use attn::{last_positions, last_seen, AttnSpec, StepEnds};
pub use scan::{ScanIo, ScanSpec};
pub use seam::{
    block_places, checkpoint_row, rope_angles, seq_runs, BlockConv, Buf, Bytes, Cols, ConvSpec,
    DeltaIo, DeltaSpec, Device, ExpertNet, Gating, Mat, MatOut, MatrixSource, MoeScratch, MoeSpec,
    MoeStats, Op, OpTime, Progress, Role, RopeMode, RopeScaling, RopeSpec, Routing, Row,
    ScratchShape, SharedIn, Step, Tables, NOT_BIDIRECTIONAL,
};

use gguf::GgmlType;

#[doc(hidden)]
pub use {gguf as __gguf, kv as __kv};

/// How activations meet quantized weights, a choice made when a backend is opened (the
/// CPU's kernels honour it; a backend without an exact path ignores it).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Precision {
    /// Activations quantized to 8 bits per block, integer dot products (llama.cpp's
    /// arithmetic; fast).
    #[default]
    Int8,
    /// Weights dequantized to f32 and f32 dot products (exact to f32 rounding; slow).
    /// Used to check a model against a float64 reference.
    F32,
}

/// Errors of the seam: a type or op a device cannot run, bad lengths, device memory.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("tensor type {0} is not supported")]
    UnsupportedType(GgmlType),
    #[error("{what}: expected {expected} elements or bytes, got {got}")]
    LengthMismatch {
        what: &'static str,
        expected: usize,
        got: usize,
    },
    #[error("the {device} device cannot {what}")]
    Unsupported { device: String, what: String },
    #[error("token id {id} is outside the vocabulary of {n_vocab}")]
    TokenOutOfRange { id: u32, n_vocab: usize },
}

pub type Result<T> = std::result::Result<T, Error>;

/// The index of the largest value of `row` (the first of equals; 0 when none is above
/// negative infinity).
pub fn argmax(row: &[f32]) -> u32 {
    let mut best = 0;
    let mut best_v = f32::NEG_INFINITY;
    for (i, &v) in row.iter().enumerate() {
        if v > best_v {
            best = i;
            best_v = v;
        }
    }
    best as u32
}

/// Appends to `out` the `k` largest values of `row` (`k <= row.len()`) with their indices,
/// largest first, equal values by the lower index first, NaN counted as -∞: the order
/// [`Device::top_k_rows`] states. A partial selection, then a sort of the `k` chosen.
pub fn top_k(row: &[f32], k: usize, out: &mut Vec<(u32, f32)>) {
    assert!(k <= row.len(), "top {k} of {} values", row.len());
    let key = |v: f32| if v.is_nan() { f32::NEG_INFINITY } else { v };
    let order = |a: &(u32, f32), b: &(u32, f32)| {
        key(b.1)
            .partial_cmp(&key(a.1))
            .expect("no NaN left")
            .then(a.0.cmp(&b.0))
    };
    if k == 0 {
        return;
    }
    let mut all: Vec<(u32, f32)> = row
        .iter()
        .enumerate()
        .map(|(i, &v)| (i as u32, v))
        .collect();
    all.select_nth_unstable_by(k - 1, order);
    all[..k].sort_unstable_by(order);
    out.extend_from_slice(&all[..k]);
}

#[cfg(test)]
mod tests {
    #[test]
    fn top_k_orders_by_value_then_index_with_nan_last() {
        let row = [1.0, 3.0, f32::NAN, 3.0, -0.0, 0.0];
        let mut out = Vec::new();
        super::top_k(&row, 6, &mut out);
        let order: Vec<u32> = out.iter().map(|p| p.0).collect();
        assert_eq!(order, [1, 3, 0, 4, 5, 2]);
        out.clear();
        super::top_k(&row, 0, &mut out);
        assert!(out.is_empty());
    }
}
