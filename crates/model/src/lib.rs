//! Models: hyper-parameters from GGUF, memory-mapped weights, and the forward pass written
//! once against the [`device::Device`] ops, over a batch of rows from several sequences and
//! over any contiguous range of layers.
//!
//! Stages: [`Model::embed`] (tokens → hidden), [`Model::forward_layers`] (hidden → hidden
//! over `layers`), [`Model::output`] (hidden → logits), each on the weights
//! [`Model::upload`] put on a device. Every op is batch-invariant, so a row's logits do not
//! depend on the batch it was computed in.

pub mod arch;
mod error;
mod forward;
mod head;
mod hparams;
mod layers;
pub mod synthetic;
mod upload;
mod weights;

use std::path::Path;
use std::sync::Arc;

use device::Role;
use gguf::{GgmlType, GgufFile};

pub use arch::{Arch, ArchSpec, Block, ExpertWidth, Experts, RoutingDefaults, SlidingPattern};
pub use device::{Gating, MoeStats, Row};
pub use error::{Error, Result};
pub use forward::Scratch;
pub use head::SubsetHead;
pub use hparams::{HParams, MoeParams, SharedExpert, Sliding};
pub use upload::{DeviceWeights, FfnMats, LayerMats, MlpMats, MoeMats};
pub use weights::{Ffn, LayerWeights, Mlp, MoeWeights, Part, Stage, Weight, Weights};

/// A loaded model: its hyper-parameters and the weights of its stage, checked, in the map.
/// A device holds them once [`Model::upload`] has run.
pub struct Model {
    pub file: Arc<GgufFile>,
    pub hparams: HParams,
    /// The part of the model this holds (the whole model unless loaded with
    /// [`Model::load_stage`]).
    pub stage: Stage,
    pub weights: Weights,
    /// The output head restricted to part of the vocabulary ([`Model::restrict_head`]).
    pub head: Option<SubsetHead>,
}

impl Model {
    /// Maps the file and checks every tensor the architecture needs by name, shape and type.
    pub fn load(path: impl AsRef<Path>) -> Result<Model> {
        Self::load_stage(path, Part::Whole)
    }

    /// [`Model::load`] for a part of the model: only the tensors of its stage are checked
    /// and counted; the others are never read. A split that leaves one side no blocks is an
    /// error before anything is loaded.
    pub fn load_stage(path: impl AsRef<Path>, part: Part) -> Result<Model> {
        let file = GgufFile::open(path)?;
        let hparams = HParams::from_metadata(&file.header.metadata)?;
        let stage = part.stage(hparams.n_layer)?;
        let weights = weights::Loader { file: &file }.load(&hparams, &stage)?;
        Ok(Model {
            file: Arc::new(file),
            hparams,
            stage,
            weights,
            head: None,
        })
    }

    /// Bytes of weights the stage holds on a device whose matrices take `matrix_bytes(ty,
    /// n_rows, n_cols, role)`: its matrices, the embedding table (a tied output head is a
    /// second matrix on top), the vectors copied at load, and a restricted head in place of
    /// the full one.
    pub fn weight_bytes(&self, matrix_bytes: &dyn Fn(GgmlType, usize, usize, Role) -> u64) -> u64 {
        let w = &self.weights;
        let of = |m: &Weight, role| matrix_bytes(m.ty, m.n_rows, m.n_cols, role);
        let head = match (&self.head, &w.output) {
            (Some(h), _) => {
                let (ty, r, c) = h.shape();
                matrix_bytes(ty, r, c, Role::Multiply)
            }
            (None, Some(o)) => of(o, Role::Multiply),
            (None, None) => 0,
        };
        let blocks: u64 = w
            .layers
            .iter()
            .flat_map(|l| {
                [&l.attn_q, &l.attn_k, &l.attn_v, &l.attn_output]
                    .into_iter()
                    .chain(l.ffn.matrices())
            })
            .map(|m| of(m, Role::Multiply))
            .sum();
        let table = w.token_embd.as_ref().map_or(0, |t| of(t, Role::Rows));
        let vectors: usize = w.layers.iter().map(LayerWeights::vector_len).sum::<usize>()
            + w.output_norm.as_ref().map_or(0, Vec::len);
        head + blocks + table + 4 * vectors as u64
    }
}
