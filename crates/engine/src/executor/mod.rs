//! The executor: the one owner of a model's state on a device (weights, KV storage,
//! scratch, logits) and the one forward that the scheduler, the draft model, the box of a
//! split and the tools compute through.

use std::sync::Arc;

use device::Precision;
use device::{Buf, Device, Op, Progress, Row, Step};
use gguf::GgmlType;
use kv::{KvConfig, KvPool, SeqKv, StateKv, WindowKv};
use model::{DeviceWeights, LayerMemory, Model, Scratch};

use crate::backend::DeviceKind;
use crate::backend::Threads;
use crate::{Error, Result};

mod io;
use io::bidirectional_from;
pub(crate) use io::taps_within;
pub use io::{Enter, MarkovRow, Out, Outputs, Placed, RowOut, Taps};

/// Rows of logits computed per output-head call; bounds the logits buffer.
pub const LOGIT_ROWS: usize = 32;

/// What an executor is sized for. Everything is allocated in [`Executor::new`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ContextConfig {
    /// KV positions over all sequences.
    pub n_ctx: usize,
    /// Rows per forward pass (llama.cpp's physical batch, -ub).
    pub n_ubatch: usize,
    pub n_threads: usize,
    pub kv_type: GgmlType,
    pub precision: Precision,
    pub device: DeviceKind,
    /// Sequences computed at once (the server's slots): with sliding-window layers, each
    /// keeps one window of their KV.
    pub n_seq: usize,
    /// Sliding-window layers keep every position, as the others do (llama.cpp's
    /// `--swa-full`): any prefix can be reused, at full attention's memory.
    pub swa_full: bool,
    /// Per sequence, snapshots of recurrent states a prefix can start from (llama.cpp's
    /// `--ctx-checkpoints`; [`kv::snapshot`]).
    pub ctx_checkpoints: usize,
    /// Per sequence, the recurrent states kept for speculation's rollback: before its
    /// forward's first draft row and each of the next `state_rows - 1` rows
    /// ([`kv::StateKv::rows`]; at least 1). A speculating engine keeps one per draft.
    pub state_rows: usize,
}

impl Default for ContextConfig {
    fn default() -> Self {
        ContextConfig {
            n_ctx: 4096,
            n_ubatch: 512,
            n_threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
            kv_type: GgmlType::F16,
            precision: Precision::Int8,
            device: DeviceKind::default(),
            n_seq: 1,
            swa_full: false,
            ctx_checkpoints: 8,
            state_rows: 1,
        }
    }
}

/// The most recurrent states a sequence keeps for a rollback ([`ContextConfig::state_rows`]):
/// drafts past them are computed again from the last kept one.
pub const MAX_STATE_ROWS: usize = 16;

impl ContextConfig {
    /// This configuration for an engine whose drafts run to `n_draft` rows per sequence
    /// (0: no speculation): a recurrent state kept before each, at most [`MAX_STATE_ROWS`].
    pub fn with_drafts(self, n_draft: usize) -> ContextConfig {
        ContextConfig {
            state_rows: n_draft.clamp(1, MAX_STATE_ROWS),
            ..self
        }
    }

    /// The KV pool of `model`'s stage (its blocks only), from what each block keeps
    /// ([`Model::memory`]). Windowed layers get room for `n_seq` windows and a forward's
    /// rows, never more than the pool's positions; state layers a state for each of `n_seq`
    /// sequences.
    pub fn kv_config(&self, model: &Model) -> KvConfig {
        let hp = &model.hparams;
        let memory = model.memory();
        let n_positions = self.n_ctx;
        let mask = |keep: &dyn Fn(&LayerMemory) -> bool| {
            let kls = memory
                .iter()
                .enumerate()
                .filter(|&(kl, m)| kl < 128 && keep(m));
            kls.fold(0u128, |m, (kl, _)| m | 1 << kl)
        };
        let window = memory
            .iter()
            .filter_map(LayerMemory::lookback)
            .max()
            .filter(|_| !self.swa_full)
            .map(|size| WindowKv {
                size,
                layers: mask(&|m| m.lookback().is_some()),
                n_blocks: WindowKv::blocks_for(size, self.n_seq, self.n_ubatch)
                    .min(n_positions.div_ceil(kv::BLOCK_SIZE)),
            });
        let floats = memory.iter().filter_map(|m| match m {
            LayerMemory::State { floats } => Some(*floats),
            _ => None,
        });
        let records = memory
            .iter()
            .any(|m| matches!(m, LayerMemory::Records { .. }))
            .then(|| {
                let of = |m: &LayerMemory| match m {
                    LayerMemory::Records { record, .. } => Some(*record),
                    _ => None,
                };
                memory.iter().map(of).collect()
            });
        let state = floats.max().map(|floats| StateKv {
            layers: mask(&|m| matches!(m, LayerMemory::State { .. })),
            floats,
            n_slots: self.n_seq,
            n_snaps: self.n_seq * self.ctx_checkpoints,
            rows: self.state_rows,
        });
        KvConfig {
            n_layer: memory.len(),
            n_head_kv: hp.n_head_kv,
            head_dim: hp.head_dim,
            ty: self.kv_type,
            n_positions,
            window,
            state,
            records,
            empty: mask(&|m| matches!(m, LayerMemory::Nothing)),
        }
    }
}

