//! The compute pipelines, built from WGSL on first use and kept.

use std::collections::HashMap;

use gguf::GgmlType;

use crate::context::Ctx;
use crate::formats::Layout;
use crate::gpu::{ATTENTION_PART, DECODE_ROWS};

/// A kernel and the variant it is built for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Kernel {
    /// A matmul of `rows` rows per workgroup (its `R`) and `threads` per output column
    /// (its `T`).
    MatMul {
        ty: GgmlType,
        rows: u32,
        threads: u32,
    },
    Embed(GgmlType),
    RmsNorm,
    Swiglu,
    SwigluLimit,
    Gelu,
    Add,
    Scale,
    Sigmoid,
    Softplus,
    ReluSqr,
    Mul,
    /// Row reductions (rows.wgsl).
    SoftmaxRows,
    L2NormRows,
    Rope,
    /// A quantized KV pool's rotation (hadamard.wgsl).
    Hadamard,
    /// Stores into a KV pool of type `kv` (one [`kv_code`] names).
    KvStore {
        kv: GgmlType,
    },
    Attention {
        kv: GgmlType,
    },
    AttentionMerge,
    MoeCombine,
    GatherRows,
    CopyCols,
    BlockConv,
    /// Compressed sparse attention over a pool of type `kv` (sparse_*.wgsl): the raw key
    /// stored, a compressor's rows stored, blocks compressed, the indexer's scores, the
    /// attention.
    SparseRaw {
        kv: GgmlType,
    },
    SparseComp {
        kv: GgmlType,
    },
    SparseCompress {
        kv: GgmlType,
    },
    SparseScores {
        kv: GgmlType,
    },
    SparseAttend {
        kv: GgmlType,
    },
    /// Hyper-connections (hyper.wgsl): a row's weights, the block's input, the new streams.
    HyperWeights,
    HyperPre,
    HyperPost,
    /// The recurrences with state (conv.wgsl, delta.wgsl, scan.wgsl).
    Conv1d,
    DeltaNet,
    SsmScan,
    Bandwidth,
    /// Whether a workgroup's subgroups are runs of consecutive invocations.
    Lanes,
    /// An encoder's ops (`device::encoder::EncoderDevice`): activations alone (eltwise.wgsl),
    /// layer_norm.wgsl, dense_attention.wgsl and pool.wgsl.
    GeluAlone,
    GeluQuick,
    LayerNorm,
    DenseAttention,
    AvgPool2d,
}

/// The code step.wgsl names the KV pool's type by; `None` for a type the GPU does not keep.
pub(crate) fn kv_code(ty: GgmlType) -> Option<u32> {
    match ty {
        GgmlType::F32 => Some(0),
        GgmlType::F16 => Some(1),
        GgmlType::BF16 => Some(2),
        GgmlType::Q8_0 => Some(3),
        _ => None,
    }
}

/// How a matmul's output column is shared: `threads` (a power of two up to 64) each take
/// every `threads`-th chunk of the weight row, and their partials are summed by one tree,
/// in workgroup memory or, with `subgroups`, by shuffles within a subgroup (same bits).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct MatmulShape {
    pub threads: u32,
    pub subgroups: bool,
}

impl MatmulShape {
    /// `threads` per column on a device whose subgroups hold at least `subgroup_min` lanes
    /// in order (`None`: no subgroup operations): shuffles where a column fits a subgroup.
    pub fn new(threads: u32, subgroup_min: Option<u32>) -> Self {
        assert!(threads.is_power_of_two() && threads <= 64);
        MatmulShape {
            threads,
            subgroups: threads > 1 && subgroup_min.is_some_and(|m| m >= threads),
        }
    }

    /// Threads per column on an adapter of type `t`: one on a CPU (lavapipe runs a
    /// workgroup's threads as SIMD lanes and every barrier as a switch between them, so a
    /// column's sum is best left to one thread), a subgroup's worth elsewhere.
    pub fn threads_for(t: wgpu::DeviceType) -> u32 {
        match t {
            wgpu::DeviceType::Cpu => 1,
            _ => 32,
        }
    }
}

/// How the op times name a kernel: `MatMul(Q4_K)` for decode and verification rows,
/// `MatMul(Q4_K, prompt)` for the prompt chunks' shape, `Attention(F16)` by the KV type,
/// the variant's name otherwise.
impl std::fmt::Display for Kernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Kernel::MatMul { ty, rows, .. } if *rows as usize == DECODE_ROWS => {
                write!(f, "MatMul({ty})")
            }
            Kernel::MatMul { ty, .. } => write!(f, "MatMul({ty}, prompt)"),
            Kernel::KvStore { kv } => write!(f, "KvStore({kv})"),
            Kernel::Attention { kv } => write!(f, "Attention({kv})"),
            other => write!(f, "{other:?}"),
        }
    }
}

