//! `tandem synth`: a random-weight model of a given shape, for tests and benchmarks of
//! shapes no downloadable model has. The defaults make the ~0.5B mixture of the MoE
//! verify-cost benchmark: qwen3moe, 8 of 64 experts, Q4_K.

use std::path::PathBuf;

use clap::Args;
use gguf::{GgmlType, GgufFile};
use model::layers::gated_delta_net::DeltaShape;
use model::synthetic::{ExpertShape, Synthetic};
use model::Arch;

use crate::cli::CacheArgs;
use crate::pull::{self, DEFAULT_MODEL};
use crate::CliError;

#[derive(Args)]
pub struct SynthArgs {
    /// Where to write the GGUF file.
    #[arg(short = 'o', long = "out")]
    pub out: PathBuf,
    /// llama, qwen2, qwen3 (dense), qwen2moe, qwen3moe, qwen35 (hybrid; with --experts 0),
    /// qwen35moe, or llama with --experts (Mixtral).
    #[arg(long, default_value = "qwen3moe")]
    pub arch: String,
    #[arg(long, default_value_t = 1024)]
    pub n_embd: usize,
    #[arg(long, default_value_t = 8)]
    pub n_layer: usize,
    #[arg(long, default_value_t = 16)]
    pub n_head: usize,
    #[arg(long, default_value_t = 4)]
    pub n_head_kv: usize,
    /// Dense feed-forward width (qwen2moe: the shared expert's).
    #[arg(long, default_value_t = 2816)]
    pub n_ff: usize,
    /// Experts per block (0: a dense model).
    #[arg(long, default_value_t = 64)]
    pub experts: usize,
    /// Experts chosen per token.
    #[arg(long, default_value_t = 8)]
    pub experts_used: usize,
    /// Hidden width of one expert.
    #[arg(long, default_value_t = 256)]
    pub n_ff_exp: usize,
    /// qwen35, qwen35moe: taps of the Gated DeltaNet blocks' convolution [default: 4].
    #[arg(long)]
    pub ssm_conv_kernel: Option<usize>,
    /// qwen35, qwen35moe: width of a delta-rule head (`ssm.state_size`) [default: 128].
    #[arg(long)]
    pub ssm_state_size: Option<usize>,
    /// qwen35, qwen35moe: query and key heads of the delta rule (`ssm.group_count`)
    /// [default: 16].
    #[arg(long)]
    pub ssm_group_count: Option<usize>,
    /// qwen35, qwen35moe: value heads of the delta rule (`ssm.time_step_rank`) [default: 16].
    #[arg(long)]
    pub ssm_time_step_rank: Option<usize>,
    /// Type of the matrices: any type `tandem quantize` writes (the IQ types quantized as
    /// if every importance were 1).
    #[arg(long = "type", default_value = "q4_k", value_parser = parse_type)]
    pub ty: GgmlType,
    /// The model whose tokenizer and chat template are copied (a path or a known name).
    #[arg(long, default_value = DEFAULT_MODEL)]
    pub tokenizer: String,
    /// Instead of a tokenizer, a placeholder vocabulary of this many tokens: for
    /// benchmarks of a real model's shape where no model is at hand to copy one from.
    #[arg(long = "placeholder-vocab", conflicts_with = "tokenizer")]
    pub placeholder_vocab: Option<usize>,
    /// Keep only the tokenizer's first N tokens and the merges among them (a real
    /// byte-level tokenizer, small: for golden logits over every token).
    #[arg(long = "vocab", conflicts_with = "placeholder_vocab")]
    pub vocab: Option<usize>,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    #[command(flatten)]
    pub cache: CacheArgs,
}

fn parse_type(s: &str) -> Result<GgmlType, String> {
    let writable = model::quant::writable_types();
    writable
        .iter()
        .copied()
        .find(|t| t.to_string().eq_ignore_ascii_case(s))
        .ok_or_else(|| {
            let names: Vec<String> = writable.iter().map(|t| t.to_string()).collect();
            format!("'{s}' is not a type tandem writes ({})", names.join(", "))
        })
}

/// The Gated DeltaNet shape of a hybrid; the `--ssm-*` flags refused for other
/// architectures, which have no such blocks.
fn delta_shape(a: &SynthArgs) -> Result<Option<DeltaShape>, CliError> {
    let flags = [
        a.ssm_conv_kernel,
        a.ssm_state_size,
        a.ssm_group_count,
        a.ssm_time_step_rank,
    ];
    if !a.arch.starts_with("qwen35") {
        if flags.iter().any(Option::is_some) {
            return Err(CliError::Usage(format!(
                "--ssm-* shape a hybrid's Gated DeltaNet blocks; {} has none",
                a.arch
            )));
        }
        return Ok(None);
    }
    Ok(Some(DeltaShape {
        conv_kernel: a.ssm_conv_kernel.unwrap_or(4),
        head_dim: a.ssm_state_size.unwrap_or(128),
        n_k_heads: a.ssm_group_count.unwrap_or(16),
        n_v_heads: a.ssm_time_step_rank.unwrap_or(16),
    }))
}

pub fn execute(a: SynthArgs) -> Result<(), CliError> {
    let spec = Synthetic {
        arch: Arch::from_name(&a.arch)?,
        n_embd: a.n_embd,
        n_layer: a.n_layer,
        n_head: a.n_head,
        n_head_kv: a.n_head_kv,
        n_ff: a.n_ff,
        experts: (a.experts > 0).then_some(ExpertShape {
            n_expert: a.experts,
            n_expert_used: a.experts_used,
            n_ff_exp: a.n_ff_exp,
        }),
        delta: delta_shape(&a)?,
        ty: a.ty,
        seed: a.seed,
    };
    let n_vocab = match a.placeholder_vocab {
        Some(n) => {
            spec.write_placeholder_vocab(n, &a.out)?;
            n
        }
        None => {
            let tokenizer = GgufFile::open(pull::resolve(&a.tokenizer, a.cache.dir.as_deref())?)?;
            match a.vocab {
                Some(n) => {
                    spec.write_cut_vocab(&tokenizer, n, &a.out)?;
                    n
                }
                None => {
                    spec.write(&tokenizer, &a.out)?;
                    tokenizer
                        .header
                        .metadata
                        .array("tokenizer.ggml.tokens")?
                        .len()
                }
            }
        }
    };
    eprintln!(
        "tandem synth: {} ({:.3}B parameters) written to {}",
        a.arch,
        spec.n_params(n_vocab) as f64 / 1e9,
        a.out.display()
    );
    Ok(())
}
