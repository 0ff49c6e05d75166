//! `tandem bench`: benchmarks that print ratios against a peer measured in the same run.

use std::path::PathBuf;

use bench::model_bench::{self, ModelBenchConfig, ModelBenchReport};
use bench::peer::{self, BatchedPeerPoint, LlamaBench};
use clap::{Args, Subcommand};
use model::Model;
use serde::Serialize;

use crate::cli::ModelArgs;
use crate::CliError;

#[derive(Args)]
pub struct BenchArgs {
    #[command(subcommand)]
    pub command: BenchCommand,
}

#[derive(Subcommand)]
pub enum BenchCommand {
    /// Prompt and generation speed, batched decode and verify cost of one model.
    Model(ModelBenchArgs),
}

#[derive(Args)]
pub struct ModelBenchArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Prompt tokens for the prompt-processing test (0 skips it).
    #[arg(long, default_value_t = 512)]
    pub pp: usize,
    /// Tokens generated one at a time (0 skips it).
    #[arg(long, default_value_t = 128)]
    pub tg: usize,
    /// Sequences decoding together (ratios are to the first).
    #[arg(long, value_delimiter = ',', default_value = "1,2,4,8")]
    pub batch: Vec<usize>,
    /// New tokens of one sequence in one forward (ratios are to the first).
    #[arg(long, value_delimiter = ',', default_value = "1,2,3,4,5,8,16")]
    pub verify: Vec<usize>,
    #[arg(long, default_value_t = 3)]
    pub reps: usize,
    /// Print one JSON object.
    #[arg(long)]
    pub json: bool,
    /// llama.cpp's llama-bench binary, run on the same model for pp and tg ratios.
    #[arg(long)]
    pub peer_llama_bench: Option<PathBuf>,
    /// llama.cpp's llama-batched-bench binary, run for the batched-decode ratios.
    #[arg(long)]
    pub peer_batched_bench: Option<PathBuf>,
}

#[derive(Serialize)]
struct Output {
    #[serde(flatten)]
    tandem: ModelBenchReport,
    #[serde(skip_serializing_if = "Option::is_none")]
    peer_llama_bench: Option<LlamaBench>,
    #[serde(skip_serializing_if = "Option::is_none")]
    peer_batched: Option<Vec<BatchedPeerPoint>>,
}

pub fn execute(a: BenchArgs) -> Result<(), CliError> {
    match a.command {
        BenchCommand::Model(m) => model(m),
    }
}

fn ratio(a: f64, b: f64) -> String {
    if b > 0.0 {
        format!("{:.2}×", a / b)
    } else {
        "-".into()
    }
}

fn model(a: ModelBenchArgs) -> Result<(), CliError> {
    let path = a.model.path()?;
    let model = Model::load(&path)?;
    let mut cfg = ModelBenchConfig {
        pp: a.pp,
        tg: a.tg,
        batch: a.batch.clone(),
        verify: a.verify.clone(),
        reps: a.reps,
        context: a.model.context_config(),
    };
    cfg.context = model_bench::context_for(&cfg, cfg.context);
    let threads = cfg.context.n_threads;
    let report = model_bench::run(&model, &a.model.model, &cfg)
        .map_err(|e| CliError::Usage(e.to_string()))?;
    let peer_err = |e: bench::Error| CliError::Usage(e.to_string());
    let llama = match &a.peer_llama_bench {
        Some(tool) => {
            Some(peer::llama_bench(tool, &path, threads, a.pp, a.tg, a.reps).map_err(peer_err)?)
        }
        None => None,
    };
    let batched_peer = match &a.peer_batched_bench {
        Some(tool) => Some(
            peer::batched_bench(
                tool,
                &path,
                threads,
                &a.batch,
                model_bench::PRIOR,
                model_bench::BATCH_STEPS,
            )
            .map_err(peer_err)?,
        ),
        None => None,
    };
    let out = Output {
        tandem: report,
        peer_llama_bench: llama,
        peer_batched: batched_peer,
    };
    if a.json {
        println!("{}", serde_json::to_string(&out).expect("serializable"));
        return Ok(());
    }
    print_tables(&out);
    Ok(())
}

fn print_tables(out: &Output) {
    let r = &out.tandem;
    println!(
        "model {} on {} ({} threads), commit {}\n",
        r.model, r.machine.cpu, r.machine.threads, r.machine.commit
    );
    println!("| test | tandem t/s | llama.cpp t/s | ratio |\n|---|---|---|---|");
    let (lpp, ltg) = out
        .peer_llama_bench
        .as_ref()
        .map_or((0.0, 0.0), |l| (l.pp_tok_s, l.tg_tok_s));
    println!(
        "| pp{} | {:.1} | {:.1} | {} |",
        r.pp,
        r.pp_tok_s,
        lpp,
        ratio(r.pp_tok_s, lpp)
    );
    println!(
        "| tg{} | {:.1} | {:.1} | {} |",
        r.tg,
        r.tg_tok_s,
        ltg,
        ratio(r.tg_tok_s, ltg)
    );
    println!(
        "\nbatched decode (aggregate tok/s; ratio to batch {}):",
        r.batched.first().map_or(1, |p| p.batch)
    );
    println!("| batch | tandem t/s | ratio | llama.cpp t/s | ratio | tandem / llama.cpp |\n|---|---|---|---|---|---|");
    for p in &r.batched {
        let peer = out
            .peer_batched
            .iter()
            .flatten()
            .find(|q| q.batch == p.batch);
        let (pt, pr) = peer.map_or((0.0, 0.0), |q| (q.tok_s, q.ratio));
        println!(
            "| {} | {:.1} | {:.2}× | {:.1} | {:.2}× | {} |",
            p.batch,
            p.tok_s,
            p.ratio,
            pt,
            pr,
            ratio(p.tok_s, pt)
        );
    }
    println!(
        "\nverify cost (one sequence, k new tokens in one forward, after {} tokens):",
        model_bench::PRIOR
    );
    println!(
        "| k | ms | ratio to k={} |\n|---|---|---|",
        r.verify.first().map_or(1, |p| p.k)
    );
    for p in &r.verify {
        println!("| {} | {:.2} | {:.2}× |", p.k, p.ms, p.ratio);
    }
}
