//! `tandem bench race`: the command line of `bench::race`.

use std::path::PathBuf;

use bench::race::client::Api;
use bench::race::prompts::{Corpus, PromptSize};
use bench::race::{self, RaceConfig, Target};
use clap::{Args, ValueEnum};

use crate::CliError;

#[derive(Clone, Copy, ValueEnum)]
pub enum ApiArg {
    Chat,
    Completion,
}

#[derive(Args)]
pub struct RaceArgs {
    /// A running server: NAME=URL (its base, e.g. http://127.0.0.1:8080). Repeatable.
    #[arg(long = "target", value_name = "NAME=URL")]
    pub targets: Vec<String>,
    /// A server the race starts, alone, after the --target ones: NAME="COMMAND" (`{port}`
    /// in it becomes --port's value, else `--port PORT` is appended). Repeatable.
    #[arg(long = "launch", value_name = "NAME=COMMAND")]
    pub launches: Vec<String>,
    /// Users at once.
    #[arg(long, value_delimiter = ',', default_value = "1,2,4,8")]
    pub users: Vec<usize>,
    /// Prompt sizes: `short` (64 tokens), a token count, or thousands like `4k`.
    #[arg(
        long = "prompt-sizes",
        value_delimiter = ',',
        default_value = "short,4k,16k"
    )]
    pub prompt_sizes: Vec<PromptSize>,
    #[arg(long, default_value_t = 3)]
    pub runs: usize,
    /// Tokens per reply at most.
    #[arg(long = "max-tokens", default_value_t = 512)]
    pub max_tokens: usize,
    /// Text prompts are cut from; by default a built-in mix of prose and code.
    #[arg(long)]
    pub corpus: Option<PathBuf>,
    #[arg(long, value_enum, default_value = "chat")]
    pub api: ApiArg,
    /// Where race.md, race.json, the plots and the launched servers' logs go.
    #[arg(long, default_value = "race")]
    pub out: PathBuf,
    /// The port launched servers listen on.
    #[arg(long, default_value_t = 8392)]
    pub port: u16,
    /// The `model` of each request; by default each target's first /v1/models entry.
    #[arg(long)]
    pub model: Option<String>,
    /// Ask servers to ignore end-of-generation tokens (`ignore_eos`, llama.cpp and vLLM), so
    /// that every reply is --max-tokens long.
    #[arg(long)]
    pub ignore_eos: bool,
    /// Sent to every target as `Authorization: Bearer KEY`.
    #[arg(long = "api-key")]
    pub api_key: Option<String>,
    /// After the runs, users streaming while others send long prompts: `SxSIZE+LxSIZE`,
    /// e.g. `2xshort+2x4k` (2 users stream replies to 64-token prompts; once they have their
    /// first tokens, 2 others send 4k-token prompts). Reports the streams' worst gap and
    /// the long prompts' TTFT.
    #[arg(long)]
    pub mix: Option<bench::race::mix::Mix>,
    /// Tokens per reply of the mix's streaming users (long enough to outlast the long
    /// prompts' reading).
    #[arg(long = "mix-tokens", default_value_t = 1024)]
    pub mix_tokens: usize,
    /// Seconds one request may take.
    #[arg(long, default_value_t = 1800)]
    pub request_timeout: u64,
    /// Seconds a launched server may take to answer /health.
    #[arg(long, default_value_t = 900)]
    pub ready_timeout: u64,
}

pub fn execute(a: RaceArgs) -> Result<(), CliError> {
    let usage = CliError::Usage;
    let mut targets = Vec::new();
    for t in &a.targets {
        targets.push(Target::parse(t, false).map_err(usage)?);
    }
    for t in &a.launches {
        targets.push(Target::parse(t, true).map_err(usage)?);
    }
    if targets.is_empty() {
        return Err(usage("give at least one --target or --launch".into()));
    }
    if a.users.contains(&0) || a.runs == 0 || a.max_tokens == 0 {
        return Err(usage(
            "--users, --runs and --max-tokens must be at least 1".into(),
        ));
    }
    let corpus = match &a.corpus {
        Some(p) => {
            let text = std::fs::read_to_string(p).map_err(|e| CliError::io(p, e))?;
            Corpus::from_text(&p.display().to_string(), text).map_err(usage)?
        }
        None => Corpus::built_in(),
    };
    let cfg = RaceConfig {
        targets,
        users: a.users,
        sizes: a.prompt_sizes,
        runs: a.runs,
        max_tokens: a.max_tokens,
        corpus,
        api: match a.api {
            ApiArg::Chat => Api::Chat,
            ApiArg::Completion => Api::Completion,
        },
        out: a.out.clone(),
        port: a.port,
        model: a.model,
        ignore_eos: a.ignore_eos,
        api_key: a.api_key,
        mix: a.mix,
        mix_tokens: a.mix_tokens,
        request_timeout_s: a.request_timeout,
        ready_timeout_s: a.ready_timeout,
        argv: std::env::args().collect(),
    };
    let result = race::run(&cfg).map_err(usage)?;
    let (md, files) = race::write(&result, &a.out).map_err(usage)?;
    println!("{md}");
    for f in files {
        eprintln!("wrote {}", f.display());
    }
    Ok(())
}