/// See the module doc.
pub struct Executor {
    model: Arc<Model>,
    pub config: ContextConfig,
    dev: Box<dyn Device>,
    weights: DeviceWeights,
    scratch: Scratch,
    kv: KvPool,
    /// `[n_ubatch, n_embd]`.
    hidden: Buf,
    /// `[n_ubatch, fuse_width]`, for a drafter of a target's features.
    features: Option<Buf>,
    /// `[LOGIT_ROWS, hidden_width]` rows picked for the output head.
    picked: Buf,
    /// `[LOGIT_ROWS, rank]`, for a drafter with a Markov head ([`Executor::markov`]).
    markov_rows: Option<Buf>,
    /// `[LOGIT_ROWS, n_logits]`, on the device and here.
    logits: Buf,
    host_logits: Vec<f32>,
    /// The adapters' scales of the next forward's sequences, when the model has adapters.
    lora: Option<model::lora::SharedScales>,
}

impl Executor {
    /// An executor on `config.device` with a thread pool of its own (`config.n_threads`).
    pub fn new(model: impl Into<Arc<Model>>, config: ContextConfig) -> Result<Self> {
        let pool = Threads::new(config.n_threads);
        Self::with_threads(model, config, pool)
    }

    /// An executor on `config.device` computing on `pool` (shared with another executor
    /// used from the same thread, so that two pools never spin against each other).
    pub fn with_threads(
        model: impl Into<Arc<Model>>,
        config: ContextConfig,
        pool: Threads,
    ) -> Result<Self> {
        let dev = config.device.open(pool, config.precision)?;
        Self::on(model, config, dev, &|_, _| {})
    }

    /// An executor on `dev`: uploads the model's stage (telling `progress`), allocates the
    /// KV storage and every buffer `config` asks for. A model the device cannot run is an
    /// error naming the op or tensor.
    pub fn on(
        model: impl Into<Arc<Model>>,
        config: ContextConfig,
        mut dev: Box<dyn Device>,
        progress: &Progress<'_>,
    ) -> Result<Self> {
        let model = model.into();
        if config.n_ubatch == 0 || config.n_ctx == 0 {
            return Err(Error::Config(
                "context size and ubatch must be positive".into(),
            ));
        }
        let kv_cfg = config.kv_config(&model);
        let records = model
            .memory()
            .iter()
            .any(|m| matches!(m, LayerMemory::Records { .. }));
        if records && config.kv_type.block_size() != 1 {
            return Err(Error::Config(format!(
                "{} keeps a record of every position, which needs an element-wise KV type \
                 (f32, f16 or bf16), not {}",
                model.arch.name(),
                config.kv_type
            )));
        }
        let kv = KvPool::new(kv_cfg.clone())?;
        let lora = (!model.adapters.is_empty()).then(model::lora::SharedScales::default);
        if let Some(scales) = &lora {
            let adapters = model.adapters.clone();
            dev = Box::new(model::lora::LoraDevice::new(
                dev,
                adapters,
                scales.clone(),
                config.n_ubatch,
            ));
        }
        let weights = model.upload(&mut *dev, progress)?;
        dev.kv_alloc(kv_cfg).map_err(model::Error::from)?;
        let hp = &model.hparams;
        let scratch = Scratch::new(&mut *dev, hp, &model.scratch_widths(), config.n_ubatch)?;
        let nl = model.n_logits();
        let alloc = |dev: &mut dyn Device, n| dev.alloc(n).map_err(model::Error::from);
        let features = match model.fuse_width() {
            Some(width) => Some(alloc(&mut *dev, config.n_ubatch * width)?),
            None => None,
        };
        let markov_rows = match model.markov() {
            Some(m) => Some(alloc(&mut *dev, LOGIT_ROWS * m.rank())?),
            None => None,
        };
        Ok(Executor {
            markov_rows,
            hidden: alloc(&mut *dev, config.n_ubatch * hp.hidden_width())?,
            features,
            picked: alloc(&mut *dev, LOGIT_ROWS * hp.hidden_width())?,
            logits: alloc(&mut *dev, LOGIT_ROWS * nl)?,
            host_logits: vec![0.0; LOGIT_ROWS * nl],
            config,
            dev,
            weights,
            scratch,
            kv,
            model,
            lora,
        })
    }

