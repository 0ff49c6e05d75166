use std::ops::Range;
use std::sync::Arc;

use gguf::{GgmlType, GgufFile};
use kv::KvConfig;

use crate::attn::AttnSpec;
use crate::hyper::HyperSpec;
use crate::scan::{ScanIo, ScanSpec};
use crate::sparse::{SparseIo, SparseSpec};
use crate::Result;

/// A buffer of f32 on a device, made by [`Device::alloc`]; meaningful only to that device.
/// Ops name a prefix of it by a row count and a row width.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Buf(pub u32);

/// A matrix uploaded to a device by [`Device::upload_matrices`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Mat(pub u32);

/// The bytes of a matrix as GGUF stores it: in the model's map, or copied out of it (the
/// rows of a restricted output head).
#[derive(Clone)]
pub enum Bytes {
    Mapped {
        file: Arc<GgufFile>,
        range: Range<usize>,
    },
    Owned(Arc<[u8]>),
}

impl Bytes {
    pub fn as_slice(&self) -> &[u8] {
        match self {
            Bytes::Mapped { file, range } => &file.bytes()[range.clone()],
            Bytes::Owned(b) => b,
        }
    }

    /// Tells the map that a device copied these bytes, so that their pages can be dropped.
    pub fn release(&self) {
        if let Bytes::Mapped { file, range } = self {
            file.release(range.clone());
        }
    }
}

/// A matrix to upload: `n_rows` rows of `n_cols` elements of `ty`, row-major (GGUF dims
/// `[n_cols, n_rows]`), named for errors.
#[derive(Clone)]
pub struct MatrixSource {
    pub name: String,
    pub ty: GgmlType,
    pub bytes: Bytes,
    pub n_rows: usize,
    pub n_cols: usize,
    pub role: Role,
}

/// What a matrix is used for, which decides how a device stores it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Multiplied with activations ([`Device::matmul`], [`Device::moe`]).
    Multiply,
    /// Only read by rows ([`Device::embed`]): the embedding table.
    Rows,
    /// Read by rows, and from the file as they are needed where a device reads the map
    /// (the CPU, the reference): never held resident there, so it takes no device memory
    /// (`--lazy-mode`). A device that cannot read the map holds it as [`Role::Rows`].
    LazyRows,
}

/// Told `(done, total)` bytes as an upload proceeds; called from several threads.
pub type Progress<'a> = dyn Fn(usize, usize) + Sync + 'a;

/// One row of a forward: the token at `pos` of sequence `seq` (an index into
/// [`Step::tables`]).
///
/// Contract: positions `0..pos` of that sequence are cached or come earlier in the step,
/// and its block table covers `pos`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Row {
    pub pos: usize,
    pub seq: usize,
}

/// `rows` as runs of consecutive rows of one sequence each: `(the run's rows, its
/// sequence)`, in order (the recurrences walk a sequence's rows run by run).
pub fn seq_runs(rows: &[Row]) -> impl Iterator<Item = (Range<usize>, usize)> + '_ {
    let mut start = 0;
    std::iter::from_fn(move || {
        let seq = rows.get(start)?.seq;
        let len = rows[start..].iter().take_while(|r| r.seq == seq).count();
        start += len;
        Some((start - len..start, seq))
    })
}

/// Where sequence `seq`'s checkpoint is taken in a step whose [`Step::checkpoints`] are
/// `checkpoints`, given its run of `n` rows from position `first`: `Some(0)` at `begin`
/// (before its first row), `Some(i)` before the run's row `i`, `None` for none.
pub fn checkpoint_row(checkpoints: &[usize], seq: usize, first: usize, n: usize) -> Option<usize> {
    match checkpoints.get(seq) {
        None => Some(0),
        Some(&c) => c.checked_sub(first).filter(|&i| i < n),
    }
}

