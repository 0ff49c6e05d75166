//! `tandem bench`: benchmarks that print ratios against a peer measured in the same run.

use std::path::PathBuf;

use bench::model_bench::{self, ModelBenchConfig, ModelBenchReport};
use bench::peer::{self, BatchedPeerPoint, LlamaBench};
use bench::report::{ratio, Table};
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
    /// Speculative decoding served: tandem plain, adaptive and fixed drafting, and
    /// llama-server without and with the same draft model, one server at a time.
    Spec(SpecBenchArgs),
    /// OpenAI-compatible servers raced on the same prompts: users × prompt sizes × runs,
    /// one server at a time; Markdown, JSON and plots in --out.
    Race(crate::race::RaceArgs),
    /// One user's prompt read at several lengths against the shortest, and llama-bench's
    /// `-p` at the same lengths: what attention over a long context costs.
    Prefill(PrefillBenchArgs),
    /// A launched server under users that never stop, some hanging up mid-answer: memory
    /// at the end against after warm-up, failures, idle slots afterwards.
    Soak(crate::soak::SoakArgs),
    /// Code-continuation NLL and needles recalled at several lengths and depths, per KV
    /// type, beside llama-perplexity and llama-server on the same model.
    Quality(crate::quality::QualityArgs),
}

#[derive(Args)]
pub struct PrefillBenchArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Prompt lengths in tokens, the first the one the others are compared with.
    #[arg(long, value_delimiter = ',', default_value = "512,2048,8192,16384")]
    pub lengths: Vec<usize>,
    /// Repetitions per length (the fastest counts).
    #[arg(long, default_value_t = 1)]
    pub reps: usize,
    /// llama-bench, run at the same lengths with the same threads and ubatch.
    #[arg(long)]
    pub peer_llama_bench: Option<PathBuf>,
    #[arg(long)]
    pub json: bool,
}

#[derive(Args)]
pub struct SpecBenchArgs {
    /// Target model (a path or a `tandem pull` name).
    #[arg(short = 'm', long = "model")]
    pub model: String,
    /// Draft model, or an EAGLE-3 or DFlash drafter (told apart by its architecture).
    #[arg(long = "model-draft", required_unless_present = "spec_type")]
    pub model_draft: Option<String>,
    /// A drafter without a draft model instead: `draft-mtp` (the target's NextN blocks)
    /// or `ngram`.
    #[arg(long = "spec-type", conflicts_with = "model_draft", value_parser = ["draft-mtp", "ngram"])]
    pub spec_type: Option<String>,
    #[arg(short = 't', long = "threads", default_value_t = 2)]
    pub threads: usize,
    #[arg(short = 'c', long = "ctx-size", default_value_t = 8192)]
    pub ctx_size: usize,
    /// Slots of every server.
    #[arg(long = "parallel", default_value_t = 8)]
    pub parallel: usize,
    /// Tokens per answer.
    #[arg(short = 'n', long = "n-predict", default_value_t = 256)]
    pub n_predict: usize,
    /// Users at once for the total-throughput runs, each prompt separately.
    #[arg(long, value_delimiter = ',', default_value = "1,2,4,8")]
    pub users: Vec<usize>,
    /// Leave out tandem's fixed-depth arm.
    #[arg(long)]
    pub no_fixed: bool,
    /// Draft length of the fixed arms (tandem --spec-policy fixed, llama-server --draft-max).
    #[arg(long = "draft-max", default_value_t = 8)]
    pub draft_max: usize,
    /// llama.cpp's llama-server binary, for its arms.
    #[arg(long)]
    pub peer_llama_server: Option<PathBuf>,
    /// Times each cell is measured, the arms taking turns (ratios: medians of the rounds').
    #[arg(long, default_value_t = 2, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub rounds: usize,
    /// The first arm's port; the other arms' follow it.
    #[arg(long, default_value_t = 8391)]
    pub port: u16,
    /// Where each server's log goes.
    #[arg(long, default_value = "/tmp/tandem-bench-spec")]
    pub log_dir: PathBuf,
    /// Print one JSON object.
    #[arg(long)]
    pub json: bool,
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
    /// Also print the cost curves the speculation policy measures and works with (target
    /// forward by rows, draft step by slots, catching up per token), for slots as many as
    /// the largest --batch and drafts of --spec-draft-n-max.
    #[arg(long)]
    pub spec: bool,
    /// Draft model for --spec (-md); without it, the n-gram drafter.
    #[arg(long = "model-draft")]
    pub model_draft: Option<String>,
    #[arg(long = "spec-draft-n-max", default_value_t = 8)]
    pub spec_draft_n_max: usize,
}

