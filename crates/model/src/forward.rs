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
    /// `[rows, n_ff]` (dense blocks) or `[rows, shared n_ff]` (a shared expert).
    pub(crate) gate: Vec<f32>,
    pub(crate) up: Vec<f32>,
    pub(crate) moe: MoeScratch,
}

/// Counts of the mixture-of-experts blocks computed with a [`Scratch`], since it was made.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MoeStats {
    /// Blocks computed (one per mixture layer per forward).
    pub blocks: u64,
    /// Experts that had rows routed to them, summed over those blocks: the number of
    /// experts whose weights were streamed.
    pub experts: u64,
}

/// The buffers of a mixture-of-experts block for `rows` rows of which each picks `k`
/// experts; empty for dense models.
#[derive(Default)]
pub(crate) struct MoeScratch {
    /// `[rows, n_expert]` router logits, then probabilities.
    pub(crate) probs: Vec<f32>,
    /// `[rows, k]`: each row's chosen experts and their weights, in the order chosen.
    pub(crate) chosen: Vec<(usize, f32)>,
    /// `[rows, k]`: where each choice's row sits in the expert-grouped buffers below.
    pub(crate) slot: Vec<usize>,
    /// `[n_expert + 1]`: group `e` is slots `start[e]..start[e + 1]`.
    pub(crate) start: Vec<usize>,
    /// `[rows · k, n_embd]` input rows gathered by expert.
    pub(crate) x: Vec<f32>,
    /// `[rows · k, n_ff_exp]`.
    pub(crate) gate: Vec<f32>,
    pub(crate) up: Vec<f32>,
    /// `[rows · k, n_embd]` expert outputs.
    pub(crate) out: Vec<f32>,
    pub(crate) stats: MoeStats,
}

/// Widths (floats per row) of the [`Scratch`] buffers.
struct Widths {
    dense_ff: usize,
    /// Per row: router (`n_expert`), and `k` gathered rows of `2 · n_embd + 2 · n_ff_exp`.
    moe: Option<(usize, usize, usize, usize)>,
}

impl Widths {
    fn of(hp: &HParams) -> Widths {
        let dense = (0..hp.n_layer).any(|il| !hp.is_moe_layer(il));
        let shared = hp.moe.as_ref().and_then(|m| m.shared).map_or(0, |s| s.n_ff);
        Widths {
            dense_ff: if dense { hp.n_ff } else { 0 }.max(shared),
            moe: hp
                .moe
                .as_ref()
                .map(|m| (m.n_expert, m.n_expert_used, hp.n_embd, m.n_ff_exp)),
        }
    }
}

impl Scratch {
    pub fn new(hp: &HParams, max_rows: usize) -> Scratch {
        let z = |w: usize| vec![0f32; max_rows * w];
        let widths = Widths::of(hp);
        let moe = match widths.moe {
            None => MoeScratch::default(),
            Some((ne, k, e, ff)) => MoeScratch {
                probs: z(ne),
                chosen: vec![(0, 0.0); max_rows * k],
                slot: vec![0; max_rows * k],
                start: vec![0; ne + 1],
                x: z(k * e),
                gate: z(k * ff),
                up: z(k * ff),
                out: z(k * e),
                stats: MoeStats::default(),
            },
        };
        Scratch {
            max_rows,
            precision: Precision::default(),
            x: z(hp.n_embd),
            q: z(hp.q_dim()),
            k: z(hp.kv_dim()),
            v: z(hp.kv_dim()),
            attn: z(hp.q_dim()),
            proj: z(hp.n_embd),
            gate: z(widths.dense_ff),
            up: z(widths.dense_ff),
            moe,
        }
    }

    pub fn moe_stats(&self) -> MoeStats {
        self.moe.stats
    }

    pub fn with_precision(mut self, precision: Precision) -> Scratch {
        self.precision = precision;
        self
    }

    /// Bytes `Scratch::new(hp, max_rows)` allocates.
    pub fn bytes(hp: &HParams, max_rows: usize) -> u64 {
        let widths = Widths::of(hp);
        let per_row = 2 * hp.n_embd + 2 * hp.q_dim() + 2 * hp.kv_dim() + 2 * widths.dense_ff;
        let moe = widths.moe.map_or(0, |(ne, k, e, ff)| {
            let choice = std::mem::size_of::<(usize, f32)>() + std::mem::size_of::<usize>();
            max_rows * (4 * ne + k * (choice + 4 * (2 * e + 2 * ff)))
                + (ne + 1) * std::mem::size_of::<usize>()
        });
        (max_rows * per_row * 4 + moe) as u64
    }
}

impl Model {
    /// Runs blocks `layers` (of the stage's) over `hidden` (`[rows.len(), n_embd]`, updated
    /// in place), writing each row's keys and values into `kv` (which holds the stage's
    /// blocks, the first at index 0) for every layer of the range.
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
            let lw = self.layer(il);
            attention::block(self, il, lw, hidden, batch, kv, scratch, pool);
            ffn::block(self, lw, hidden, n, scratch, pool);
        }
    }
}