/// What [`Device::begin`] is told of a forward: its rows, and per sequence the KV blocks
/// it holds in order (block `i` holds positions `i · BLOCK_SIZE..`).
#[derive(Debug, Clone, Copy, Default)]
pub struct Step<'a> {
    pub rows: &'a [Row],
    pub tables: &'a [&'a [u32]],
    /// Per sequence, the blocks of the windowed layers ([`KvConfig::is_windowed`]), in the
    /// same order; `u32::MAX` for blocks no row of the step sees. Empty when the pool has
    /// no windowed class.
    pub windowed: &'a [&'a [u32]],
    /// Per sequence, its recurrent-state slot ([`kv::state`]; `kv::state::NO_SLOT` where it
    /// holds none). Empty when the pool has no state layers. A sequence whose first row
    /// here is at position 0 starts from the zero state.
    pub states: &'a [u32],
    /// Per sequence, its checkpoint's position ([`kv::SeqKv::checkpoint`]): where it is one
    /// of the sequence's rows, the state before that row becomes its checkpoint (its rows
    /// from there on are drafts); otherwise the step keeps none. Empty when the pool has
    /// no state layers, or to keep every sequence's state before its first row.
    pub checkpoints: &'a [usize],
    /// Per sequence, the first of its positions in the step whose rows see all of the
    /// sequence's rows in the step, not only the earlier ones (an image's embeddings that
    /// attend one another: [`Op::BidirectionalRows`]); [`NOT_BIDIRECTIONAL`] for none.
    /// Empty: none.
    pub bidirectional: &'a [usize],
}

/// [`Step::bidirectional`] of a sequence with no such rows.
pub const NOT_BIDIRECTIONAL: usize = usize::MAX;

/// A device's copy of a step's block tables, kept between steps to reuse the room.
#[derive(Debug, Default)]
pub struct Tables {
    all: Vec<Vec<u32>>,
    windowed: Vec<Vec<u32>>,
}

impl Tables {
    /// Copies `step`'s tables.
    pub fn set(&mut self, step: &Step<'_>) {
        fn copy(to: &mut Vec<Vec<u32>>, from: &[&[u32]]) {
            to.resize_with(from.len(), Vec::new);
            for (t, s) in to.iter_mut().zip(from) {
                t.clear();
                t.extend_from_slice(s);
            }
        }
        copy(&mut self.all, step.tables);
        copy(&mut self.windowed, step.windowed);
    }

    /// Per sequence, the blocks KV layer `layer` of a pool shaped `cfg` reads and writes.
    pub fn of(&self, cfg: &KvConfig, layer: usize) -> &[Vec<u32>] {
        self.of_store(cfg, layer, false)
    }

    /// Per sequence, the blocks of KV layer `layer`'s keys' store (`values` false) or
    /// values' ([`KvConfig::store_is_full`]).
    pub fn of_store(&self, cfg: &KvConfig, layer: usize, values: bool) -> &[Vec<u32>] {
        if cfg.is_windowed(layer) && !cfg.store_is_full(layer, values) {
            &self.windowed
        } else {
            &self.all
        }
    }
}

/// One output of [`Device::matmul`]: `y = W·x (+ bias)`, then `residual += y` when given
/// (a device may fuse the add; `y` then holds unspecified values).
#[derive(Debug, Clone, Copy)]
pub struct MatOut {
    /// `[rows, W.n_rows]`.
    pub y: Buf,
    /// `[W.n_rows]`, added to every row.
    pub bias: Option<Buf>,
    /// `[rows, W.n_rows]`.
    pub residual: Option<Buf>,
}

impl MatOut {
    pub fn to(y: Buf) -> MatOut {
        MatOut {
            y,
            bias: None,
            residual: None,
        }
    }
}

/// How RoPE pairs the dimensions of a head.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RopeMode {
    /// Adjacent pairs `(2i, 2i+1)` (llama in GGUF, whose Q/K rows were permuted at conversion).
    Normal,
    /// Halves `(i, i + n_rot/2)` (qwen2, qwen3: GPT-NeoX style).
    Neox,
}

/// RoPE of rows of heads of `head_dim`: the first `n_rot` dimensions of each head turn by
/// `θ_i = pos · freq_base^(-2i/n_rot)`, scaled as `scaling` says.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RopeSpec {
    pub head_dim: usize,
    pub n_rot: usize,
    pub mode: RopeMode,
    pub freq_base: f32,
    pub scaling: RopeScaling,
}

impl RopeSpec {
    /// What the angles of a step depend on, as bits (a cache key).
    pub fn angle_key(&self) -> [u32; 7] {
        let s = &self.scaling;
        [
            self.n_rot as u32,
            self.freq_base.to_bits(),
            s.freq_scale.to_bits(),
            s.ext_factor.to_bits(),
            s.attn_factor.to_bits(),
            s.corr_dims[0].to_bits(),
            s.corr_dims[1].to_bits(),
        ]
    }
}

