//! Models: hyper-parameters from GGUF, memory-mapped weights, and a forward pass over a
//! batch of rows from several sequences and over any contiguous range of layers.
//!
//! Stages: [`Model::embed`] (tokens → hidden), [`Model::forward_layers`] (hidden → hidden
//! over `layers`), [`Model::output`] (hidden → logits). Every kernel used is
//! batch-invariant, so a row's logits do not depend on the batch it was computed in.

pub mod arch;
mod error;
mod forward;
mod head;
mod hparams;
mod layers;
pub mod synthetic;
mod weights;

use std::path::Path;

use gguf::GgufFile;
use kernels::{Precision, ThreadPool};

pub use arch::{Arch, ArchSpec, ExpertWidth, Experts, RoutingDefaults};
pub use error::{Error, Result};
pub use forward::{Batch, MoeStats, Row, Scratch};
pub use head::SubsetHead;
pub use hparams::{Gating, HParams, MoeParams, SharedExpert};
pub use weights::{
    Ffn, LayerWeights, Mlp, MoeWeights, Part, Progress, Repack, Stage, Weight, Weights,
};

/// A loaded model. Weights stay in the memory map.
pub struct Model {
    pub file: GgufFile,
    pub hparams: HParams,
    /// The part of the model this holds (the whole model unless loaded with
    /// [`Model::load_stage`]).
    pub stage: Stage,
    pub weights: Weights,
    /// The output head restricted to part of the vocabulary ([`Model::restrict_head`]).
    pub head: Option<SubsetHead>,
}

impl Model {
    /// Maps the file, checks every tensor the architecture needs by name, shape and type,
    /// and repacks the matrices for the tiled kernels ([`Repack::Auto`]).
    pub fn load(path: impl AsRef<Path>) -> Result<Model> {
        Self::load_with(path, Repack::Auto, &|_, _| {})
    }

    /// [`Model::load`] with the choice of repacking, telling `progress` how far it is.
    pub fn load_with(
        path: impl AsRef<Path>,
        repack: Repack,
        progress: &Progress<'_>,
    ) -> Result<Model> {
        Self::load_stage(path, Part::Whole, repack, progress)
    }

    /// [`Model::load_with`] for a part of the model: only the tensors of its stage are
    /// checked, repacked and counted; the others are never read. A split that leaves one
    /// side no blocks is an error before anything is loaded.
    pub fn load_stage(
        path: impl AsRef<Path>,
        part: Part,
        repack: Repack,
        progress: &Progress<'_>,
    ) -> Result<Model> {
        let file = GgufFile::open(path)?;
        let hparams = HParams::from_metadata(&file.header.metadata)?;
        let stage = part.stage(hparams.n_layer)?;
        let mut weights = weights::Loader { file: &file }.load(&hparams, &stage)?;
        if repack == Repack::Auto {
            let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
            weights.repack(&file, threads, progress);
        }
        Ok(Model {
            file,
            hparams,
            stage,
            weights,
            head: None,
        })
    }

    /// Bytes of weights the stage holds once loaded with [`Repack::Auto`]: its matrices at
    /// their packed size, the embedding table read by rows from the map (a tied output head
    /// is a packed copy of it on top), the vectors copied at load and a restricted head.
    /// Loaded with [`Repack::Off`] it holds less.
    pub fn weight_bytes(&self) -> u64 {
        let w = &self.weights;
        let matrices: usize = w.matrices().iter().map(|m| m.planned_bytes()).sum();
        let table = w.token_embd.as_ref().map_or(0, |t| t.range.len());
        let vectors: usize = w.layers.iter().map(LayerWeights::vector_len).sum::<usize>()
            + w.output_norm.as_ref().map_or(0, Vec::len);
        let head = self.head.as_ref().map_or(0, |h| h.bytes());
        (matrices + table + 4 * vectors + head) as u64
    }

    /// The weights of block `il` (one of the stage's).
    pub fn layer(&self, il: usize) -> &LayerWeights {
        assert!(
            self.stage.layers.contains(&il),
            "block {il} is not in the stage's {:?}",
            self.stage.layers
        );
        &self.weights.layers[il - self.stage.layers.start]
    }

    /// The output head (the stage must hold it).
    pub(crate) fn output_head(&self) -> &Weight {
        self.weights
            .output
            .as_ref()
            .expect("the stage holds the output head")
    }

    /// Embedding rows for `tokens` into `hidden` (`[tokens.len(), n_embd]`).
    pub fn embed(&self, tokens: &[u32], hidden: &mut [f32]) -> Result<()> {
        let e = self.hparams.n_embd;
        assert_eq!(hidden.len(), tokens.len() * e);
        let table = self
            .weights
            .token_embd
            .as_ref()
            .ok_or(Error::NotInStage("the embeddings"))?
            .view(&self.file);
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

    /// Logits of the rows `rows` of `hidden` (`[n, n_embd]`), computed `picked.len() /
    /// n_embd` rows at a time through the `picked` (`[g, n_embd]`) and `logits`
    /// (`[g, n_vocab]`) buffers; `on_logits(i, logits)` gets the logits of `rows[i]`.
    #[allow(clippy::too_many_arguments)]
    pub fn output_rows(
        &self,
        hidden: &[f32],
        rows: &[usize],
        picked: &mut [f32],
        logits: &mut [f32],
        pool: &ThreadPool,
        precision: Precision,
        on_logits: &mut dyn FnMut(usize, &mut [f32]),
    ) {
        let (e, nv) = (self.hparams.n_embd, self.n_logits());
        let group_rows = (picked.len() / e).min(logits.len() / nv).max(1);
        for (gi, group) in rows.chunks(group_rows).enumerate() {
            for (j, &r) in group.iter().enumerate() {
                picked[j * e..(j + 1) * e].copy_from_slice(&hidden[r * e..(r + 1) * e]);
            }
            let g = group.len();
            self.output(&mut picked[..g * e], &mut logits[..g * nv], pool, precision);
            for j in 0..g {
                on_logits(gi * group_rows + j, &mut logits[j * nv..(j + 1) * nv]);
            }
        }
    }

    /// Final norm and output head: `logits` (`[n, n_logits]`) for `hidden` (`[n, n_embd]`).
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
            let norm = self.weights.output_norm.as_ref();
            let norm = norm.expect("the stage holds the output head");
            kernels::ops::rms_norm_inplace(row, norm, hp.rms_eps);
        }
        let head = match &self.head {
            Some(h) => h.view(),
            None => self.output_head().view(&self.file),
        };
        kernels::matmul(pool, &head, hidden, logits, precision);
    }
}
