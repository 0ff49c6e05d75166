//! tandem: run GGUF models on this machine. `tandem --help` lists the commands.

mod access;
mod bench;
mod box_worker;
mod cli;
mod imatrix;
mod info;
mod kld;
mod llama_flags;
mod perplexity;
mod pull;
mod quality;
mod quantize;
mod race;
mod router;
mod run;
mod serve;
mod sidecar;
mod soak;
mod synth;

use std::path::{Path, PathBuf};

use clap::{CommandFactory, Parser};

/// Errors a command reports as one line on stderr with a non-zero exit.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    #[error("{0}")]
    Usage(String),
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("pull: {0}")]
    Pull(String),
    #[error(transparent)]
    Model(#[from] model::Error),
    #[error(transparent)]
    Engine(#[from] engine::Error),
    #[error(transparent)]
    Text(#[from] text::Error),
    #[error(transparent)]
    Gguf(#[from] gguf::Error),
    #[error(transparent)]
    Server(#[from] server::Error),
    #[error(transparent)]
    Split(#[from] split::Error),
}

impl CliError {
    pub fn io(path: &Path, source: std::io::Error) -> Self {
        CliError::Io {
            path: path.to_path_buf(),
            source,
        }
    }
}

/// Commands that print to a pipe end quietly when the reader closes it (`tandem info | head`),
/// as other command-line tools do, instead of panicking in `println!`. The commands that talk
/// to servers or children (serve, box, bench) keep Rust's default: SIGPIPE ignored, a closed
/// socket or pipe an error they handle.
fn quit_on_closed_pipe() {
    // SAFETY: called first in `main`, before any thread starts; SIG_DFL is a valid handler.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

/// The command line, with `serve`'s llama-server flags and environment variables resolved
/// (`llama_flags::prepare`); its warnings are printed here.
fn arguments() -> Vec<String> {
    let mut args = cli::expand_short_aliases(std::env::args());
    if args.get(1).map(String::as_str) == Some("serve") {
        let mut cmd = cli::Cli::command();
        cmd.build();
        let serve = cmd.find_subcommand("serve").expect("serve is a subcommand");
        let (mut rest, warnings) =
            llama_flags::prepare(serve, args.split_off(2), &|k| std::env::var(k).ok());
        router::rewrite_models(&mut rest);
        args.extend(rest);
        for w in warnings {
            eprintln!("warning: {w}");
        }
    }
    args
}

fn main() {
    gpu::quiet_device_select();
    let cli = cli::Cli::parse_from(arguments());
    if !matches!(
        cli.command,
        cli::Command::Serve(_) | cli::Command::StageBox(_) | cli::Command::Bench(_)
    ) {
        quit_on_closed_pipe();
    }
    let result = match cli.command {
        cli::Command::Pull(a) => a.execute(),
        cli::Command::Run(a) => run::execute(a),
        cli::Command::Info(a) => info::execute(a),
        cli::Command::Perplexity(a) => perplexity::execute(a),
        cli::Command::Serve(a) => serve::execute(*a),
        cli::Command::Bench(a) => bench::execute(a),
        cli::Command::Synth(a) => synth::execute(a),
        cli::Command::Imatrix(a) => imatrix::execute(a),
        cli::Command::Quantize(a) => quantize::execute(a),
        cli::Command::StageBox(a) => box_worker::execute(a),
    };
    if let Err(e) = result {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}
