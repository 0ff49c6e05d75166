//! `tandem perplexity`, following llama-perplexity: the text is tokenized once (with BOS
//! when the model adds one), cut into chunks of `c` tokens whose first token is replaced
//! by BOS when the model adds BOS, and the negative log-likelihood is averaged over the
//! predictions of the second half of each chunk. With `--kl-divergence-base` it writes
//! (or, with `--kl-divergence`, compares with) llama-perplexity's log-probability file
//! ([`crate::kld`]).

use std::time::Instant;

use engine::{Executor, Outputs};
use serde::Serialize;
use text::Tokenizer;

use crate::cli::PerplexityArgs;
use crate::kld::{BaseReader, BaseWriter, Kld, KldSummary};
use crate::CliError;

#[derive(Serialize)]
struct PerplexityOutput {
    ppl: f64,
    /// Standard error of the perplexity estimate (as llama-perplexity reports it).
    ppl_stderr: f64,
    chunks: usize,
    n_ctx: usize,
    n_tokens: usize,
    seconds: f64,
    /// With --kl-divergence: the comparison with the base file.
    #[serde(skip_serializing_if = "Option::is_none")]
    kl_divergence: Option<KldSummary>,
}

/// `-log softmax(logits)[target]`, in f64.
fn nll(logits: &[f32], target: u32) -> f64 {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    let sum: f64 = logits.iter().map(|&v| (v as f64 - max).exp()).sum();
    sum.ln() + max - logits[target as usize] as f64
}

pub fn execute(a: PerplexityArgs) -> Result<(), CliError> {
    let model = std::sync::Arc::new(a.model.load(&a.model.path()?, model::Part::Whole)?);
    let tok = Tokenizer::from_gguf(&model.file.header.metadata)?;
    let mut cfg = a.model.context_config();
    let mut base = match (&a.kl_divergence_base, a.kl_divergence) {
        (Some(path), true) => Some(BaseReader::open(path)?),
        _ => None,
    };
    let (tokens, source) = match (&base, &a.file) {
        (Some(b), _) => {
            if b.n_vocab != model.hparams.n_vocab {
                return Err(CliError::Usage(format!(
                    "the base file's vocabulary has {} tokens, the model's {}",
                    b.n_vocab, model.hparams.n_vocab
                )));
            }
            cfg.n_ctx = b.n_ctx;
            (b.tokens.clone(), "the base file".to_string())
        }
        (None, Some(file)) => {
            let text = std::fs::read_to_string(file).map_err(|e| CliError::io(file, e))?;
            (tok.encode(&text, true, false)?, file.display().to_string())
        }
        (None, None) => unreachable!("clap requires -f without --kl-divergence"),
    };
    let n_ctx = cfg.n_ctx;
    if n_ctx < 4 {
        return Err(CliError::Usage("perplexity needs -c of at least 4".into()));
    }
    let available = tokens.len() / n_ctx;
    let n_chunks = a.chunks.map_or(available, |c| c.min(available));
    if n_chunks == 0 {
        return Err(CliError::Usage(format!(
            "{source} has {} tokens, fewer than one chunk of {n_ctx}",
            tokens.len()
        )));
    }
    let mut writer = match (&a.kl_divergence_base, &base) {
        (Some(path), None) => Some(BaseWriter::create(
            path,
            n_ctx,
            model.hparams.n_vocab,
            n_chunks,
            &tokens,
        )?),
        _ => None,
    };
    let mut kld = Kld::default();
    let bos = if tok.add_bos() { tok.bos() } else { None };
    let first = n_ctx / 2;
    let mut ctx = Executor::new(model.clone(), cfg)?;
    let t0 = Instant::now();
    let (mut sum, mut sum_sq, mut count) = (0f64, 0f64, 0usize);
    let mut failed = Ok(());
    for c in 0..n_chunks {
        let chunk = &tokens[c * n_ctx..(c + 1) * n_ctx];
        let records = base.as_mut().map(|b| b.chunk()).transpose()?;
        let mut input = chunk.to_vec();
        if let Some(b) = bos {
            input[0] = b;
        }
        let mut seq = kv::SeqKv::default();
        ctx.eval(&mut seq, &input, Outputs::From(first), &mut |i, logits| {
            if i + 1 >= n_ctx {
                return;
            }
            let v = nll(logits, chunk[i + 1]);
            sum += v;
            sum_sq += v * v;
            count += 1;
            if let (Some(b), Some(r)) = (&base, &records) {
                kld.add(logits, &r[b.record(r, i - first)], chunk[i + 1]);
            }
            if let Some(w) = &mut writer {
                if failed.is_ok() {
                    failed = w.position(logits);
                }
            }
        })?;
        std::mem::replace(&mut failed, Ok(()))?;
        ctx.release(&mut seq);
        if !a.json {
            eprint!("[{}]{:.4},", c + 1, (sum / count as f64).exp());
        }
    }
    if let Some(w) = writer {
        w.finish()?;
    }
    let mean = sum / count as f64;
    let ppl = mean.exp();
    let var = (sum_sq / count as f64 - mean * mean).max(0.0);
    let ppl_stderr = ppl * (var / (count as f64 - 1.0).max(1.0)).sqrt();
    let seconds = t0.elapsed().as_secs_f64();
    let kld = base.is_some().then(|| kld.summary());
    if a.json {
        let out = PerplexityOutput {
            ppl,
            ppl_stderr,
            chunks: n_chunks,
            n_ctx,
            n_tokens: tokens.len(),
            seconds,
            kl_divergence: kld,
        };
        println!("{}", serde_json::to_string(&out).expect("serializable"));
        return Ok(());
    }
    eprintln!();
    println!("Final estimate: PPL = {ppl:.4} +/- {ppl_stderr:.5} ({n_chunks} chunks of {n_ctx}, {seconds:.1} s)");
    if let Some(k) = kld {
        println!(
            "KL divergence from the base over {} positions: mean {:.6} ± {:.6}, 99% {:.6}, max {:.6}; same top token {:.3}%; PPL(base) {:.4}",
            k.positions,
            k.kld_mean,
            k.kld_stderr,
            k.kld_99,
            k.kld_max,
            100.0 * k.same_top,
            k.ppl_base
        );
    }
    Ok(())
}