/// RoPE scaling as ggml applies it (linear interpolation and YaRN): each angle is the
/// unscaled one times `freq_scale`; with `ext_factor` not 0 (YaRN), dimension pair `i` takes
/// back `ramp(i) · ext_factor` of the unscaled angle, `ramp` falling from 1 to 0 between
/// `corr_dims`, and cos and sin are scaled by `attn_factor · (1 + 0.1 ln(1/freq_scale))`
/// (by `attn_factor` alone without YaRN).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RopeScaling {
    pub freq_scale: f32,
    pub ext_factor: f32,
    pub attn_factor: f32,
    pub corr_dims: [f32; 2],
}

impl RopeScaling {
    /// No scaling: the angles as [`rope_angles`] computes them unscaled.
    pub const NONE: RopeScaling = RopeScaling {
        freq_scale: 1.0,
        ext_factor: 0.0,
        attn_factor: 1.0,
        corr_dims: [0.0, 0.0],
    };

    /// YaRN's correction dimensions (ggml's `ggml_rope_yarn_corr_dims`): the pairs that turn
    /// fewer than `beta_fast` times, and more than `beta_slow` times, over `n_ctx_orig`
    /// positions.
    pub fn corr_dims(
        n_rot: usize,
        n_ctx_orig: usize,
        freq_base: f32,
        [beta_fast, beta_slow]: [f32; 2],
    ) -> [f32; 2] {
        let dim = |rotations: f32| {
            n_rot as f32 * (n_ctx_orig as f32 / (rotations * 2.0 * std::f32::consts::PI)).ln()
                / (2.0 * freq_base.ln())
        };
        [
            dim(beta_fast).floor().max(0.0),
            dim(beta_slow).ceil().min(n_rot as f32 - 1.0),
        ]
    }

    /// The share of the unscaled angle pair `i` keeps (before `ext_factor`).
    fn ramp(&self, i: usize) -> f32 {
        let [low, high] = self.corr_dims;
        let y = (i as f32 - low) / (high - low).max(0.001);
        1.0 - y.clamp(0.0, 1.0)
    }
}

/// Rotation angles for one position: `cos_sin[i] = (cos θ_i, sin θ_i)` with
/// `θ_i = pos · base^(-2i/n_rot)` scaled by `spec.scaling`, computed as ggml does (θ
/// multiplied by the f32 ratio step by step) so that positions agree with llama.cpp.
pub fn rope_angles(pos: usize, spec: &RopeSpec, cos_sin: &mut [(f32, f32)]) {
    assert_eq!(cos_sin.len(), spec.n_rot / 2);
    let s = &spec.scaling;
    let theta_scale = spec.freq_base.powf(-2.0 / spec.n_rot as f32);
    let mut theta_extrap = pos as f32;
    for (i, cs) in cos_sin.iter_mut().enumerate() {
        let interp = s.freq_scale * theta_extrap;
        let (theta, mscale) = match s.ext_factor != 0.0 {
            true => {
                let mix = s.ramp(i) * s.ext_factor;
                let m = s.attn_factor * (1.0 + 0.1 * (1.0 / s.freq_scale).ln());
                (interp * (1.0 - mix) + theta_extrap * mix, m)
            }
            false => (interp, s.attn_factor),
        };
        *cs = (theta.cos() * mscale, theta.sin() * mscale);
        theta_extrap *= theta_scale;
    }
}

/// How router logits become expert weights.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gating {
    Softmax,
    Sigmoid,
    /// `√softplus(x)` (DeepSeek-V4).
    SqrtSoftplus,
}

/// How a mixture routes each row: the `k` most probable of `n_expert` experts (ties: the
/// lower expert), weighted by their probability, divided by the chosen ones' sum when
/// `norm_weights`, times `weights_scale`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Routing {
    pub n_expert: usize,
    pub k: usize,
    pub gating: Gating,
    pub norm_weights: bool,
    pub weights_scale: f32,
}

/// A shared expert's output, added to every row after its chosen experts: times
/// `sigmoid(gate · x)` when a gate vector (`[n_embd]`) is given, else as it is.
#[derive(Debug, Clone, Copy)]
pub struct SharedIn {
    /// `[rows, n_embd]`.
    pub out: Buf,
    pub gate: Option<Buf>,
}

