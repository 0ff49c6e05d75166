//! Models: hyper-parameters from GGUF, memory-mapped weights, and a forward pass over a
//! batch of rows from several sequences and over any contiguous range of layers.
//!
//! Stages: [`Model::embed`] (tokens → hidden), [`Model::forward_layers`] (hidden → hidden
//! over `layers`), [`Model::output`] (hidden → logits). Every kernel used is
//! batch-invariant, so a row's logits do not depend on the batch it was computed in.

pub mod arch;
mod error;
mod forward;
mod hparams;
mod layers;
mod weights;

use std::path::Path;

use gguf::GgufFile;
use kernels::{Precision, ThreadPool};

pub use arch::{Arch, ArchSpec};
pub use error::{Error, Result};
pub use forward::{Batch, Row, Scratch};
pub use hparams::HParams;
pub use weights::{LayerWeights, Weight, Weights};

/// A loaded model. Weights stay in the memory map.
pub struct Model {
    pub file: GgufFile,
    pub hparams: HParams,
    pub weights: Weights,
}

impl Model {
    /// Maps the file and checks every tensor the architecture needs by name, shape and type.
    pub fn load(path: impl AsRef<Path>) -> Result<Model> {
        let file = GgufFile::open(path)?;
        let hparams = HParams::from_metadata(&file.header.metadata)?;
        let weights = weights::Loader { file: &file }.load(&hparams)?;
        Ok(Model {
            file,
            hparams,
            weights,
        })
    }

    /// Bytes of tensor data the model maps (all tensors of the file).
    pub fn weight_bytes(&self) -> u64 {
        self.file.header.tensors.iter().map(|t| t.n_bytes).sum()
    }

    /// Embedding rows for `tokens` into `hidden` (`[tokens.len(), n_embd]`).
    pub fn embed(&self, tokens: &[u32], hidden: &mut [f32]) -> Result<()> {
        let e = self.hparams.n_embd;
        assert_eq!(hidden.len(), tokens.len() * e);
        let table = self.weights.token_embd.view(&self.file);
        for (&t, row) in tokens.iter().zip(hidden.chunks_exact_mut(e)) {
            if t as usize >= table.n_rows {
                return Err(Error::TokenOutOfRange {
                    id: t,
                    n_vocab: table.n_rows,
                });
            }
            table.dequantize_row(t as usize, row);
        }
        Ok(())
    }

    /// Final norm and output head: `logits` (`[n, n_vocab]`) for `hidden` (`[n, n_embd]`).
    /// `hidden` is normalized in place.
    pub fn output(
        &self,
        hidden: &mut [f32],
        logits: &mut [f32],
        pool: &ThreadPool,
        precision: Precision,
    ) {
        let hp = &self.hparams;
        for row in hidden.chunks_exact_mut(hp.n_embd) {
            kernels::ops::rms_norm_inplace(row, &self.weights.output_norm, hp.rms_eps);
        }
        kernels::matmul(
            pool,
            &self.weights.output.view(&self.file),
            hidden,
            logits,
            precision,
        );
    }
}