    /// The scale of each of the model's LoRA adapters for each sequence of the next
    /// forward, in its order (an adapter left out: 0; `None`: the adapters' own scales,
    /// as for a forward not told); nothing without adapters.
    pub fn set_adapter_scales(&mut self, per_seq: Vec<Option<Vec<f32>>>) {
        if let Some(scales) = &self.lora {
            *scales.lock().expect("no thread panicked") = per_seq;
        }
    }

    pub fn model(&self) -> &Model {
        &self.model
    }

    /// The model, shared.
    pub fn model_arc(&self) -> Arc<Model> {
        self.model.clone()
    }

    /// The device, for what it says of itself.
    pub fn device(&self) -> &dyn Device {
        &*self.dev
    }

    /// The device, for what it measures of itself (op times, bandwidth).
    pub fn device_mut(&mut self) -> &mut dyn Device {
        &mut *self.dev
    }

    /// The KV pool's accounting (its storage is the device's).
    pub fn kv(&self) -> &KvPool {
        &self.kv
    }

    pub fn kv_mut(&mut self) -> &mut KvPool {
        &mut self.kv
    }

    /// Appends KV block `block`'s bytes ([`device::Device::kv_read_block`]).
    pub fn read_kv_block(&mut self, block: u32, out: &mut Vec<u8>) {
        self.dev.kv_read_block(block, out);
    }

    /// Writes KV block `block` from bytes [`Self::read_kv_block`] gave.
    pub fn write_kv_block(&mut self, block: u32, data: &[u8]) {
        self.dev.kv_write_block(block, data);
    }

    /// Mixture-of-experts blocks computed so far, and the experts they streamed.
    pub fn moe_stats(&self) -> model::MoeStats {
        self.dev.moe_stats()
    }

    /// Releases the device's threads while something else computes on the same cores.
    pub fn rest(&self) {
        self.dev.rest();
    }

    /// The most rows one forward takes.
    pub fn n_ubatch(&self) -> usize {
        self.config.n_ubatch
    }

    /// Returns the sequence's KV blocks to the pool.
    pub fn release(&mut self, seq: &mut SeqKv) {
        self.kv.release(seq);
    }

    /// Forgets positions `len..` of `seq`; returns the positions it keeps
    /// ([`KvPool::truncate`]: 0 when cut back past what its sliding window kept; with
    /// state layers, the last kept state's position at or before `len`, which the device
    /// restores, or 0).
    pub fn truncate(&mut self, seq: &mut SeqKv, len: usize) -> usize {
        let (held, slot, checkpoint) = (seq.len(), seq.state_slot(), seq.checkpoint());
        let kept = self.kv.truncate(seq, len);
        if let Some(slot) = slot.filter(|_| kept > 0 && kept < held) {
            self.dev.state_restore(slot, kept - checkpoint);
        }
        kept
    }

    /// Evaluates `tokens` as positions `seq.len()..` of `seq`, `n_ubatch` rows per forward,
    /// and calls `on_logits(i, logits)` for each token index `i` that `outputs` selects
    /// (`logits` is `[n_logits]`). A state that came out NaN or infinite is an error.
    pub fn eval(
        &mut self,
        seq: &mut SeqKv,
        tokens: &[u32],
        outputs: Outputs,
        on_logits: &mut dyn FnMut(usize, &[f32]),
    ) -> Result<()> {
        let mut done = 0;
        for chunk in tokens.chunks(self.config.n_ubatch) {
            let n = chunk.len();
            let wanted: Vec<usize> = match outputs {
                Outputs::All => (0..n).collect(),
                Outputs::From(first) => (first.saturating_sub(done).min(n)..n).collect(),
                Outputs::Last if done + n == tokens.len() => vec![n - 1],
                Outputs::Last => vec![],
            };
            let rows: Vec<(usize, u32)> = chunk.iter().map(|&t| (0, t)).collect();
            self.append(
                std::slice::from_mut(seq),
                &rows,
                &wanted,
                &mut |r, logits| on_logits(done + r, logits),
            )?;
            done += n;
        }
        Ok(())
    }