/// One mixture-of-experts block's weights and routing.
#[derive(Debug, Clone, Copy)]
pub struct MoeSpec<'a> {
    /// `[n_expert, n_embd]`.
    pub router: Mat,
    /// `n_expert` each: `[n_ff_exp, n_embd]`, `[n_ff_exp, n_embd]`, `[n_embd, n_ff_exp]`.
    pub gate: &'a [Mat],
    pub up: &'a [Mat],
    pub down: &'a [Mat],
    pub routing: Routing,
    pub n_embd: usize,
    pub n_ff_exp: usize,
    pub shared: Option<SharedIn>,
    /// Added to the probabilities to choose the experts (`[n_expert]`), not to their
    /// weights (DeepSeek's `exp_probs_b`).
    pub choice_bias: Option<Buf>,
    /// The experts of each row, given (`[rows · k]`: routing by token), weighted by their
    /// probabilities as chosen ones would be.
    pub given: Option<&'a [u32]>,
    /// The experts' SwiGLU clamped ([`Device::swiglu_limited`]).
    pub limit: Option<f32>,
    /// What each expert computes.
    pub net: ExpertNet,
    /// Buffers the device may use while computing it.
    pub scratch: MoeScratch,
}

/// What each expert of a mixture computes from its input `x`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExpertNet {
    /// `down · (silu(gate · x) · up · x)`, clamped where [`MoeSpec::limit`] says.
    Swiglu,
    /// `down · relu(up · x)²` (Nemotron-H's experts); [`MoeSpec::gate`] is not read.
    ReluSqr,
}

/// Scratch of a mixture block of up to `rows` rows, sized by the caller: `probs`
/// `[rows, n_expert]`; `x` and `out` `[rows · k, n_embd]`; `gate` and `up`
/// `[rows · k, n_ff_exp]`.
#[derive(Debug, Clone, Copy)]
pub struct MoeScratch {
    pub probs: Buf,
    pub x: Buf,
    pub gate: Buf,
    pub up: Buf,
    pub out: Buf,
}

/// Counts of the mixture-of-experts blocks a device computed, since it was made.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MoeStats {
    /// Blocks computed (one per mixture layer per forward).
    pub blocks: u64,
    /// Experts that had rows routed to them, summed over those blocks: the number of
    /// experts whose weights were streamed.
    pub experts: u64,
}

/// The ops of [`Device`], for [`Device::supports`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Embed,
    RmsNorm,
    MatMul,
    Rope,
    KvStore,
    Attention,
    Swiglu,
    Gelu,
    Add,
    Scale,
    Moe,
    GatherRows,
    AllFinite,
    Argmax,
    Conv1d,
    SoftmaxRows,
    TopKRows,
    Sigmoid,
    Softplus,
    L2NormRows,
    Mul,
    DeltaNet,
    SparseAttention,
    HyperConnections,
    CopyCols,
    SwigluLimit,
    /// [`Device::attention`] with [`AttnSpec::causal`] false.
    BlockAttention,
    /// [`Device::attention`] over a step with [`Step::bidirectional`] rows.
    BidirectionalRows,
    BlockConv,
    /// [`Device::ssm_scan`].
    SsmScan,
    /// [`Device::relu_sqr`].
    ReluSqr,
}

impl Op {
    pub const ALL: [Op; 31] = [
        Op::Embed,
        Op::RmsNorm,
        Op::MatMul,
        Op::Rope,
        Op::KvStore,
        Op::Attention,
        Op::Swiglu,
        Op::Gelu,
        Op::Add,
        Op::Scale,
        Op::Moe,
        Op::GatherRows,
        Op::AllFinite,
        Op::Argmax,
        Op::Conv1d,
        Op::SoftmaxRows,
        Op::TopKRows,
        Op::Sigmoid,
        Op::Softplus,
        Op::L2NormRows,
        Op::Mul,
        Op::DeltaNet,
        Op::SparseAttention,
        Op::HyperConnections,
        Op::CopyCols,
        Op::SwigluLimit,
        Op::BlockAttention,
        Op::BidirectionalRows,
        Op::BlockConv,
        Op::SsmScan,
        Op::ReluSqr,
    ];
}

/// A backend. One executor owns a device and everything on it.
///
/// A forward is `begin(step)`, then ops, then `finish()`. Ops may be recorded and run
/// later (one command buffer per forward); [`Device::download`], [`Device::all_finite`],
/// [`Device::argmax`] and [`Device::top_k_rows`] wait for what was recorded before them. Buffers are named by
/// prefixes: an op on `n` rows of width `w` touches floats `0..n·w` of its buffers.
///
/// Batch invariance (DESIGN.md): every op computes a row's result in one fixed order that
/// depends on nothing but the row (and, for attention, its sequence's cached positions):
/// not on the other rows, their number, or the threads.
pub trait Device: Send {
    /// What the device is, for logs: `cpu (avx512-vnni, 2 threads)`.
    fn describe(&self) -> String;
    /// Whether it runs `op`.
    fn supports(&self, op: Op) -> bool;
    /// Whether it multiplies (and embeds from) weights of `ty`.
    fn supports_type(&self, ty: GgmlType) -> bool;
    /// Bytes a matrix of `ty` in `role` takes once uploaded.
    fn matrix_bytes(&self, ty: GgmlType, n_rows: usize, n_cols: usize, role: Role) -> u64;
    /// Releases the device's threads while the caller waits for something else (the other
    /// stage of a split computing on the same cores).
    fn rest(&self) {}