impl Kernel {
    /// The WGSL and entry point of the kernel; a matmul's partials summed by subgroup
    /// shuffles on a device whose subgroups hold at least `lanes` lanes in order.
    fn source(self, lanes: Option<u32>) -> (String, &'static str) {
        let kv = |ty: GgmlType, body: &str| {
            format!(
                "const KV: u32 = {}u;\n{}\n{body}",
                kv_code(ty).expect("a KV type kv_alloc took"),
                include_str!("shaders/step.wgsl")
            )
        };
        let typed = |ty: GgmlType, body: &str| {
            let layout = Layout::of(ty).expect("a supported type");
            format!("{}\n{body}", layout.prelude())
        };
        let elt = include_str!("shaders/eltwise.wgsl");
        const STORE: &str = include_str!("shaders/sparse_store.wgsl");
        let sparse = |body: &str| format!("{}\n{body}", include_str!("shaders/sparse_common.wgsl"));
        let runs = |body: &str| format!("{}\n{body}", include_str!("shaders/runs_common.wgsl"));
        let trees = include_str!("shaders/trees.wgsl");
        let attn = format!(
            "const PART: u32 = {ATTENTION_PART}u;\n{}",
            include_str!("shaders/attention_common.wgsl")
        );
        match self {
            Kernel::MatMul { ty, rows, threads } => {
                let shape = MatmulShape::new(threads, lanes);
                let reduce = match shape.subgroups {
                    true => include_str!("shaders/reduce_subgroup.wgsl"),
                    false => include_str!("shaders/reduce_shared.wgsl"),
                };
                let consts = format!(
                    "const T: u32 = {}u;\nconst R: u32 = {rows}u;\nconst WG: u32 = 64u;\n{reduce}\n",
                    shape.threads
                );
                (
                    typed(ty, &(consts + include_str!("shaders/matmul.wgsl"))),
                    "main",
                )
            }
            Kernel::Embed(ty) => (typed(ty, include_str!("shaders/embed.wgsl")), "main"),
            Kernel::RmsNorm => (include_str!("shaders/norm.wgsl").into(), "main"),
            Kernel::Swiglu => (elt.into(), "swiglu"),
            Kernel::SwigluLimit => (elt.into(), "swiglu_limit"),
            Kernel::Gelu => (elt.into(), "gelu"),
            Kernel::Add => (elt.into(), "add"),
            Kernel::Scale => (elt.into(), "scale"),
            Kernel::Sigmoid => (elt.into(), "sigmoid"),
            Kernel::Softplus => (elt.into(), "softplus"),
            Kernel::ReluSqr => (elt.into(), "relu_sqr"),
            Kernel::Mul => (elt.into(), "mul"),
            Kernel::SoftmaxRows => (include_str!("shaders/rows.wgsl").into(), "softmax"),
            Kernel::L2NormRows => (include_str!("shaders/rows.wgsl").into(), "l2_norm"),
            Kernel::Rope => (include_str!("shaders/rope.wgsl").into(), "main"),
            Kernel::Hadamard => (include_str!("shaders/hadamard.wgsl").into(), "main"),
            Kernel::KvStore { kv: c } => (kv(c, include_str!("shaders/kv_store.wgsl")), "main"),
            Kernel::Attention { kv: c } => {
                let body = include_str!("shaders/attention.wgsl");
                (kv(c, &format!("{attn}\n{trees}\n{body}")), "main")
            }
            Kernel::AttentionMerge => {
                let body = include_str!("shaders/attention_merge.wgsl");
                (format!("{attn}\n{body}"), "main")
            }
            Kernel::MoeCombine => (include_str!("shaders/moe.wgsl").into(), "main"),
            Kernel::GatherRows => (include_str!("shaders/gather.wgsl").into(), "main"),
            Kernel::CopyCols => (include_str!("shaders/cols.wgsl").into(), "main"),
            Kernel::BlockConv => (include_str!("shaders/block_conv.wgsl").into(), "main"),
            Kernel::SparseRaw { kv: c } => (kv(c, &sparse(STORE)), "raw"),
            Kernel::SparseComp { kv: c } => (kv(c, &sparse(STORE)), "comp"),
            Kernel::SparseCompress { kv: c } => (
                kv(c, &sparse(include_str!("shaders/sparse_compress.wgsl"))),
                "main",
            ),
            Kernel::SparseScores { kv: c } => (
                kv(c, &sparse(include_str!("shaders/sparse_scores.wgsl"))),
                "main",
            ),
            Kernel::SparseAttend { kv: c } => (
                kv(c, &sparse(include_str!("shaders/sparse_attend.wgsl"))),
                "main",
            ),
            Kernel::HyperWeights => (include_str!("shaders/hyper.wgsl").into(), "weights"),
            Kernel::HyperPre => (include_str!("shaders/hyper.wgsl").into(), "pre"),
            Kernel::HyperPost => (include_str!("shaders/hyper.wgsl").into(), "post"),
            Kernel::Conv1d => (runs(include_str!("shaders/conv.wgsl")), "main"),
            Kernel::DeltaNet => (runs(include_str!("shaders/delta.wgsl")), "main"),
            Kernel::SsmScan => (runs(include_str!("shaders/scan.wgsl")), "main"),
            Kernel::Bandwidth => (include_str!("shaders/bandwidth.wgsl").into(), "main"),
            Kernel::Lanes => (include_str!("shaders/lanes.wgsl").into(), "main"),
            Kernel::GeluAlone => (elt.into(), "gelu_alone"),
            Kernel::GeluQuick => (elt.into(), "gelu_quick"),
            Kernel::LayerNorm => {
                let body = include_str!("shaders/layer_norm.wgsl");
                (format!("{trees}\n{body}"), "main")
            }
            Kernel::DenseAttention => {
                let body = include_str!("shaders/dense_attention.wgsl");
                (format!("{trees}\n{body}"), "main")
            }
            Kernel::AvgPool2d => (include_str!("shaders/pool.wgsl").into(), "main"),
        }
    }
}

