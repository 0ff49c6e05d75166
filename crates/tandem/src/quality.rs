//! `tandem bench quality`: code-continuation NLL and needle recall of one model, per KV
//! type, tandem in one process (and split, with `--split-at`) beside llama.cpp's tools.

use std::path::PathBuf;

use bench::quality::needle::{needle_cases, NeedleConfig};
use bench::quality::{self, NllPoint, NllRun, ServerArm, PEER};
use clap::Args;

use crate::cli::parse_kv_type;
use crate::pull::{self, DEFAULT_MODEL};
use crate::CliError;

/// The project's held-out code (CPython 3.11's argparse.py), scored unless --nll-file.
const HELD_OUT_CODE: &str = include_str!("../../../tests/data/eval-code.txt");
/// The GNU GPL v3, the needles' filler unless --haystack.
const PROSE: &str = include_str!("../../../tests/data/eval-prose.txt");

#[derive(Args)]
pub struct QualityArgs {
    /// Model (a path or a `tandem pull` name).
    #[arg(short = 'm', long = "model", default_value = DEFAULT_MODEL)]
    pub model: String,
    #[arg(short = 't', long = "threads", default_value_t = 2)]
    pub threads: usize,
    /// tandem's device (`auto`, `cpu`, `gpu`, ...), for its perplexity runs and servers.
    #[arg(long = "device", default_value = "auto")]
    pub device: String,
    /// KV cache types, keys and values alike, each measured on its own.
    #[arg(long = "kv-types", value_delimiter = ',', default_value = "f16,q8_0")]
    pub kv_types: Vec<String>,
    /// Text scored for NLL (default: the project's held-out code, CPython's argparse.py).
    #[arg(long = "nll-file")]
    pub nll_file: Option<PathBuf>,
    /// Chunk sizes of the NLL runs, each scored over the whole file.
    #[arg(long = "nll-ctx", value_delimiter = ',', default_value = "512,4096")]
    pub nll_ctx: Vec<usize>,
    /// At most this many chunks per NLL run (default: all of the file).
    #[arg(long = "nll-chunks")]
    pub nll_chunks: Option<usize>,
    #[arg(long = "no-nll")]
    pub no_nll: bool,
    /// Needle prompt lengths in tokens (filler, needle and question; the chat template adds a few).
    #[arg(long, value_delimiter = ',', default_value = "1024,4096")]
    pub lengths: Vec<usize>,
    /// Needle depths in percent of the filler (0: first, 100: just before the question).
    #[arg(long, value_delimiter = ',', default_value = "0,25,50,75,100")]
    pub depths: Vec<u32>,
    /// Needles per length and depth, each with its own key and number.
    #[arg(long = "needles", default_value_t = 1)]
    pub per_cell: usize,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Filler text for the needles (default: the GNU GPL v3, repeated as needed).
    #[arg(long)]
    pub haystack: Option<PathBuf>,
    #[arg(long = "answer-tokens", default_value_t = 24)]
    pub answer_tokens: usize,
    #[arg(long = "no-needles")]
    pub no_needles: bool,
    /// Also ask the needles of tandem split at this block (`tandem box --layers 0:L` and
    /// `tandem serve --split-at L`, both on this machine).
    #[arg(long = "split-at")]
    pub split_at: Option<usize>,
    /// Flags every server gets, tandem's and llama-server alike (one string, split at
    /// spaces), e.g. "--rope-scaling yarn --rope-scale 4".
    #[arg(long = "server-args", allow_hyphen_values = true)]
    pub server_args: Option<String>,
    /// llama-perplexity, for the NLL beside tandem's.
    #[arg(long)]
    pub peer_llama_perplexity: Option<PathBuf>,
    /// llama-server, asked the same needles.
    #[arg(long)]
    pub peer_llama_server: Option<PathBuf>,
    /// The servers' port (one at a time); a split's box listens on the next one.
    #[arg(long, default_value_t = 8431)]
    pub port: u16,
    /// Where the servers' logs (and the default NLL file) go.
    #[arg(long, default_value = "/tmp/tandem-bench-quality")]
    pub log_dir: PathBuf,
    /// Print one JSON object.
    #[arg(long)]
    pub json: bool,
}

fn usage(e: impl ToString) -> CliError {
    CliError::Usage(e.to_string())
}