    /// A zeroed buffer of `len` floats.
    fn alloc(&mut self, len: usize) -> Result<Buf>;
    /// `buf[at..at + data.len()] = data`.
    fn upload(&mut self, buf: Buf, at: usize, data: &[f32]);
    /// `out = buf[at..at + out.len()]`, once every op recorded before has run.
    fn download(&mut self, buf: Buf, at: usize, out: &mut [f32]);
    /// Uploads matrices, repacked as the device's kernels want them.
    fn upload_matrices(
        &mut self,
        srcs: &[MatrixSource],
        progress: &Progress<'_>,
    ) -> Result<Vec<Mat>>;

    /// Allocates the storage of a KV pool of this shape (once); its blocks are those of
    /// [`kv::KvPool`].
    fn kv_alloc(&mut self, cfg: KvConfig) -> Result<()>;
    /// Copies block `from` of every layer's keys and values to block `to` (the layers
    /// that keep every position: the windowed ones have their own blocks).
    fn kv_copy_block(&mut self, from: u32, to: u32);
    /// Appends the bytes of block `block` to `out`: the keys' store of every layer that
    /// keeps every position in it, then the values' stores
    /// ([`KvConfig::full_block_bytes`]).
    fn kv_read_block(&mut self, block: u32, out: &mut Vec<u8>);
    /// Writes block `block` from bytes laid out as [`Device::kv_read_block`] gives them.
    fn kv_write_block(&mut self, block: u32, data: &[u8]);
    /// Appends the bytes of companion `companion` of the windowed class ([`kv::window`]):
    /// the keys' store of every windowed layer in it, then the values' stores
    /// ([`KvConfig::windowed_block_bytes`]).
    fn kv_read_companion(&mut self, companion: u32, out: &mut Vec<u8>);
    /// Writes companion `companion` from bytes laid out as [`Device::kv_read_companion`]
    /// gives them.
    fn kv_write_companion(&mut self, companion: u32, data: &[u8]);
    /// Puts back checkpoint row `row` of state slot `slot` in every state layer: the state
    /// before the `row`-th row after its checkpoint's (the pool cut its sequence back to
    /// it: [`kv::KvPool::truncate`]); `row` below [`kv::StateKv::rows`].
    fn state_restore(&mut self, slot: u32, row: usize);
    /// Copies the state of slot `slot` (in every state layer) into snapshot `snap`
    /// ([`kv::snapshot`]), after the forward recorded last.
    fn state_save(&mut self, slot: u32, snap: u32);
    /// Copies snapshot `snap` into the state of slot `slot`.
    fn state_load(&mut self, snap: u32, slot: u32);
    /// Appends the bytes of snapshot `snap` to `out` (once what was recorded has run):
    /// every state layer's floats in layer order, f32 little-endian
    /// ([`kv::StateKv::snapshot_bytes`]).
    fn state_read(&mut self, snap: u32, out: &mut Vec<u8>);
    /// Writes snapshot `snap` from bytes laid out as [`Device::state_read`] gives them.
    fn state_write(&mut self, snap: u32, data: &[u8]);