#[derive(Serialize)]
struct Output {
    #[serde(flatten)]
    tandem: ModelBenchReport,
    #[serde(skip_serializing_if = "Option::is_none")]
    peer_llama_bench: Option<LlamaBench>,
    #[serde(skip_serializing_if = "Option::is_none")]
    peer_batched: Option<Vec<BatchedPeerPoint>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    spec_costs: Option<SpecCostsOut>,
}

/// The speculation policy's cost curves, in milliseconds.
#[derive(Serialize)]
struct SpecCostsOut {
    drafter: String,
    /// Index r: a target forward of r + 1 rows.
    target_ms: Vec<f64>,
    /// Index s: a draft step over s + 1 slots.
    draft_ms: Vec<f64>,
    catch_up_ms: f64,
}

/// Starts an engine with the drafter (it measures its costs before serving) and reads
/// the curves back.
fn spec_costs(
    a: &ModelBenchArgs,
    model: Model,
    ctx: &engine::ContextConfig,
) -> Result<SpecCostsOut, CliError> {
    use engine::speculative::{Ngram, SpecConfig, Speculation};
    let n_parallel = a.batch.iter().copied().max().unwrap_or(1).max(1);
    let config = SpecConfig {
        n_max: a.spec_draft_n_max.max(1),
        ..SpecConfig::default()
    };
    let spec = match &a.model_draft {
        Some(d) => Speculation::draft_model(Model::load(crate::pull::resolve(d, None)?)?, config),
        None => Speculation::with(Ngram::default(), config),
    };
    let tok = std::sync::Arc::new(text::Tokenizer::from_gguf(&model.file.header.metadata)?);
    let ecfg = engine::EngineConfig {
        n_ctx: (n_parallel * 256).max(1024),
        n_parallel,
        kv_unified: true,
        n_batch: 2048,
        n_ubatch: ctx.n_ubatch.max(n_parallel * (config.n_max + 1)),
        n_threads: ctx.n_threads,
        kv_type: ctx.kv_type,
        queue_limit: 1,
        device: ctx.device,
        step_budget: engine::StepBudget::AUTO,
        swa_full: false,
        ctx_checkpoints: ctx.ctx_checkpoints,
        cache_ram_mib: 0,
        cache_dir: None,
    };
    let handle = engine::start(model, tok, ecfg, Some(spec), None)?;
    let costs = handle
        .snapshot_blocking()?
        .spec_costs
        .ok_or_else(|| CliError::Usage("the engine reported no speculation costs".into()))?;
    Ok(SpecCostsOut {
        drafter: costs.drafter,
        target_ms: costs.target_ms,
        draft_ms: costs.draft_ms,
        catch_up_ms: costs.catch_up_ms,
    })
}

pub fn execute(a: BenchArgs) -> Result<(), CliError> {
    match a.command {
        BenchCommand::Model(m) => model(m),
        BenchCommand::Spec(s) => spec(s),
        BenchCommand::Race(r) => crate::race::execute(r),
        BenchCommand::Prefill(p) => prefill(p),
        BenchCommand::Soak(s) => crate::soak::execute(s),
        BenchCommand::Quality(q) => crate::quality::execute(q),
    }
}