/// See the module doc.
pub(crate) struct Pipelines {
    built: HashMap<Kernel, wgpu::ComputePipeline>,
    /// Threads per matmul column the adapter takes (more for long rows:
    /// `Gpu::matmul_threads`).
    threads: u32,
    /// Lanes the device's subgroups hold at least, in order (`None`: no shuffles).
    lanes: Option<u32>,
    /// Per weight type with tables (`formats::Table`), the buffer its kernels bind.
    tables: HashMap<GgmlType, wgpu::Buffer>,
}

impl Pipelines {
    pub fn new(threads: u32, lanes: Option<u32>) -> Self {
        Pipelines {
            built: HashMap::new(),
            threads,
            lanes,
            tables: HashMap::new(),
        }
    }

    /// Makes the tables buffer of `ty` (a type with a layout) if it has tables and none
    /// was made; or says why the device has no room for it.
    pub fn add_tables(&mut self, ctx: &Ctx, ty: GgmlType) -> Result<(), String> {
        if self.tables.contains_key(&ty) {
            return Ok(());
        }
        let layout = Layout::of(ty).expect("a supported type");
        if let Some(bytes) = layout.table_bytes() {
            let buf = ctx.buffer_with(&format!("{ty} tables"), &bytes)?;
            self.tables.insert(ty, buf);
        }
        Ok(())
    }

    /// The tables buffer kernel `k` binds (group 1), `None` where it binds none: `k` is
    /// over no weight type or one without tables. A type's are made at its upload.
    pub fn tables(&self, k: Kernel) -> Option<&wgpu::Buffer> {
        match k {
            Kernel::MatMul { ty, .. } | Kernel::Embed(ty) => self.tables.get(&ty),
            _ => None,
        }
    }

    /// The matmul's shape at the adapter's threads per column.
    pub fn matmul_shape(&self) -> MatmulShape {
        MatmulShape::new(self.threads, self.lanes)
    }

    pub fn get(&mut self, ctx: &Ctx, k: Kernel) -> wgpu::ComputePipeline {
        self.built
            .entry(k)
            .or_insert_with(|| {
                let (src, entry) = k.source(self.lanes);
                let module = ctx
                    .device
                    .create_shader_module(wgpu::ShaderModuleDescriptor {
                        label: Some(&format!("{k:?}")),
                        source: wgpu::ShaderSource::Wgsl(src.into()),
                    });
                ctx.device
                    .create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                        label: Some(&format!("{k:?}")),
                        layout: None,
                        module: &module,
                        entry_point: Some(entry),
                        compilation_options: wgpu::PipelineCompilationOptions {
                            zero_initialize_workgroup_memory: !matches!(k, Kernel::MatMul { .. }),
                            ..Default::default()
                        },
                        cache: None,
                    })
            })
            .clone()
    }
}