    /// One forward over rows of several sequences: row `i = (s, token)` appends `token` to
    /// `seqs[s]` (rows of one sequence in order); `on_logits(i, logits)` for each row index
    /// in `outputs`. A state that came out NaN or infinite is an error.
    pub fn append(
        &mut self,
        seqs: &mut [SeqKv],
        rows: &[(usize, u32)],
        outputs: &[usize],
        on_logits: &mut dyn FnMut(usize, &mut [f32]),
    ) -> Result<()> {
        let mut next: Vec<usize> = seqs.iter().map(SeqKv::len).collect();
        let batch: Vec<Row> = rows
            .iter()
            .map(|&(s, _)| {
                next[s] += 1;
                Row {
                    pos: next[s] - 1,
                    seq: s,
                }
            })
            .collect();
        let tokens: Vec<u32> = rows.iter().map(|r| r.1).collect();
        let mut refs: Vec<&mut SeqKv> = seqs.iter_mut().collect();
        let out = Out::Logits {
            rows: outputs,
            on_logits,
        };
        let finite = self.forward(&mut refs, &batch, Enter::Tokens(&tokens), out)?;
        match finite.iter().position(|&ok| !ok) {
            Some(bad) => Err(Error::NonFinite {
                pos: batch[bad].pos,
            }),
            None => Ok(()),
        }
    }