/// What `tandem bench spec` drafts with: a draft model's path, or a `--spec-type`.
enum Drafter {
    /// A draft model, or a drafter of the target's features (llama-server's `--spec-type`
    /// for it).
    Model(String, Option<&'static str>),
    Kind(String),
}

/// The two prompts of the published llama.cpp run.
const SPEC_PROMPTS: [(&str, &str); 2] = [
    (
        "code",
        "Write a Python function that parses an ISO-8601 date string into a datetime, with tests",
    ),
    (
        "prose",
        "Write a short essay on the history of the printing press",
    ),
];

fn spec(a: SpecBenchArgs) -> Result<(), CliError> {
    use bench::spec_bench::{self, Arm, SpecBenchConfig};
    let target = crate::pull::resolve(&a.model, None)?;
    let draft = match (&a.model_draft, a.spec_type.as_deref()) {
        (Some(m), _) => {
            let path = crate::pull::resolve(m, None)?;
            let md = gguf::GgufFile::open(&path)?;
            let reads = model::read_hparams(&md.header.metadata)?.target;
            let kind = reads.map(|t| match t.block {
                0 => "draft-eagle3",
                _ => "draft-dflash",
            });
            Drafter::Model(path.display().to_string(), kind)
        }
        (None, Some(t)) => Drafter::Kind(t.to_string()),
        (None, None) => unreachable!("clap requires one"),
    };
    let exe = std::env::current_exe().map_err(|e| CliError::Usage(e.to_string()))?;
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<String>>();
    let (t, c, np, n) = (
        a.threads.to_string(),
        a.ctx_size.to_string(),
        a.parallel.to_string(),
        a.draft_max.to_string(),
    );
    let target = target.display().to_string();
    let ours = |n: &str| match &draft {
        Drafter::Model(path, _) => s(&["-md", path, "--spec-draft-n-max", n]),
        Drafter::Kind(t) => s(&["--spec-type", t, "--spec-draft-n-max", n]),
    };
    let peers = match &draft {
        Drafter::Model(path, kind) => {
            s(&["-md", path, "--spec-type", kind.unwrap_or("draft-simple")])
        }
        Drafter::Kind(t) if t == "ngram" => s(&["--spec-type", "ngram-simple"]),
        Drafter::Kind(t) => s(&["--spec-type", t]),
    };
    let common = s(&["-m", &target, "-t", &t, "-c", &c, "-np", &np]);
    let tandem = |extra: &[String]| {
        let mut v = vec![
            exe.display().to_string(),
            "serve".into(),
            "--metrics".into(),
        ];
        v.extend(common.clone());
        v.extend_from_slice(extra);
        v
    };
    let arm = |name: &str, command: Vec<String>, baseline: Option<&str>| Arm {
        name: name.into(),
        command,
        baseline: baseline.map(str::to_string),
    };
    let mut arms = vec![
        arm("tandem plain", tandem(&[]), None),
        arm(
            "tandem draft adaptive",
            tandem(&ours(&n)),
            Some("tandem plain"),
        ),
    ];
    if !a.no_fixed {
        let mut fixed = ours(&n);
        fixed.extend(s(&["--spec-policy", "fixed"]));
        arms.push(arm(
            "tandem draft fixed",
            tandem(&fixed),
            Some("tandem plain"),
        ));
    }
    if let Some(server) = &a.peer_llama_server {
        let mut llama = vec![server.display().to_string()];
        llama.extend(common.clone());
        let mut llama_spec = llama.clone();
        llama_spec.extend(peers);
        llama_spec.extend(s(&["--spec-draft-n-max", &n, "--spec-draft-n-min", "0"]));
        arms.push(arm("llama-server plain", llama, None));
        arms.push(arm(
            "llama-server draft",
            llama_spec,
            Some("llama-server plain"),
        ));
    }
    std::fs::create_dir_all(&a.log_dir).map_err(|e| CliError::io(&a.log_dir, e))?;
    let cfg = SpecBenchConfig {
        prompts: SPEC_PROMPTS
            .iter()
            .map(|(l, p)| (l.to_string(), p.to_string()))
            .collect(),
        n_predict: a.n_predict,
        users: a.users.clone(),
        rounds: a.rounds,
        port: a.port,
        log_dir: a.log_dir.clone(),
    };
    let reports = spec_bench::run_arms(&arms, &cfg).map_err(CliError::Usage)?;
    if a.json {
        let machine = bench::Machine::here(Some(a.threads));
        let out =
            serde_json::json!({ "machine": machine, "n_predict": a.n_predict, "arms": reports });
        println!("{out}");
    } else {
        println!("{}", spec_bench::markdown(&reports));
    }
    Ok(())
}

fn prefill(a: PrefillBenchArgs) -> Result<(), CliError> {
    use bench::prefill;
    if a.lengths.is_empty() || a.lengths.contains(&0) {
        return Err(CliError::Usage(
            "--lengths must be positive token counts".into(),
        ));
    }
    let path = a.model.path()?;
    let model = std::sync::Arc::new(a.model.load(&path, model::Part::Whole)?);
    let context = a.model.context_config();
    let err = |e: bench::Error| CliError::Usage(e.to_string());
    let mut points = prefill::run(model, context, &a.lengths, a.reps).map_err(err)?;
    if let Some(tool) = &a.peer_llama_bench {
        let (t, ub) = (context.n_threads, context.n_ubatch);
        prefill::with_peer(&mut points, tool, &path, t, ub, a.reps).map_err(err)?;
    }
    let machine = bench::Machine::here(Some(context.n_threads));
    if a.json {
        let out = serde_json::json!({ "machine": machine, "model": a.model.model, "n_ubatch": context.n_ubatch, "points": points });
        println!("{out}");
    } else {
        println!(
            "model {} on {} ({} threads, ubatch {}), commit {}\n\n{}",
            a.model.model,
            machine.cpu,
            context.n_threads,
            context.n_ubatch,
            machine.commit,
            prefill::markdown(&points)
        );
    }
    Ok(())
}

fn model(a: ModelBenchArgs) -> Result<(), CliError> {
    let path = a.model.path()?;
    let model = std::sync::Arc::new(a.model.load(&path, model::Part::Whole)?);
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
    let report = model_bench::run(model.clone(), &a.model.model, &cfg)
        .map_err(|e| CliError::Usage(e.to_string()))?;
    let peer_err = |e: bench::Error| CliError::Usage(e.to_string());
    let llama = match &a.peer_llama_bench {
        Some(tool) => Some(
            peer::llama_bench(tool, &path, threads, a.pp, a.tg, a.reps, &[]).map_err(peer_err)?,
        ),
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
    let spec_costs = if a.spec {
        Some(spec_costs(
            &a,
            a.model.load(&path, model::Part::Whole)?,
            &cfg.context,
        )?)
    } else {
        None
    };
    let out = Output {
        tandem: report,
        peer_llama_bench: llama,
        peer_batched: batched_peer,
        spec_costs,
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
        r.model,
        r.machine.cpu,
        r.machine.threads.unwrap_or(0),
        r.machine.commit
    );
    let peer = out.peer_llama_bench.as_ref();
    let mut speed = Table::new(&["test", "tandem t/s", "llama.cpp t/s", "ratio"]);
    for (test, n, ours, theirs) in [
        ("pp", r.pp, r.pp_tok_s, peer.map(|l| l.pp_tok_s)),
        ("tg", r.tg, r.tg_tok_s, peer.map(|l| l.tg_tok_s)),
    ] {
        if n == 0 {
            continue;
        }
        speed.row(&[
            format!("{test}{n}"),
            format!("{ours:.1}"),
            theirs.map_or("-".into(), |v| format!("{v:.1}")),
            ratio(ours, theirs.unwrap_or(0.0)),
        ]);
    }
    println!("{}", speed.markdown());
    if let Some(d) = &r.decode {
        let reader = match d.device_probe {
            true => "the device's own streaming kernel read".to_string(),
            false => format!(
                "this machine read with {} threads",
                r.machine.threads.unwrap_or(0)
            ),
        };
        println!(
            "decode: {:.1} MiB of weights per token, {:.1} GB/s streamed, {:.0}% of what {reader} just before each run ({:.1} GB/s on average)\n",
            d.weight_bytes_per_token as f64 / 1048576.0,
            d.gb_s,
            100.0 * d.share,
            d.probe_gb_s
        );
    }
    if !r.ops.is_empty() {
        println!(
            "decode op by op ({} tokens, the device's timestamps):",
            bench::model_bench::PROFILED_TOKENS
        );
        let mut t = Table::new(&["op", "calls/token", "ms/token", "GB/s of weights"]);
        for o in &r.ops {
            t.row(&[
                o.op.clone(),
                format!("{:.1}", o.calls_per_token),
                format!("{:.3}", o.ms_per_token),
                match o.gb_s > 0.0 {
                    true => format!("{:.1}", o.gb_s),
                    false => "-".into(),
                },
            ]);
        }
        println!("{}", t.markdown());
    }
    println!(
        "batched decode (aggregate tok/s; ratio to batch {}):",
        r.batched.first().map_or(1, |p| p.batch)
    );
    let mut batched = Table::new(&[
        "batch",
        "tandem t/s",
        "ratio",
        "llama.cpp t/s",
        "ratio",
        "tandem / llama.cpp",
    ]);
    for p in &r.batched {
        let peer = out
            .peer_batched
            .iter()
            .flatten()
            .find(|q| q.batch == p.batch);
        let (pt, pr) = match peer {
            Some(q) => (format!("{:.1}", q.tok_s), format!("{:.2}×", q.ratio)),
            None => ("-".into(), "-".into()),
        };
        batched.row(&[
            p.batch.to_string(),
            format!("{:.1}", p.tok_s),
            format!("{:.2}×", p.ratio),
            pt,
            pr,
            ratio(p.tok_s, peer.map_or(0.0, |q| q.tok_s)),
        ]);
    }
    println!("{}", batched.markdown());
    println!(
        "verify cost (one sequence, k new tokens in one forward, after {} tokens):",
        model_bench::PRIOR
    );
    let base_k = r.verify.first().map_or(1, |p| p.k);
    let moe = r.verify.iter().any(|p| p.experts_per_block.is_some());
    let ratio_col = format!("ratio to k={base_k}");
    let mut cols = vec!["k", "ms", ratio_col.as_str()];
    if moe {
        cols.push("experts streamed per block");
    }
    let mut verify = Table::new(&cols);
    for p in &r.verify {
        let mut row = vec![
            p.k.to_string(),
            format!("{:.2}", p.ms),
            format!("{:.2}×", p.ratio),
        ];
        row.extend(p.experts_per_block.map(|x| format!("{x:.1}")));
        verify.row(&row);
    }
    print!("{}", verify.markdown());
    if let Some(c) = &out.spec_costs {
        println!(
            "\nspeculation policy costs ({} drafter; catching up {:.2} ms per token):",
            c.drafter, c.catch_up_ms
        );
        let mut costs = Table::new(&["rows or slots", "target forward ms", "draft step ms"]);
        for (i, t) in c.target_ms.iter().enumerate() {
            let d = c.draft_ms.get(i).map_or("".into(), |d| format!("{d:.2}"));
            costs.row(&[(i + 1).to_string(), format!("{t:.2}"), d]);
        }
        print!("{}", costs.markdown());
    }
}
