use std::ops::Range;

use kernels::{Precision, ThreadPool};
use kv::{KvPool, SeqKv};

use crate::hparams::HParams;
use crate::layers::{attention, ffn};
use crate::Model;

/// One row of a forward batch: the token at `pos` of sequence `seqs[seq]`.
///
/// Contract: positions `0..pos` of that sequence are cached or come earlier in the batch,
/// and the sequence has KV room reserved for `pos`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Row {
    pub pos: usize,
    pub seq: usize,
}

/// The rows of one forward pass and the sequences their `Row::seq` indexes.
#[derive(Clone, Copy)]
pub struct Batch<'a> {
    pub rows: &'a [Row],
    pub seqs: &'a [&'a SeqKv],
}

/// Activation buffers for up to `max_rows` rows, allocated once.
pub struct Scratch {
    pub max_rows: usize,
    /// How matmuls treat activations (default: 8-bit).
    pub precision: Precision,
    /// `[rows, n_embd]` normalized input of a block.
    pub(crate) x: Vec<f32>,
    /// `[rows, q_dim]`.
    pub(crate) q: Vec<f32>,
    /// `[rows, kv_dim]`.
    pub(crate) k: Vec<f32>,
    pub(crate) v: Vec<f32>,
    /// `[rows, q_dim]` attention output before the projection.
    pub(crate) attn: Vec<f32>,
    /// `[rows, n_embd]` block output before the residual add.
    pub(crate) proj: Vec<f32>,
    /// `[rows, n_ff]`.
    pub(crate) gate: Vec<f32>,
    pub(crate) up: Vec<f32>,
}

impl Scratch {
    pub fn new(hp: &HParams, max_rows: usize) -> Scratch {
        let z = |w: usize| vec![0f32; max_rows * w];
        Scratch {
            max_rows,
            precision: Precision::default(),
            x: z(hp.n_embd),
            q: z(hp.q_dim()),
            k: z(hp.kv_dim()),
            v: z(hp.kv_dim()),
            attn: z(hp.q_dim()),
            proj: z(hp.n_embd),
            gate: z(hp.n_ff),
            up: z(hp.n_ff),
        }
    }

    pub fn with_precision(mut self, precision: Precision) -> Scratch {
        self.precision = precision;
        self
    }

    /// Bytes `Scratch::new(hp, max_rows)` allocates.
    pub fn bytes(hp: &HParams, max_rows: usize) -> u64 {
        let per_row = 2 * hp.n_embd + 2 * hp.q_dim() + 2 * hp.kv_dim() + 2 * hp.n_ff;
        (max_rows * per_row * 4) as u64
    }
}

impl Model {
    /// Runs blocks `layers` over `hidden` (`[rows.len(), n_embd]`, updated in place),
    /// writing each row's keys and values into `kv` for every layer of the range.
    /// The caller commits the new sequence lengths afterwards.
    pub fn forward_layers(
        &self,
        layers: Range<usize>,
        hidden: &mut [f32],
        batch: Batch,
        kv: &mut KvPool,
        scratch: &mut Scratch,
        pool: &ThreadPool,
    ) {
        let n = batch.rows.len();
        assert!(
            n <= scratch.max_rows,
            "{n} rows exceed the scratch of {}",
            scratch.max_rows
        );
        assert_eq!(hidden.len(), n * self.hparams.n_embd);
        for il in layers {
            let lw = &self.weights.layers[il];
            attention::block(self, il, lw, hidden, batch, kv, scratch, pool);
            ffn::block(self, lw, hidden, n, scratch, pool);
        }
    }
}
