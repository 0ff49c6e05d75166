//! `tandem run`: one prompt, one answer.

use std::io::Write;
use std::time::Instant;

use engine::{Executor, Outputs, Sampler, SamplerConfig};
use serde::Serialize;
use text::{ChatMessage, ChatTemplate, Detokenizer, Tokenizer};

use crate::cli::RunArgs;
use crate::CliError;

/// llama.cpp's timing fields.
#[derive(Serialize)]
pub struct Timings {
    pub prompt_n: usize,
    pub prompt_ms: f64,
    pub prompt_per_second: f64,
    pub predicted_n: usize,
    pub predicted_ms: f64,
    pub predicted_per_second: f64,
}

#[derive(Serialize)]
struct RunOutput {
    text: String,
    tokens: Vec<u32>,
    timings: Timings,
}

fn per_second(n: usize, ms: f64) -> f64 {
    if ms > 0.0 {
        n as f64 * 1000.0 / ms
    } else {
        0.0
    }
}

pub fn execute(a: RunArgs) -> Result<(), CliError> {
    let model = std::sync::Arc::new(a.model.load(&a.model.path()?, model::Part::Whole)?);
    let md = &model.file.header.metadata;
    let tok = Tokenizer::from_gguf(md)?;
    let prompt = if a.chat {
        let msgs = [ChatMessage {
            role: "user".into(),
            content: a.prompt.clone(),
        }];
        ChatTemplate::from_gguf(md)?.render(&msgs, true)?
    } else {
        a.prompt.clone()
    };
    let prompt_tokens = tok.encode(&prompt, true, true)?;
    if prompt_tokens.is_empty() {
        return Err(CliError::Usage(
            "the prompt is empty after tokenization".into(),
        ));
    }
    let seed = a.seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64)
    });
    let mut sampler = Sampler::new(SamplerConfig {
        temperature: a.temp,
        top_k: a.top_k,
        top_p: a.top_p,
        min_p: a.min_p,
        seed,
        ..SamplerConfig::default()
    });
    let mut ctx = Executor::new(model.clone(), a.model.context_config())?;
    let mut seq = kv::SeqKv::default();
    let mut detok = Detokenizer::new();
    let (mut text, mut tokens) = (String::new(), Vec::new());
    let mut stdout = std::io::stdout().lock();

    let t0 = Instant::now();
    let mut next = 0u32;
    ctx.eval(&mut seq, &prompt_tokens, Outputs::Last, &mut |_, logits| {
        next = sampler.sample(logits, &tokens)
    })?;
    let prompt_ms = t0.elapsed().as_secs_f64() * 1000.0;
    let t1 = Instant::now();
    while tokens.len() < a.n_predict && !tok.is_eog(next) {
        tokens.push(next);
        let piece = detok.push(&tok, next);
        if !a.json {
            let _ = stdout.write_all(piece.as_bytes());
            let _ = stdout.flush();
        }
        text.push_str(&piece);
        if tokens.len() == a.n_predict {
            break;
        }
        ctx.eval(&mut seq, &[next], Outputs::Last, &mut |_, logits| {
            next = sampler.sample(logits, &tokens)
        })?;
    }
    let rest = detok.finish();
    text.push_str(&rest);
    let predicted_ms = t1.elapsed().as_secs_f64() * 1000.0;
    let timings = Timings {
        prompt_n: prompt_tokens.len(),
        prompt_ms,
        prompt_per_second: per_second(prompt_tokens.len(), prompt_ms),
        predicted_n: tokens.len(),
        predicted_ms,
        predicted_per_second: per_second(tokens.len(), predicted_ms),
    };
    if a.json {
        let out = RunOutput {
            text,
            tokens,
            timings,
        };
        println!("{}", serde_json::to_string(&out).expect("serializable"));
    } else {
        let _ = writeln!(stdout, "{rest}");
        eprintln!(
            "prompt: {} tokens, {:.1} tok/s; generated: {} tokens, {:.1} tok/s",
            timings.prompt_n,
            timings.prompt_per_second,
            timings.predicted_n,
            timings.predicted_per_second
        );
    }
    Ok(())
}
