//! `tandem bench prefill`: one user's prompt read at several lengths, in forwards of
//! `n_ubatch` rows, then [`DECODE`] tokens decoded one a forward after it, each against the
//! shortest length, and llama-bench's `-p` and `-n` at depth `-d` at the same lengths in the
//! same run: how much attention over a long context costs prompts and decoding.

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use engine::{ContextConfig, Executor, Outputs};
use kv::SeqKv;
use model::Model;
use serde::Serialize;

use crate::model_bench::tokens;
use crate::peer;
use crate::report::{ratio, Table};
use crate::Result;

/// Tokens decoded after each prompt.
pub const DECODE: usize = 32;

/// One prompt length's speeds.
#[derive(Debug, Clone, Serialize)]
pub struct PrefillPoint {
    pub tokens: usize,
    /// Prompt tokens per second, best of the repetitions.
    pub tok_s: f64,
    pub peer_tok_s: Option<f64>,
    /// Tokens per second decoding [`DECODE`] tokens after the prompt, best of the
    /// repetitions.
    pub decode_tok_s: f64,
    pub peer_decode_tok_s: Option<f64>,
}

/// Prompt speeds at `lengths` (the context is sized for the longest), best of `reps`.
pub fn run(
    model: Arc<Model>,
    context: ContextConfig,
    lengths: &[usize],
    reps: usize,
) -> Result<Vec<PrefillPoint>> {
    let nv = model.hparams.n_vocab;
    let longest = lengths.iter().copied().max().unwrap_or(1);
    let mut ctx = Executor::new(
        model,
        ContextConfig {
            n_ctx: longest + DECODE + 1,
            ..context
        },
    )?;
    let mut ignore = |_: usize, _: &[f32]| {};
    let mut s = SeqKv::default();
    ctx.eval(&mut s, &tokens(8, nv, 99), Outputs::Last, &mut ignore)?;
    ctx.release(&mut s);
    let mut out = Vec::new();
    for &n in lengths {
        let (mut best, mut best_decode): (f64, f64) = (0.0, 0.0);
        for r in 0..reps.max(1) {
            let prompt = tokens(n, nv, r as u64 + 1);
            let t = Instant::now();
            ctx.eval(&mut s, &prompt, Outputs::Last, &mut ignore)?;
            best = best.max(n as f64 / t.elapsed().as_secs_f64());
            let t = Instant::now();
            for &tok in &tokens(DECODE, nv, r as u64 + 7) {
                ctx.eval(&mut s, &[tok], Outputs::Last, &mut ignore)?;
            }
            best_decode = best_decode.max(DECODE as f64 / t.elapsed().as_secs_f64());
            ctx.release(&mut s);
        }
        out.push(PrefillPoint {
            tokens: n,
            tok_s: best,
            peer_tok_s: None,
            decode_tok_s: best_decode,
            peer_decode_tok_s: None,
        });
    }
    Ok(out)
}

/// llama-bench's `-p` speed at each point's length, `-ub n_ubatch`, and its `-n DECODE`
/// speed at that depth (`-d`), best of `reps`.
pub fn with_peer(
    points: &mut [PrefillPoint],
    tool: &Path,
    model: &Path,
    threads: usize,
    n_ubatch: usize,
    reps: usize,
) -> Result<()> {
    for p in points {
        let extra = [
            "-ub".to_string(),
            n_ubatch.to_string(),
            "-b".into(),
            p.tokens.max(n_ubatch).to_string(),
        ];
        let b = peer::llama_bench(tool, model, threads, p.tokens, 0, reps, &extra)?;
        p.peer_tok_s = Some(b.pp_tok_s);
        let depth = [extra.to_vec(), vec!["-d".into(), p.tokens.to_string()]].concat();
        let b = peer::llama_bench(tool, model, threads, 0, DECODE, reps, &depth)?;
        p.peer_decode_tok_s = Some(b.tg_tok_s);
    }
    Ok(())
}

/// The tables, prompts then decoding: speed per length, each against the first length,
/// and tandem against the peer.
pub fn markdown(points: &[PrefillPoint]) -> String {
    let prompt = table(points, "prompt tokens", |p| (p.tok_s, p.peer_tok_s));
    let decode = table(points, "decode at depth", |p| {
        (p.decode_tok_s, p.peer_decode_tok_s)
    });
    format!("{prompt}\n{decode}")
}

fn table(
    points: &[PrefillPoint],
    what: &str,
    speeds: fn(&PrefillPoint) -> (f64, Option<f64>),
) -> String {
    let mut t = Table::new(&[
        what,
        "tandem tok/s",
        "vs first",
        "llama.cpp tok/s",
        "vs first",
        "tandem / llama.cpp",
    ]);
    let first = points.first().map(speeds);
    for p in points {
        let vs = |v: Option<f64>, f: Option<f64>| match (v, f) {
            (Some(v), Some(f)) => ratio(v, f),
            _ => "-".into(),
        };
        let (mine, peer) = speeds(p);
        t.row(&[
            p.tokens.to_string(),
            format!("{mine:.1}"),
            vs(Some(mine), first.map(|f| f.0)),
            peer.map_or("-".into(), |v| format!("{v:.1}")),
            vs(peer, first.and_then(|f| f.1)),
            vs(Some(mine), peer),
        ]);
    }
    t.markdown()
}