    /// Starts a forward over `step`'s rows.
    fn begin(&mut self, step: &Step<'_>);
    /// Ends it: what was recorded runs.
    fn finish(&mut self);

    /// `out[i] = table[tokens[i]]` (`out` `[tokens.len(), table.n_cols]`).
    fn embed(&mut self, table: Mat, tokens: &[u32], out: Buf);
    /// Per row of `width`: `out = x / sqrt(mean(x²) + eps) · w` (`out` may be `x`).
    /// Per head: `rows` is rows × heads and `width` the head size.
    fn rms_norm(&mut self, x: Buf, w: Buf, rows: usize, width: usize, eps: f32, out: Buf);
    /// For each matrix `ws[i]` of row length `k`: its [`MatOut`] for `x` (`[rows, k]`).
    /// Quantized weights meet 8-bit activations (the backend's stated precision).
    fn matmul(&mut self, ws: &[Mat], x: Buf, rows: usize, outs: &[MatOut]);
    /// RoPE at each step row's position on `x` (`[step rows, heads · head_dim]`).
    fn rope(&mut self, x: Buf, heads: usize, spec: &RopeSpec);
    /// Stores `k` and `v` (`[step rows, n_head_kv · head_dim]`) of KV layer `layer` at the
    /// rows' positions in their sequences' blocks, under the pool's
    /// [`kv::KvConfig::rotation`] where it has one. `k` and `v` are consumed: a backend may
    /// leave them rotated.
    fn kv_store(&mut self, layer: usize, k: Buf, v: Buf);
    /// `out` (`[step rows, n_head · head_dim]`): each row's query `q` (same shape) over
    /// positions [`AttnSpec::span_of`] of its sequence in KV layer `layer`, softmax over fixed
    /// chunks of positions from position 0. In a rotated pool the query meets the keys
    /// rotated as they were, and `out` is rotated back (`q` is consumed: a backend may
    /// leave it rotated).
    fn attention(&mut self, layer: usize, q: Buf, out: Buf, spec: &AttnSpec);
    /// `out` (`[step rows, width]`): per row at `pos` and channel `c`,
    /// `Σ_j w[c·k + j] · in(pos + 1 - k + j)[c]` over `j` in `0..k` ascending, `in(p)` the
    /// input `x` (`[step rows, width]`) of position `p`, from the step or from the
    /// sequence's state in state layer `layer` (KV layer index), which then holds the last
    /// `k - 1` inputs. `w`: `[width, k]`.
    fn conv1d(&mut self, layer: usize, x: Buf, w: Buf, out: Buf, spec: &ConvSpec);
    /// Gated DeltaNet's recurrence ([`DeltaSpec`]) over the step's rows, each sequence's
    /// rows in order from its state in state layer `layer` (KV layer index), which then
    /// holds the state after its last row.
    fn delta_net(&mut self, layer: usize, io: &DeltaIo, spec: &DeltaSpec);
    /// Mamba-2's selective scan ([`crate::scan`]) over the step's rows, each sequence's rows
    /// in order from its state in state layer `layer` (KV layer index), which then holds the
    /// state after its last row.
    fn ssm_scan(&mut self, layer: usize, io: &ScanIo, spec: &ScanSpec);
    /// `gate = silu(gate) · up` over `len` floats.
    fn swiglu(&mut self, gate: Buf, up: Buf, len: usize);
    /// `gate = silu(min(gate, limit)) · clamp(up, -limit, limit)` over `len` floats
    /// (DeepSeek-V4's clamped SwiGLU).
    fn swiglu_limited(&mut self, gate: Buf, up: Buf, len: usize, limit: f32);
    /// Compressed sparse attention ([`crate::sparse`]) of KV layer `layer` (whose memory is
    /// records of [`SparseSpec::layout`]) over the step's rows.
    fn sparse_attention(&mut self, layer: usize, io: &SparseIo, spec: &SparseSpec);
    /// Stores the step's rows into KV layer `layer` as [`Device::sparse_attention`] does
    /// (raw keys, compressor rows, the blocks they end), attending nothing (`io.q`,
    /// `io.out` and the indexer's queries unread): a block drafter's context rows.
    fn sparse_store(&mut self, layer: usize, io: &SparseIo, spec: &SparseSpec);
    /// Hyper-connections before a block ([`crate::hyper`]): per row, `mix` (`[rows,
    /// mix_width]`) becomes its weights in place (`base` `[mix_width]`), and `out` (`[rows,
    /// width]`) the block's input from the streams `x` (`[rows, streams · width]`).
    fn hyper_pre(&mut self, x: Buf, mix: Buf, base: Buf, out: Buf, rows: usize, spec: &HyperSpec);
    /// Hyper-connections after a block: the streams `x` (`[rows, streams · width]`) from the
    /// block's output `y` (`[rows, width]`) and themselves, by the weights `hyper_pre` left
    /// in `mix`.
    fn hyper_post(&mut self, y: Buf, x: Buf, mix: Buf, rows: usize, spec: &HyperSpec);
    /// Per row: `out[r, c.out_at..][..c.width] = x[r, c.x_at..][..c.width]` (rows of
    /// `c.x_width` and `c.out_width` floats; `out` a buffer other than `x`).
    fn copy_cols(&mut self, x: Buf, out: Buf, rows: usize, c: &Cols);
    /// DFlash 2's convolution along each sequence's rows of the step (a block drafter's
    /// block: a sequence's rows consecutive, at ascending positions). For row `r` at place
    /// `i` among its sequence's rows ([`block_places`]), `j = t + spec.k · spec.side`:
    ///
    /// ```text
    /// out[r, c] = Σ_{t = 0..=min(k - 1, i)} (coef[r, c / group + groups · j] + base[c + width · j]) · x[r - t, c]
    /// ```
    ///
    /// the taps summed in that order, `groups = width / group`; `x` and `out` `[rows,
    /// width]` (different buffers), `coef` `[rows, 2 · k · groups]`, `base` `[2 · k · width]`.
    fn block_conv(&mut self, x: Buf, coef: Buf, base: Buf, rows: usize, spec: &BlockConv, out: Buf);
    /// `gate = gelu(gate) · up` over `len` floats (tanh approximation).
    fn gelu(&mut self, gate: Buf, up: Buf, len: usize);
    /// `x += y` over `len` floats.
    fn add(&mut self, x: Buf, y: Buf, len: usize);
    /// `x *= factor` over `len` floats.
    fn scale(&mut self, x: Buf, len: usize, factor: f32);
    /// `hidden += Σ_j w_j · expert_{e_j}(x) (+ shared)` for `x` (`[rows, n_embd]`, the
    /// normalized input) and `hidden` (`[rows, n_embd]`): each row routed by
    /// [`Routing`], each chosen expert's matrices multiplied once with all the rows that
    /// chose it, each row's outputs summed in the order it chose them.
    fn moe(&mut self, spec: &MoeSpec<'_>, x: Buf, rows: usize, hidden: Buf);
    /// `out[j] = x[rows[j]]`, rows of `width`.
    fn gather_rows(&mut self, x: Buf, rows: &[usize], width: usize, out: Buf);
    /// Per row of `width`: whether every value is finite.
    fn all_finite(&mut self, x: Buf, rows: usize, width: usize) -> Vec<bool>;
    /// Per row of `width`: the index of its largest value (the first of equals).
    fn argmax(&mut self, x: Buf, rows: usize, width: usize) -> Vec<u32>;

    // Generic primitives, for layer kinds composed from them rather than given an op of
    // their own. Each computes a row (or an element) from that row alone.

    /// Per row of `width`, in place: `x = e^(x - max) / Σ e^(x - max)`, the max and then
    /// the sum each taken in one fixed order of the row's elements. A value of -∞ (a
    /// masked position) gives 0; a row needs at least one finite value.
    fn softmax_rows(&mut self, x: Buf, rows: usize, width: usize);
    /// Per row of `width`: its `k` largest values (`k <= width`) with their indices,
    /// largest first, equal values by the lower index first, NaN counted as -∞ (so `k = 1`
    /// gives [`Device::argmax`]'s index). `rows · k` pairs, row `r`'s at `r · k..`. Waits
    /// for what was recorded before, like `argmax`.
    fn top_k_rows(&mut self, x: Buf, rows: usize, width: usize, k: usize) -> Vec<(u32, f32)>;
    /// `x = 1 / (1 + e^-x)` over `len` floats.
    fn sigmoid(&mut self, x: Buf, len: usize);
    /// `x = ln(1 + e^x)` over `len` floats; `x` itself above 20 (as ggml's softplus).
    fn softplus(&mut self, x: Buf, len: usize);
    /// Per row of `width`: `out = x / max(sqrt(Σ x²), eps)`, the sum in one fixed order of
    /// the row's elements (ggml's `l2_norm`: eps bounds the norm, it is not added to the
    /// sum). `out` may be `x`; per head when `rows` is rows × heads.
    fn l2_norm_rows(&mut self, x: Buf, rows: usize, width: usize, eps: f32, out: Buf);
    /// `x *= y` over `len` floats, element by element (`y` a buffer other than `x`).
    fn mul(&mut self, x: Buf, y: Buf, len: usize);
    /// `x = max(x, 0)²` over `len` floats (the squared ReLU of Nemotron-H's networks).
    fn relu_sqr(&mut self, x: Buf, len: usize);

    /// The mixture blocks computed so far.
    fn moe_stats(&self) -> MoeStats;
    /// Starts (`true`) or stops timing each op on the device; whether it can.
    fn profile_ops(&mut self, _on: bool) -> bool {
        false
    }
    /// What was timed since the last call, per kind of op, most time first.
    fn op_times(&mut self) -> Vec<OpTime> {
        Vec::new()
    }
    /// The device memory's streaming-read bandwidth in bytes per second, measured by a
    /// kernel; `None` where the device computes in the host's memory (the host's probe
    /// applies).
    fn read_bandwidth(&mut self) -> Option<f64> {
        None
    }
}

/// The shape of a [`Device::block_conv`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockConv {
    /// Channels.
    pub width: usize,
    /// Taps.
    pub k: usize,
    /// Channels that share a dynamic coefficient.
    pub group: usize,
    /// Which of the two convolutions a coefficient row holds (0 or 1).
    pub side: usize,
}

/// Each row's place among its sequence's rows of the step (0 for its first), for
/// [`Device::block_conv`].
pub fn block_places(rows: &[Row]) -> Vec<u32> {
    let mut places = Vec::with_capacity(rows.len());
    for (r, row) in rows.iter().enumerate() {
        let same = r > 0 && rows[r - 1].seq == row.seq;
        places.push(if same { places[r - 1] + 1 } else { 0 });
    }
    places
}

/// Columns [`Device::copy_cols`] copies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cols {
    pub x_width: usize,
    pub x_at: usize,
    pub out_width: usize,
    pub out_at: usize,
    pub width: usize,
}