    /// One forward over rows of several sequences: row `rows[i]` computes position
    /// `rows[i].pos` of `seqs[rows[i].seq]` (the rows of one sequence contiguous and
    /// ascending, following what it holds); KV room is reserved as needed and each
    /// sequence's length is its last row's position + 1 afterwards. At most `n_ubatch`
    /// rows. Returns, per row, whether its final hidden state is finite.
    pub fn forward(
        &mut self,
        seqs: &mut [&mut SeqKv],
        rows: &[Row],
        enter: Enter<'_>,
        out: Out<'_>,
    ) -> Result<Vec<bool>> {
        let n = rows.len();
        if n > self.config.n_ubatch {
            return Err(Error::Config(format!(
                "{n} rows exceed the ubatch of {}",
                self.config.n_ubatch
            )));
        }
        if let Out::Rows { taps, .. } = &out {
            let stage = &self.model.stage.layers;
            if !taps_within(taps.layers, stage) {
                return Err(Error::Config(format!(
                    "tapped layers {:?} are not ascending blocks of the stage {stage:?}",
                    taps.layers
                )));
            }
            if taps.rows.iter().any(|&r| r >= n) {
                return Err(Error::Config(format!("a tapped row is past the {n} rows")));
            }
        }
        let mut next: Vec<usize> = seqs.iter().map(|s| s.len()).collect();
        let mut first: Vec<Option<usize>> = vec![None; seqs.len()];
        for r in rows {
            next[r.seq] = r.pos + 1;
            first[r.seq].get_or_insert(r.pos);
        }
        let needed: usize = next.iter().sum();
        if needed > self.config.n_ctx {
            return Err(Error::ContextFull {
                needed,
                n_ctx: self.config.n_ctx,
            });
        }
        for ((seq, &len), first) in seqs.iter_mut().zip(&next).zip(&first) {
            self.kv.reserve(seq, len)?;
            if let Some(first) = *first {
                self.kv.prepare(seq, first, len)?;
            }
        }
        let (model, dev, w) = (&*self.model, &mut *self.dev, &self.weights);
        let e = model.hparams.hidden_width();
        let tables: Vec<&[u32]> = seqs.iter().map(|s| s.blocks()).collect();
        let windowed: Vec<Vec<u32>> = match self.kv.config().window {
            Some(_) => seqs.iter().map(|s| self.kv.window_table(s)).collect(),
            None => Vec::new(),
        };
        let windowed: Vec<&[u32]> = windowed.iter().map(Vec::as_slice).collect();
        let states = self.kv.state_slots(seqs);
        let checkpoints: Vec<usize> = match states.is_empty() {
            true => Vec::new(),
            false => seqs.iter().map(|s| s.checkpoint()).collect(),
        };
        let bidirectional = match enter {
            Enter::Pictured { images, .. } | Enter::States { images, .. } => {
                bidirectional_from(rows, seqs.len(), images)?
            }
            _ => Vec::new(),
        };
        if !bidirectional.is_empty() && !dev.supports(Op::BidirectionalRows) {
            return Err(Error::Config(format!(
                "{} cannot compute rows that see one another (an image's)",
                dev.describe()
            )));
        }
        for (snap, slot) in self.kv.snapshot_loads() {
            dev.state_load(snap, slot);
        }
        dev.begin(&Step {
            rows,
            tables: &tables,
            windowed: &windowed,
            states: &states,
            checkpoints: &checkpoints,
            bidirectional: &bidirectional,
        });
        let entered = match enter {
            Enter::Tokens(tokens) => model.embed(dev, w, &self.scratch, tokens, self.hidden),
            Enter::Pictured { tokens, images } => model
                .embed(dev, w, &self.scratch, tokens, self.hidden)
                .and_then(|()| {
                    for p in images {
                        if p.embeddings.len() != p.rows.len() * e || e != model.hparams.n_embd {
                            return Err(model::Error::BadStage(format!(
                                "{} image embeddings for rows {:?} of {} (n_embd {})",
                                p.embeddings.len(),
                                p.rows,
                                e,
                                model.hparams.n_embd
                            )));
                        }
                        dev.upload(self.hidden, p.rows.start * e, p.embeddings);
                    }
                    Ok(())
                }),
            Enter::States { states, .. } => {
                dev.upload(self.hidden, 0, &states[..n * e]);
                Ok(())
            }
            Enter::Joined { tokens, states } => model.check_tokens(tokens).map(|()| {
                dev.upload(self.hidden, 0, &states[..n * e]);
            }),
            Enter::Fused { tokens, features } => model.check_tokens(tokens).and_then(|()| {
                let (buf, width) = self
                    .features
                    .zip(model.fuse_width())
                    .ok_or(model::Error::NotInStage("a fusion of features"))?;
                dev.upload(buf, 0, &features[..n * width]);
                model.fuse(dev, w, buf, self.hidden, n)
            }),
        };
        if let Err(err) = entered {
            dev.finish();
            return Err(err.into());
        }
        let layers = model.stage.layers.clone();
        let taps = match &out {
            Out::Rows { taps, .. } => *taps,
            _ => Taps::default(),
        };
        let mut tapped = Vec::with_capacity(taps.layers.len());
        let mut from = layers.start;
        let tokens = match enter {
            Enter::Tokens(tokens)
            | Enter::Joined { tokens, .. }
            | Enter::Fused { tokens, .. }
            | Enter::Pictured { tokens, .. } => Some(tokens),
            Enter::States { .. } => None,
        };
        let injected = matches!(enter, Enter::Fused { .. }) && model.injects_features();
        for &l in taps.layers {
            let s = &self.scratch;
            model.forward_layers(dev, w, s, from..l + 1, self.hidden, n, tokens);
            tapped.push(gather(dev, self.hidden, self.picked, taps.rows, e));
            from = l + 1;
        }
        let s = &self.scratch;
        match injected {
            true => model.inject(dev, w, s, self.hidden, n),
            false => model.forward_layers(dev, w, s, from..layers.end, self.hidden, n, tokens),
        }
        let finite = dev.all_finite(self.hidden, n, e);
        for (seq, &len) in seqs.iter_mut().zip(&next) {
            self.kv.commit(seq, len);
        }
        for (slot, snap) in self.kv.snapshot_saves() {
            dev.state_save(slot, snap);
        }
        let mut sane_seq = vec![true; seqs.len()];
        for (r, &ok) in rows.iter().zip(&finite) {
            sane_seq[r.seq] &= ok;
        }
        let sane = |wanted: &[usize]| -> Vec<usize> {
            wanted
                .iter()
                .copied()
                .filter(|&r| sane_seq[rows[r].seq])
                .collect()
        };
        match out {
            Out::Nothing => {}
            Out::States(states) => self.dev.download(self.hidden, 0, &mut states[..n * e]),
            Out::Logits {
                rows: wanted,
                on_logits,
            } => self.rows_out(&sane(wanted), &[], &mut |r, o| {
                if let RowOut::Logits(l) = o {
                    on_logits(r, l)
                }
            }),
            Out::Rows {
                logits,
                states,
                taps,
                on_row,
            } => {
                for (&layer, host) in taps.layers.iter().zip(&tapped) {
                    for (j, &r) in taps.rows.iter().enumerate() {
                        if sane_seq[rows[r].seq] {
                            let state = &host[j * e..(j + 1) * e];
                            on_row(r, RowOut::Tap { layer, state });
                        }
                    }
                }
                self.rows_out(&sane(logits), &sane(states), on_row)
            }
        }
        self.dev.finish();
        Ok(finite)
    }

