//! `tandem perplexity`, following llama-perplexity: the text is tokenized once (with BOS
//! when the model adds one), cut into chunks of `c` tokens whose first token is replaced
//! by BOS when the model adds BOS, and the negative log-likelihood is averaged over the
//! predictions of the second half of each chunk.

use std::time::Instant;

use engine::{Executor, Outputs};
use model::Model;
use serde::Serialize;
use text::Tokenizer;

use crate::cli::PerplexityArgs;
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
}

/// `-log softmax(logits)[target]`, in f64.
fn nll(logits: &[f32], target: u32) -> f64 {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    let sum: f64 = logits.iter().map(|&v| (v as f64 - max).exp()).sum();
    sum.ln() + max - logits[target as usize] as f64
}

pub fn execute(a: PerplexityArgs) -> Result<(), CliError> {
    let model = std::sync::Arc::new(Model::load(a.model.path()?)?);
    let tok = Tokenizer::from_gguf(&model.file.header.metadata)?;
    let text = std::fs::read_to_string(&a.file).map_err(|e| CliError::io(&a.file, e))?;
    let tokens = tok.encode(&text, true, false)?;
    let cfg = a.model.context_config();
    let n_ctx = cfg.n_ctx;
    if n_ctx < 4 {
        return Err(CliError::Usage("perplexity needs -c of at least 4".into()));
    }
    let available = tokens.len() / n_ctx;
    let n_chunks = a.chunks.map_or(available, |c| c.min(available));
    if n_chunks == 0 {
        return Err(CliError::Usage(format!(
            "{} has {} tokens, fewer than one chunk of {n_ctx}",
            a.file.display(),
            tokens.len()
        )));
    }
    let bos = if tok.add_bos() { tok.bos() } else { None };
    let first = n_ctx / 2;
    let mut ctx = Executor::new(model.clone(), cfg)?;
    let t0 = Instant::now();
    let (mut sum, mut sum_sq, mut count) = (0f64, 0f64, 0usize);
    for c in 0..n_chunks {
        let chunk = &tokens[c * n_ctx..(c + 1) * n_ctx];
        let mut input = chunk.to_vec();
        if let Some(b) = bos {
            input[0] = b;
        }
        let mut seq = kv::SeqKv::default();
        ctx.eval(&mut seq, &input, Outputs::From(first), &mut |i, logits| {
            if i + 1 < n_ctx {
                let v = nll(logits, chunk[i + 1]);
                sum += v;
                sum_sq += v * v;
                count += 1;
            }
        })?;
        ctx.release(&mut seq);
        if !a.json {
            eprint!("[{}]{:.4},", c + 1, (sum / count as f64).exp());
        }
    }
    let mean = sum / count as f64;
    let ppl = mean.exp();
    let var = (sum_sq / count as f64 - mean * mean).max(0.0);
    let ppl_stderr = ppl * (var / (count as f64 - 1.0).max(1.0)).sqrt();
    let seconds = t0.elapsed().as_secs_f64();
    if a.json {
        let out = PerplexityOutput {
            ppl,
            ppl_stderr,
            chunks: n_chunks,
            n_ctx,
            n_tokens: tokens.len(),
            seconds,
        };
        println!("{}", serde_json::to_string(&out).expect("serializable"));
    } else {
        eprintln!();
        println!("Final estimate: PPL = {ppl:.4} +/- {ppl_stderr:.5} ({n_chunks} chunks of {n_ctx}, {seconds:.1} s)");
    }
    Ok(())
}