pub fn execute(a: QualityArgs) -> Result<(), CliError> {
    for kv in &a.kv_types {
        parse_kv_type(kv).map_err(|e| usage(format!("--kv-types: {e}")))?;
    }
    if a.kv_types.is_empty() || a.lengths.contains(&0) || a.nll_ctx.contains(&0) || a.per_cell == 0
    {
        return Err(usage(
            "--kv-types, --lengths, --nll-ctx and --needles must be non-empty and positive",
        ));
    }
    let path = pull::resolve(&a.model, None)?;
    let exe = std::env::current_exe().map_err(usage)?;
    std::fs::create_dir_all(&a.log_dir).map_err(|e| CliError::io(&a.log_dir, e))?;
    let threads = ["-t".to_string(), a.threads.to_string()];
    let server_args: Vec<String> = a
        .server_args
        .iter()
        .flat_map(|s| s.split_whitespace().map(String::from))
        .collect();

    let mut nll: Vec<NllPoint> = Vec::new();
    if !a.no_nll {
        let file = match &a.nll_file {
            Some(f) => f.clone(),
            None => {
                let f = a.log_dir.join("held-out-code.txt");
                std::fs::write(&f, HELD_OUT_CODE).map_err(|e| CliError::io(&f, e))?;
                f
            }
        };
        let mut ours = threads.to_vec();
        ours.extend(["--device".into(), a.device.clone()]);
        for kv in &a.kv_types {
            for &ctx in &a.nll_ctx {
                eprintln!("bench quality: NLL, KV {kv}, chunks of {ctx}");
                let run = NllRun {
                    model: &path,
                    file: &file,
                    kv,
                    ctx,
                    chunks: a.nll_chunks,
                };
                let mut points = vec![quality::tandem_nll(&exe, &run, &ours).map_err(usage)?];
                if let Some(tool) = &a.peer_llama_perplexity {
                    points.push(quality::llama_nll(tool, &run, &threads).map_err(usage)?);
                }
                for p in points {
                    eprintln!(
                        "bench quality: {} NLL {:.4} (PPL {:.4})",
                        p.arm, p.nll, p.ppl
                    );
                    nll.push(p);
                }
            }
        }
    }

    let mut answers = Vec::new();
    if !a.no_needles {
        let model = model::Model::load(path.clone())?;
        let tok = text::Tokenizer::from_gguf(&model.file.header.metadata)?;
        let count = |s: &str| tok.encode(s, false, false).map_or(0, |t| t.len());
        let haystack = match &a.haystack {
            Some(f) => std::fs::read_to_string(f).map_err(|e| CliError::io(f, e))?,
            None => PROSE.to_string(),
        };
        let cfg = NeedleConfig {
            lengths: a.lengths.clone(),
            depths: a.depths.clone(),
            per_cell: a.per_cell,
            seed: a.seed,
        };
        let cases = needle_cases(&haystack, &count, &cfg).map_err(usage)?;
        let longest = cases.iter().map(|c| c.tokens).max().unwrap_or(0);
        let ctx = (longest + a.answer_tokens + 256)
            .next_multiple_of(256)
            .to_string();
        let exe = exe.display().to_string();
        let model_path = path.display().to_string();
        for kv in &a.kv_types {
            let ours = |sub: &str| -> Vec<String> {
                let mut c = vec![exe.clone(), sub.into(), "-m".into(), model_path.clone()];
                c.extend(["-c".into(), ctx.clone(), "-ctk".into(), kv.clone()]);
                c.extend(threads.iter().cloned());
                c.extend(["--device".into(), a.device.clone()]);
                c
            };
            let mut serve = ours("serve");
            serve.extend(["-ctv".into(), kv.clone(), "-np".into(), "1".into()]);
            serve.extend(server_args.iter().cloned());
            let mut arms = vec![ServerArm {
                name: "tandem".into(),
                kv: kv.clone(),
                command: serve.clone(),
                stage_box: None,
            }];
            if let Some(at) = a.split_at {
                let mut stage = ours("box");
                stage.extend(["--layers".into(), format!("0:{at}")]);
                let mut head = serve.clone();
                head.extend(["--split-at".into(), at.to_string()]);
                arms.push(ServerArm {
                    name: "tandem split".into(),
                    kv: kv.clone(),
                    command: head,
                    stage_box: Some(stage),
                });
            }
            if let Some(tool) = &a.peer_llama_server {
                let mut c = vec![tool.display().to_string(), "-m".into(), model_path.clone()];
                c.extend([
                    "-c".into(),
                    ctx.clone(),
                    "-ctk".into(),
                    kv.clone(),
                    "-ctv".into(),
                    kv.clone(),
                ]);
                c.extend(["-fa".into(), "on".into(), "-np".into(), "1".into()]);
                c.extend(threads.iter().cloned());
                c.extend(server_args.iter().cloned());
                arms.push(ServerArm {
                    name: PEER.into(),
                    kv: kv.clone(),
                    command: c,
                    stage_box: None,
                });
            }
            for arm in &arms {
                eprintln!("bench quality: needles, {} ({kv})", arm.name);
                answers.extend(
                    quality::ask_needles(
                        arm,
                        &cases,
                        a.port,
                        a.port + 1,
                        &a.log_dir,
                        a.answer_tokens,
                    )
                    .map_err(usage)?,
                );
            }
        }
    }

    let machine = bench::Machine::here(Some(a.threads));
    if a.json {
        let out = serde_json::json!({
            "machine": machine, "model": a.model, "device": a.device, "nll": nll, "needles": answers,
        });
        println!("{out}");
    } else {
        println!(
            "model {} on {} ({} threads, device {}), commit {}\n\n{}",
            a.model,
            machine.cpu,
            a.threads,
            a.device,
            machine.commit,
            quality::markdown(&nll, &answers)
        );
    }
    Ok(())
}