/// A causal convolution over positions, per channel, with the sequence's last `k - 1`
/// inputs kept as its recurrent state (`[k - 1, width]`, oldest first, at the start of the
/// slot; zero before position 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConvSpec {
    /// Channels.
    pub width: usize,
    /// Taps per channel.
    pub k: usize,
    /// Each output `y` becomes `silu(y) = y / (1 + e^-y)` (Mamba's and Gated DeltaNet's
    /// convolutions).
    pub silu: bool,
    /// `[width]`, added to each output before the SiLU (Mamba-2's `ssm_conv1d.bias`).
    pub bias: Option<Buf>,
}

/// Gated DeltaNet's recurrence (the gated delta rule), per value head `h` of `n_v_heads`
/// with the key head `h % n_k_heads` (ggml's tiling of key heads), on a state `S`
/// (`[head_dim, head_dim]`: a row per value dimension, the key dimensions along it). Per
/// row, in the sequence's order:
///
/// ```text
/// S    *= exp(a[h] · g[h])
/// d[j]  = (v[j] - S[j]·k) · beta[h]      for each value dimension j
/// S[j] += d[j] · k
/// out[j] = (S[j]·q) / sqrt(head_dim)
/// ```
///
/// with the dot products each summed in one fixed order. The state of a sequence is the
/// `n_v_heads · head_dim²` floats from float `at` of its slot (layers may keep other state
/// before it: a convolution's); zero before position 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeltaSpec {
    pub n_k_heads: usize,
    pub n_v_heads: usize,
    pub head_dim: usize,
    pub at: usize,
}

