use std::ops::Deref;
use std::sync::Arc;

use gguf::GgmlType;
use kernels::{Precision, ThreadPool};
use kv::{KvConfig, KvPool, SeqKv};
use model::{Batch, Model, Row, Scratch};

use crate::{Error, Result};

/// Rows of logits computed per output-head call; bounds the logits buffer.
pub const LOGIT_ROWS: usize = 32;

/// What a context is sized for. Everything is allocated in `Context::new`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ContextConfig {
    /// KV positions over all sequences.
    pub n_ctx: usize,
    /// Rows per forward pass (llama.cpp's physical batch, -ub).
    pub n_ubatch: usize,
    pub n_threads: usize,
    pub kv_type: GgmlType,
    pub precision: Precision,
}

impl Default for ContextConfig {
    fn default() -> Self {
        ContextConfig {
            n_ctx: 4096,
            n_ubatch: 512,
            n_threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
            kv_type: GgmlType::F16,
            precision: Precision::Int8,
        }
    }
}

impl ContextConfig {
    /// The KV pool of `model`'s stage (its blocks only).
    pub fn kv_config(&self, model: &Model) -> KvConfig {
        let hp = &model.hparams;
        KvConfig {
            n_layer: model.stage.layers.len(),
            n_head_kv: hp.n_head_kv,
            head_dim: hp.head_dim,
            ty: self.kv_type,
            n_positions: self.n_ctx,
        }
    }
}

/// Which rows of an evaluation produce logits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outputs {
    /// The last token of the evaluation.
    Last,
    /// Every token.
    All,
    /// Token indices `i..` of the evaluation.
    From(usize),
}

/// A model (borrowed or owned: `&Model`, `Box<Model>`) with its KV pool, scratch buffers
/// and threads.
pub struct Context<M: Deref<Target = Model>> {
    pub model: M,
    pub config: ContextConfig,
    kv: KvPool,
    scratch: Scratch,
    pool: Arc<ThreadPool>,
    /// `[n_ubatch, n_embd]`.
    hidden: Vec<f32>,
    /// `[LOGIT_ROWS, n_embd]` rows picked for the output head.
    picked: Vec<f32>,
    /// `[LOGIT_ROWS, n_vocab]`.
    logits: Vec<f32>,
}

impl<M: Deref<Target = Model>> Context<M> {
    /// A context with a thread pool of its own (`config.n_threads`).
    pub fn new(model: M, config: ContextConfig) -> Result<Self> {
        let pool = Arc::new(ThreadPool::new(config.n_threads));
        Self::with_pool(model, config, pool)
    }

    /// A context that runs on `pool` (shared with another context used from the same
    /// thread, so that two pools never spin against each other).
    pub fn with_pool(model: M, config: ContextConfig, pool: Arc<ThreadPool>) -> Result<Self> {
        if config.n_ubatch == 0 || config.n_ctx == 0 {
            return Err(Error::Config(
                "context size and ubatch must be positive".into(),
            ));
        }
        let hp = &model.hparams;
        Ok(Context {
            config,
            kv: KvPool::new(config.kv_config(&model))?,
            scratch: Scratch::new(hp, config.n_ubatch).with_precision(config.precision),
            pool,
            hidden: vec![0.0; config.n_ubatch * hp.n_embd],
            picked: vec![0.0; LOGIT_ROWS * hp.n_embd],
            logits: vec![0.0; LOGIT_ROWS * hp.n_vocab],
            model,
        })
    }

    /// Mixture-of-experts blocks computed so far, and the experts they streamed.
    pub fn moe_stats(&self) -> model::MoeStats {
        self.scratch.moe_stats()
    }

    /// Returns the sequence's KV blocks to the pool.
    pub fn release(&mut self, seq: &mut SeqKv) {
        self.kv.release(seq);
    }

    /// Forgets positions `len..` of `seq`.
    pub fn truncate(&mut self, seq: &mut SeqKv, len: usize) {
        self.kv.truncate(seq, len);
    }

    /// Evaluates `tokens` as positions `seq.len()..` of `seq`, `n_ubatch` rows per forward,
    /// and calls `on_logits(i, logits)` for each token index `i` that `outputs` selects
    /// (`logits` is `[n_vocab]`).
    pub fn eval(
        &mut self,
        seq: &mut SeqKv,
        tokens: &[u32],
        outputs: Outputs,
        on_logits: &mut dyn FnMut(usize, &[f32]),
    ) -> Result<()> {
        let mut done = 0;
        let seqs = std::slice::from_mut(seq);
        for chunk in tokens.chunks(self.config.n_ubatch) {
            let n = chunk.len();
            let rows: Vec<(usize, u32)> = chunk.iter().map(|&t| (0, t)).collect();
            let wanted: Vec<usize> = match outputs {
                Outputs::All => (0..n).collect(),
                Outputs::From(first) => (first.saturating_sub(done).min(n)..n).collect(),
                Outputs::Last if done + n == tokens.len() => vec![n - 1],
                Outputs::Last => vec![],
            };
            self.forward(seqs, &rows, &wanted, &mut |r, logits| {
                on_logits(done + r, logits)
            })?;
            done += n;
        }
        Ok(())
    }

    /// One forward over rows of several sequences: row `i = (s, token)` appends `token`
    /// to `seqs[s]` (rows of one sequence in order). Calls `on_logits(i, logits)` for each
    /// row index in `outputs`. At most `n_ubatch` rows.
    pub fn forward(
        &mut self,
        seqs: &mut [SeqKv],
        rows: &[(usize, u32)],
        outputs: &[usize],
        on_logits: &mut dyn FnMut(usize, &[f32]),
    ) -> Result<()> {
        let n = rows.len();
        if n > self.config.n_ubatch {
            return Err(Error::Config(format!(
                "{n} rows exceed the ubatch of {}",
                self.config.n_ubatch
            )));
        }
        let mut next: Vec<usize> = seqs.iter().map(|s| s.len()).collect();
        let batch_rows: Vec<Row> = rows
            .iter()
            .map(|&(s, _)| {
                next[s] += 1;
                Row {
                    pos: next[s] - 1,
                    seq: s,
                }
            })
            .collect();
        let needed: usize = next.iter().sum();
        if needed > self.config.n_ctx {
            return Err(Error::ContextFull {
                needed,
                n_ctx: self.config.n_ctx,
            });
        }
        for (seq, &len) in seqs.iter_mut().zip(&next) {
            self.kv.reserve(seq, len)?;
        }
        let hp = &self.model.hparams;
        let e = hp.n_embd;
        let tokens: Vec<u32> = rows.iter().map(|&(_, t)| t).collect();
        let hidden = &mut self.hidden[..n * e];
        self.model.embed(&tokens, hidden)?;
        let refs: Vec<&SeqKv> = seqs.iter().collect();
        let batch = Batch {
            rows: &batch_rows,
            seqs: &refs,
        };
        self.model.forward_layers(
            self.model.stage.layers.clone(),
            hidden,
            batch,
            &mut self.kv,
            &mut self.scratch,
            &self.pool,
        );
        for (seq, &len) in seqs.iter_mut().zip(&next) {
            self.kv.commit(seq, len);
        }
        self.model.output_rows(
            hidden,
            outputs,
            &mut self.picked,
            &mut self.logits,
            &self.pool,
            self.config.precision,
            &mut |i, logits| on_logits(outputs[i], logits),
        );
        Ok(())
    }
}