    /// DSpark's Markov bias after each token of `prev` ([`Model::markov_bias`]):
    /// `on_row(i, row)` for each.
    pub fn markov(
        &mut self,
        prev: &[u32],
        on_row: &mut dyn FnMut(usize, MarkovRow<'_>),
    ) -> Result<()> {
        let (Some(head), Some(buf)) = (self.model.markov(), self.markov_rows) else {
            return Err(Error::Config(format!(
                "{} has no Markov head",
                self.model.arch.name()
            )));
        };
        let (rank, nl) = (head.rank(), self.model.n_logits());
        let mut rows = vec![0f32; LOGIT_ROWS.min(prev.len()) * rank];
        for (c, group) in prev.chunks(LOGIT_ROWS).enumerate() {
            let g = group.len();
            self.dev.begin(&Step::default());
            let done =
                self.model
                    .markov_bias(&mut *self.dev, &self.weights, group, buf, self.logits);
            if done.is_ok() {
                self.dev
                    .download(self.logits, 0, &mut self.host_logits[..g * nl]);
                self.dev.download(buf, 0, &mut rows[..g * rank]);
            }
            self.dev.finish();
            done?;
            let bias = self.host_logits.chunks_exact(nl);
            for (i, (b, r)) in bias.zip(rows.chunks_exact(rank)).take(g).enumerate() {
                on_row(c * LOGIT_ROWS + i, MarkovRow { bias: b, w1_row: r });
            }
        }
        Ok(())
    }

    /// The logits of rows `logits` and the normed states of rows `states` of the forward
    /// just computed, `LOGIT_ROWS` at a time (at most a ubatch: the output's own blocks
    /// work in the scratch of one).
    fn rows_out(
        &mut self,
        logits: &[usize],
        states: &[usize],
        on_row: &mut dyn FnMut(usize, RowOut<'_>),
    ) {
        let (model, dev, w) = (&*self.model, &mut *self.dev, &self.weights);
        let (h, e, nl) = (
            model.hparams.hidden_width(),
            model.hparams.n_embd,
            model.n_logits(),
        );
        let s = &self.scratch;
        let per = LOGIT_ROWS.min(self.config.n_ubatch);
        for group in logits.chunks(per) {
            let g = group.len();
            dev.gather_rows(self.hidden, group, h, self.picked);
            model.output(dev, w, s, self.picked, g, self.logits);
            let host = &mut self.host_logits[..g * nl];
            dev.download(self.logits, 0, host);
            for (&r, l) in group.iter().zip(host.chunks_exact_mut(nl)) {
                on_row(r, RowOut::Logits(l));
            }
        }
        let mut host = vec![0f32; per.min(states.len()) * e];
        for group in states.chunks(per) {
            let g = group.len();
            dev.gather_rows(self.hidden, group, h, self.picked);
            model.state_out(dev, w, s, self.picked, g);
            dev.download(self.picked, 0, &mut host[..g * e]);
            for (&r, state) in group.iter().zip(host.chunks_exact(e)) {
                on_row(r, RowOut::State(state));
            }
        }
    }
}

/// Rows `rows` of `hidden` (`[rows, e]` each), read back through `picked` (`[LOGIT_ROWS,
/// e]`), `LOGIT_ROWS` at a time.
fn gather(dev: &mut dyn Device, hidden: Buf, picked: Buf, rows: &[usize], e: usize) -> Vec<f32> {
    let mut host = vec![0f32; rows.len() * e];
    for (group, out) in rows.chunks(LOGIT_ROWS).zip(host.chunks_mut(LOGIT_ROWS * e)) {
        dev.gather_rows(hidden, group, e, picked);
        dev.download(picked, 0, &mut out[..group.len() * e]);
    }
    host
}
