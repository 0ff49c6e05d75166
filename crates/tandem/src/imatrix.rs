//! `tandem imatrix MODEL -f TEXT`: an importance matrix as llama.cpp's `llama-imatrix`
//! computes it, written in its GGUF format for `tandem quantize --imatrix` (or
//! `llama-quantize`). The text is tokenized once (with BOS where the model adds one; a
//! final newline dropped, as llama.cpp's `-f` does), cut into chunks of `-c` tokens whose
//! first token becomes BOS where the model adds one, and every token of every chunk is
//! evaluated on the CPU through a [`Collector`], which sums `x²` of each weight matrix's
//! input columns (`model::quant::collect`). As `llama-imatrix` does, it also prints the
//! perplexity of the second half of each chunk.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use clap::Args;
use device::Precision;
use engine::{ContextConfig, DeviceKind, Executor, Outputs, Threads};
use model::quant::{Collect, Collector, ImatrixSums};
use model::Model;
use text::Tokenizer;

use crate::cli::CacheArgs;
use crate::pull;
use crate::CliError;

#[derive(Args)]
pub struct ImatrixArgs {
    /// The GGUF model (a path or a known model name, pulled if missing); or -m.
    #[arg(value_name = "MODEL", required_unless_present = "model_flag")]
    pub model: Option<String>,
    /// The model, as llama-imatrix takes it.
    #[arg(short = 'm', long = "model", conflicts_with = "model")]
    pub model_flag: Option<String>,
    /// The calibration text.
    #[arg(short = 'f', long = "file", visible_alias = "text")]
    pub file: PathBuf,
    /// Where to write the importance matrix (GGUF).
    #[arg(short = 'o', long = "output", default_value = "imatrix.gguf")]
    pub output: PathBuf,
    /// Tokens per chunk.
    #[arg(short = 'c', long = "ctx-size", default_value_t = 512)]
    pub ctx_size: usize,
    /// Chunks to evaluate (default: all the text holds).
    #[arg(long = "chunks")]
    pub chunks: Option<usize>,
    /// Threads (default: all cores).
    #[arg(short = 't', long = "threads")]
    pub threads: Option<usize>,
    /// Rows per forward pass.
    #[arg(long = "ubatch-size", default_value_t = 512)]
    pub ubatch: usize,
    /// Also collect for output.weight (a tied output head, token_embd.weight, never is).
    #[arg(long = "process-output")]
    pub process_output: bool,
    /// Skip the perplexity (and the output head, unless --process-output).
    #[arg(long = "no-ppl")]
    pub no_ppl: bool,
    #[command(flatten)]
    pub cache: CacheArgs,
}

/// `-log softmax(logits)[target]`, in f64.
fn nll(logits: &[f32], target: u32) -> f64 {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    let sum: f64 = logits.iter().map(|&v| (v as f64 - max).exp()).sum();
    sum.ln() + max - logits[target as usize] as f64
}

pub fn execute(a: ImatrixArgs) -> Result<(), CliError> {
    let n_ctx = a.ctx_size;
    if n_ctx < 2 {
        return Err(CliError::Usage("imatrix needs -c of at least 2".into()));
    }
    if a.chunks == Some(0) {
        return Err(CliError::Usage(
            "imatrix needs --chunks of at least 1".into(),
        ));
    }
    let name = a
        .model
        .as_deref()
        .or(a.model_flag.as_deref())
        .ok_or_else(|| {
            CliError::Usage("imatrix needs a model: tandem imatrix MODEL -f TEXT".into())
        })?;
    let path = pull::resolve(name, a.cache.dir.as_deref())?;
    if matches!((path.canonicalize(), a.output.canonicalize()), (Ok(x), Ok(y)) if x == y) {
        return Err(CliError::Usage(format!(
            "imatrix: the output {} is the model",
            a.output.display()
        )));
    }
    let mut text = std::fs::read_to_string(&a.file).map_err(|e| CliError::io(&a.file, e))?;
    if text.ends_with('\n') {
        text.pop();
    }
    let model = Arc::new(Model::load(&path)?);
    let tok = Tokenizer::from_gguf(&model.file.header.metadata)?;
    let tokens = tok.encode(&text, true, false)?;
    let available = tokens.len() / n_ctx;
    let n_chunks = a.chunks.map_or(available, |c| c.min(available));
    if n_chunks == 0 {
        return Err(CliError::Usage(format!(
            "{} has {} tokens, fewer than one chunk of {n_ctx} (-c)",
            a.file.display(),
            tokens.len()
        )));
    }
    let d = ContextConfig::default();
    let cfg = ContextConfig {
        n_ctx,
        n_ubatch: a.ubatch.clamp(1, n_ctx),
        n_threads: a.threads.unwrap_or(d.n_threads).max(1),
        device: DeviceKind::Cpu,
        ..d
    };
    let cpu = DeviceKind::Cpu.open(Threads::new(cfg.n_threads), Precision::Int8)?;
    let collect = match a.process_output {
        true => Collect::BlocksAndOutput,
        false => Collect::Blocks,
    };
    let collector = Collector::new(cpu, collect);
    let sums = collector.sums();
    let mut ctx = Executor::on(model, cfg, Box::new(collector), &|_, _| {})?;
    let bos = if tok.add_bos() { tok.bos() } else { None };
    let outputs = match (a.process_output, a.no_ppl) {
        (true, _) => Outputs::All,
        (false, false) => Outputs::From(n_ctx / 2),
        (false, true) => Outputs::Last,
    };
    eprintln!(
        "imatrix: {} chunks of {n_ctx} tokens from {} ({} tokens)",
        n_chunks,
        a.file.display(),
        tokens.len()
    );
    let t0 = Instant::now();
    let (mut sum, mut count) = (0f64, 0usize);
    for c in 0..n_chunks {
        let chunk = &tokens[c * n_ctx..(c + 1) * n_ctx];
        let mut input = chunk.to_vec();
        if let Some(b) = bos {
            input[0] = b;
        }
        let mut seq = kv::SeqKv::default();
        ctx.eval(&mut seq, &input, outputs, &mut |i, logits| {
            if !a.no_ppl && i >= n_ctx / 2 && i + 1 < n_ctx {
                sum += nll(logits, chunk[i + 1]);
                count += 1;
            }
        })?;
        ctx.release(&mut seq);
        if count > 0 {
            eprint!("[{}]{:.4},", c + 1, (sum / count as f64).exp());
        }
    }
    if count > 0 {
        eprintln!();
        println!("Final estimate: PPL = {:.4}", (sum / count as f64).exp());
    }
    let entries = std::mem::take(&mut *sums.lock().expect("the forward did not panic"));
    if let Some((name, _)) = entries
        .iter()
        .find(|(_, s)| s.in_sum2.iter().any(|v| !v.is_finite()))
    {
        return Err(CliError::Usage(format!(
            "imatrix: the sums of '{name}' are not finite"
        )));
    }
    let m = ImatrixSums {
        entries,
        datasets: vec![a.file.display().to_string()],
        chunk_count: n_chunks as u32,
        chunk_size: n_ctx as u32,
    };
    std::fs::write(&a.output, m.to_gguf()).map_err(|e| CliError::io(&a.output, e))?;
    eprintln!(
        "imatrix: {} entries over {n_chunks} chunks of {n_ctx} written to {} ({:.1} s)",
        m.entries.len(),
        a.output.display(),
        t0.elapsed().as_secs_f64()
    );
    Ok(())
}
