//! Command-line arguments, llama.cpp-compatible where a flag exists there.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};
use gguf::GgmlType;

use crate::pull::{self, DEFAULT_MODEL};
use crate::CliError;

#[derive(Parser)]
#[command(
    name = "tandem",
    version,
    about = "Local LLM inference: run GGUF models for several users, fast."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand)]
pub enum Command {
    /// Fetch a known model into the cache and print its path.
    Pull(PullArgs),
    /// Generate text from a prompt.
    Run(RunArgs),
    /// Show a model's architecture, tensors and memory plan.
    Info(InfoArgs),
    /// Perplexity over a text file, with llama-perplexity's protocol.
    Perplexity(PerplexityArgs),
    /// An OpenAI-compatible, llama-server-compatible HTTP server for many users at once.
    /// A flag given twice takes its last value, as llama-server's.
    #[command(args_override_self = true)]
    Serve(Box<crate::serve::ServeArgs>),
    /// Benchmarks with ratios against a peer measured in the same run.
    Bench(crate::bench::BenchArgs),
    /// Write a random-weight model of a given shape (for tests and benchmarks).
    Synth(crate::synth::SynthArgs),
    /// Compute an importance matrix over a text, as llama-imatrix does, for quantize.
    Imatrix(crate::imatrix::ImatrixArgs),
    /// Write a model with its weight matrices in another type, as llama-quantize does.
    Quantize(crate::quantize::QuantizeArgs),
    /// Hold the first blocks of a split model and serve them to a head over TCP.
    #[command(name = "box")]
    StageBox(crate::box_worker::BoxArgs),
}

/// llama.cpp's multi-letter short flags, which clap cannot express, and their long forms.
const SHORT_ALIASES: &[(&str, &str)] = &[
    ("-ub", "--ubatch-size"),
    ("-np", "--parallel"),
    ("-ctk", "--cache-type-k"),
    ("-ctv", "--cache-type-v"),
    ("-md", "--model-draft"),
    ("-tb", "--threads-batch"),
    ("-ngl", "--n-gpu-layers"),
    ("-fa", "--flash-attn"),
    ("-kvu", "--kv-unified"),
    ("-cb", "--cont-batching"),
];

/// Rewrites llama.cpp's multi-letter short flags (`-ub 1`) into their long forms.
pub fn expand_short_aliases(args: impl Iterator<Item = String>) -> Vec<String> {
    args.map(|a| {
        SHORT_ALIASES
            .iter()
            .find(|(short, _)| *short == a)
            .map_or(a, |(_, long)| long.to_string())
    })
    .collect()
}

#[derive(Args)]
pub struct PullArgs {
    /// smollm2-135m, qwen2.5-coder-0.5b, qwen2.5-coder-1.5b or gemma3-270m.
    pub name: String,
    #[command(flatten)]
    pub cache: CacheArgs,
}

