//! `tandem bench prefill`: one user's prompt read at several lengths, in forwards of
//! `n_ubatch` rows, against the shortest length, and llama-bench's `-p` at the same
//! lengths in the same run: how much attention over a long context costs.

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

/// One prompt length's speeds.
#[derive(Debug, Clone, Serialize)]
pub struct PrefillPoint {
    pub tokens: usize,
    /// Prompt tokens per second, best of the repetitions.
    pub tok_s: f64,
    pub peer_tok_s: Option<f64>,
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
            n_ctx: longest + 1,
            ..context
        },
    )?;
    let mut ignore = |_: usize, _: &[f32]| {};
    let mut s = SeqKv::default();
    ctx.eval(&mut s, &tokens(8, nv, 99), Outputs::Last, &mut ignore)?;
    ctx.release(&mut s);
    let mut out = Vec::new();
    for &n in lengths {
        let mut best: f64 = 0.0;
        for r in 0..reps.max(1) {
            let prompt = tokens(n, nv, r as u64 + 1);
            let t = Instant::now();
            ctx.eval(&mut s, &prompt, Outputs::Last, &mut ignore)?;
            best = best.max(n as f64 / t.elapsed().as_secs_f64());
            ctx.release(&mut s);
        }
        out.push(PrefillPoint {
            tokens: n,
            tok_s: best,
            peer_tok_s: None,
        });
    }
    Ok(out)
}

/// llama-bench's `-p` speed at each point's length, `-ub n_ubatch`, best of `reps`.
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
    }
    Ok(())
}

/// The table: speed per length, each against the first length, and tandem against the
/// peer.
pub fn markdown(points: &[PrefillPoint]) -> String {
    let mut t = Table::new(&[
        "prompt tokens",
        "tandem tok/s",
        "vs first",
        "llama.cpp tok/s",
        "vs first",
        "tandem / llama.cpp",
    ]);
    let first = points.first().cloned();
    for p in points {
        let vs = |v: Option<f64>, f: Option<f64>| match (v, f) {
            (Some(v), Some(f)) => ratio(v, f),
            _ => "-".into(),
        };
        t.row(&[
            p.tokens.to_string(),
            format!("{:.1}", p.tok_s),
            vs(Some(p.tok_s), first.as_ref().map(|f| f.tok_s)),
            p.peer_tok_s.map_or("-".into(), |v| format!("{v:.1}")),
            vs(p.peer_tok_s, first.as_ref().and_then(|f| f.peer_tok_s)),
            vs(Some(p.tok_s), p.peer_tok_s),
        ]);
    }
    t.markdown()
}