impl DeltaSpec {
    /// Floats of one sequence's state.
    pub fn state_floats(&self) -> usize {
        self.n_v_heads * self.head_dim * self.head_dim
    }
}

/// The buffers of [`Device::delta_net`] for the step's rows: `q`, `k` `[rows, n_k_heads ·
/// head_dim]` (unit length per head, as Gated DeltaNet normalizes them); `v`, `out` `[rows,
/// n_v_heads · head_dim]`; `g` (the decay's rate, `softplus(α + dt_bias)`) and `beta` (the
/// write strength, in `(0, 1)`) `[rows, n_v_heads]`; `a` `[n_v_heads]` (`-exp(A_log)`).
#[derive(Debug, Clone, Copy)]
pub struct DeltaIo {
    pub q: Buf,
    pub k: Buf,
    pub v: Buf,
    pub g: Buf,
    pub beta: Buf,
    pub a: Buf,
    pub out: Buf,
}

/// What a backend's own working memory (besides the buffers a forward allocates through
/// [`Device::alloc`]) depends on, for the memory plan before any device is made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScratchShape {
    pub n_threads: usize,
    /// Floats of the longest weight row a matmul reads.
    pub widest: usize,
    /// Positions a sequence may attend.
    pub n_ctx: usize,
    /// Query heads per key-value head.
    pub n_group: usize,
    pub head_dim: usize,
}

/// One kind of op's time on a device while it was timing its ops.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct OpTime {
    /// The kernel (and its variant, such as a weight type).
    pub op: String,
    pub calls: u64,
    pub seconds: f64,
    /// Bytes of weights it streamed (0 where not counted).
    pub bytes: u64,
}