impl PullArgs {
    pub fn execute(self) -> Result<(), CliError> {
        let m = pull::known(&self.name).ok_or_else(|| {
            CliError::Usage(format!(
                "unknown model '{}' (known: {})",
                self.name,
                pull::MODELS
                    .iter()
                    .map(|m| m.name)
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
        })?;
        let path = pull::pull(m, self.cache.dir.as_deref())?;
        println!("{}", path.display());
        Ok(())
    }
}

#[derive(Args, Clone)]
pub struct CacheArgs {
    /// Model cache directory (default: $TANDEM_MODELS or the user cache dir).
    #[arg(long, global = true)]
    pub dir: Option<PathBuf>,
}

/// The model and how it is evaluated.
#[derive(Args, Clone)]
pub struct ModelArgs {
    /// A GGUF path or a known model name (pulled if missing).
    #[arg(short = 'm', long = "model", default_value = DEFAULT_MODEL)]
    pub model: String,
    /// Threads (default: all cores).
    #[arg(short = 't', long = "threads")]
    pub threads: Option<usize>,
    /// Context size in tokens.
    #[arg(short = 'c', long = "ctx-size", default_value_t = 4096)]
    pub ctx_size: usize,
    /// Physical batch: rows per forward pass.
    #[arg(long = "ubatch-size", default_value_t = 512)]
    pub ubatch: usize,
    /// KV cache type: f32, f16, bf16, q8_0, q4_0, q4_1, iq4_nl, q5_0 or q5_1 (the gpu backend: the first four).
    #[arg(long = "cache-type-k", default_value = "f16", value_parser = parse_kv_type)]
    pub cache_type: GgmlType,
    /// The backend to compute on: auto (a GPU when wgpu finds a real one, else the CPU), gpu
    /// (the wgpu backend on the best adapter, a software one such as lavapipe included), cpu,
    /// or reference (the scalar backend others are checked against; slow).
    #[arg(long = "device", default_value = "auto", value_parser = engine::DeviceKind::parse)]
    pub device: engine::DeviceKind,
    /// Sliding-window layers keep every position, as the others do: any prefix of a
    /// prompt can be reused, at full attention's KV memory (llama.cpp's --swa-full).
    #[arg(long = "swa-full")]
    pub swa_full: bool,
    /// Snapshots of a recurrent model's state kept per slot, so that a prompt starting
    /// with a computed prefix (the next turn of a chat) resumes from the nearest one
    /// instead of computing it all again; each costs one state (`tandem info`).
    #[arg(long = "ctx-checkpoints", visible_aliases = ["ctxcp", "swa-checkpoints"], default_value_t = 8)]
    pub ctx_checkpoints: usize,
    /// Tables (token embeddings) left in the file and read as their rows are needed, never
    /// held resident on the CPU: on, auto (tables over 4 GiB) or off (llama.cpp's).
    #[arg(long = "lazy-mode", visible_alias = "lzm", default_value = "auto", value_parser = model::LazyMode::parse)]
    pub lazy_mode: model::LazyMode,
    /// How the model file is held: mmap (pages read as touched), mlock or mmap+mlock (mapped
    /// and locked in memory) or none (read whole into memory).
    #[arg(long = "load-mode", visible_alias = "lm", default_value = "mmap", value_parser = gguf::LoadMode::parse)]
    pub load_mode: gguf::LoadMode,
    #[command(flatten)]
    pub cache: CacheArgs,
    #[command(flatten)]
    pub rope: RopeArgs,
    /// LoRA adapters (GGUF) at scale 1, separated by commas; repeatable.
    #[arg(long = "lora", value_delimiter = ',')]
    pub lora: Vec<std::path::PathBuf>,
    /// LoRA adapters with their scales, `FNAME:SCALE` separated by commas; repeatable.
    #[arg(long = "lora-scaled", value_delimiter = ',')]
    pub lora_scaled: Vec<String>,
    /// Load the adapters at scale 0 (`tandem serve`: set later with POST /lora-adapters).
    #[arg(long = "lora-init-without-apply")]
    pub lora_init_without_apply: bool,
}

/// RoPE scaling over what the model file says, as llama.cpp's flags set it.
#[derive(Args, Clone, Default)]
pub struct RopeArgs {
    /// RoPE scaling: none, linear or yarn (default: the model's).
    #[arg(long = "rope-scaling", value_parser = ["none", "linear", "yarn"])]
    pub scaling: Option<String>,
    /// Context scaling factor: RoPE frequencies divided by N.
    #[arg(long = "rope-scale")]
    pub scale: Option<f32>,
    /// RoPE base frequency (default: the model's).
    #[arg(long = "rope-freq-base")]
    pub freq_base: Option<f32>,
    /// RoPE frequency scaling factor, 1/N of --rope-scale.
    #[arg(long = "rope-freq-scale")]
    pub freq_scale: Option<f32>,
    /// YaRN: the model's original context (default: the model's).
    #[arg(long = "yarn-orig-ctx")]
    pub yarn_orig_ctx: Option<usize>,
    /// YaRN: extrapolation mix factor (default: 1 with YaRN, else 0).
    #[arg(long = "yarn-ext-factor")]
    pub yarn_ext_factor: Option<f32>,
    /// YaRN: magnitude scaling factor.
    #[arg(long = "yarn-attn-factor")]
    pub yarn_attn_factor: Option<f32>,
    /// YaRN: high correction dimension (default 1).
    #[arg(long = "yarn-beta-slow")]
    pub yarn_beta_slow: Option<f32>,
    /// YaRN: low correction dimension (default 32).
    #[arg(long = "yarn-beta-fast")]
    pub yarn_beta_fast: Option<f32>,
}

impl RopeArgs {
    /// The overrides, checked (factors positive).
    pub fn overrides(&self) -> Result<model::rope::RopeOverrides, CliError> {
        let positive = |name: &str, v: Option<f32>| match v {
            Some(x) if !(x.is_finite() && x > 0.0) => {
                Err(CliError::Usage(format!("{name} must be positive, got {x}")))
            }
            v => Ok(v),
        };
        let scale = positive("--rope-scale", self.scale)?;
        let freq_scale = positive("--rope-freq-scale", self.freq_scale)?;
        Ok(model::rope::RopeOverrides {
            kind: self
                .scaling
                .as_deref()
                .and_then(model::rope::RopeKind::parse),
            freq_scale: freq_scale.or(scale.map(|s| 1.0 / s)),
            freq_base: positive("--rope-freq-base", self.freq_base)?,
            n_ctx_orig: self.yarn_orig_ctx.filter(|&n| n > 0),
            ext_factor: self.yarn_ext_factor.filter(|&x| x >= 0.0),
            attn_factor: self.yarn_attn_factor.filter(|&x| x >= 0.0),
            beta_fast: self.yarn_beta_fast.filter(|&x| x >= 0.0),
            beta_slow: self.yarn_beta_slow.filter(|&x| x >= 0.0),
        })
    }
}

pub fn parse_kv_type(s: &str) -> Result<GgmlType, String> {
    match s.to_ascii_lowercase().as_str() {
        "f16" => Ok(GgmlType::F16),
        "bf16" => Ok(GgmlType::BF16),
        "q8_0" => Ok(GgmlType::Q8_0),
        "f32" => Ok(GgmlType::F32),
        "q4_0" => Ok(GgmlType::Q4_0),
        "q4_1" => Ok(GgmlType::Q4_1),
        "iq4_nl" => Ok(GgmlType::IQ4_NL),
        "q5_0" => Ok(GgmlType::Q5_0),
        "q5_1" => Ok(GgmlType::Q5_1),
        _ => Err(format!(
            "'{s}' is not a KV cache type (f32, f16, bf16, q8_0, q4_0, q4_1, iq4_nl, q5_0, q5_1)"
        )),
    }
}

impl ModelArgs {
    pub fn path(&self) -> Result<PathBuf, CliError> {
        pull::resolve(&self.model, self.cache.dir.as_deref())
    }

    /// The part `part` of the model at `path`, with the RoPE flags over its file's settings.
    pub fn load(
        &self,
        path: &std::path::Path,
        part: model::Part,
    ) -> Result<model::Model, CliError> {
        let mut m = model::Model::load_stage_with(path, part, self.load_mode)?;
        m.hparams.apply_rope(&self.rope.overrides()?);
        m.set_lazy(self.lazy_mode);
        let lora = self.lora_settings()?;
        if !lora.is_empty() && part != model::Part::Whole {
            return Err(CliError::Usage(
                "--lora: adapters apply to a model computed whole, not to a stage of it".into(),
            ));
        }
        for l in lora {
            m.add_adapter(&l.path, l.scale)?;
        }
        Ok(m)
    }

    /// The adapters `--lora`, `--lora-scaled` and `--lora-init-without-apply` give.
    pub fn lora_settings(&self) -> Result<Vec<server::lora::LoraSetting>, CliError> {
        server::lora::LoraSetting::from_flags(
            &self.lora,
            &self.lora_scaled,
            self.lora_init_without_apply,
        )
        .map_err(CliError::Usage)
    }

    pub fn context_config(&self) -> engine::ContextConfig {
        let d = engine::ContextConfig::default();
        engine::ContextConfig {
            n_ctx: self.ctx_size,
            n_ubatch: self.ubatch.min(self.ctx_size).max(1),
            n_threads: self.threads.unwrap_or(d.n_threads),
            kv_type: self.cache_type,
            precision: device::Precision::Int8,
            device: self.device.resolve(),
            n_seq: 1,
            swa_full: self.swa_full,
            ctx_checkpoints: self.ctx_checkpoints,
            state_rows: d.state_rows,
        }
    }
}

#[derive(Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// The prompt.
    #[arg(short = 'p', long = "prompt")]
    pub prompt: String,
    /// Tokens to generate.
    #[arg(short = 'n', long = "n-predict", default_value_t = 128)]
    pub n_predict: usize,
    /// Temperature; 0 is greedy.
    #[arg(long = "temp", default_value_t = 0.8)]
    pub temp: f32,
    #[arg(long = "top-k", default_value_t = 40)]
    pub top_k: usize,
    #[arg(long = "top-p", default_value_t = 0.95)]
    pub top_p: f32,
    #[arg(long = "min-p", default_value_t = 0.05)]
    pub min_p: f32,
    /// RNG seed (default: random).
    #[arg(short = 's', long = "seed")]
    pub seed: Option<u64>,
    /// Wrap the prompt as a user message in the model's chat template.
    #[arg(long)]
    pub chat: bool,
    /// Print one JSON object (text, tokens, timings) instead of streaming text.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args)]
pub struct InfoArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Parallel sequences the context is shared by.
    #[arg(long = "parallel", default_value_t = 1)]
    pub parallel: usize,
}

#[derive(Args)]
pub struct PerplexityArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Text file to score (not with --kl-divergence: the base file has the tokens).
    #[arg(short = 'f', long = "file", required_unless_present = "kl_divergence")]
    pub file: Option<PathBuf>,
    /// Chunks to score (default: all).
    #[arg(long = "chunks")]
    pub chunks: Option<usize>,
    /// llama-perplexity's log-probability file: written with the scores (the base of a
    /// later comparison), or read with --kl-divergence.
    #[arg(long = "kl-divergence-base")]
    pub kl_divergence_base: Option<PathBuf>,
    /// Compare this model's distributions with the base file's over its tokens: KL
    /// divergence, the same top token, both perplexities (llama-perplexity's
    /// --kl-divergence). The chunks are the base file's: its context size replaces -c.
    #[arg(long = "kl-divergence", requires = "kl_divergence_base")]
    pub kl_divergence: bool,
    /// Print one JSON object with `ppl`.
    #[arg(long)]
    pub json: bool,
}
