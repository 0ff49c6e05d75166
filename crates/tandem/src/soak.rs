//! `tandem bench soak`: the command line of `bench::soak`.

use std::path::PathBuf;

use bench::soak::{self, SoakConfig};
use clap::Args;

use crate::CliError;

#[derive(Args)]
pub struct SoakArgs {
    /// The server command line (`{port}` in it becomes --port's value, else `--port PORT`
    /// is appended), e.g. "tandem serve -m smollm2-135m -np 8".
    #[arg(long)]
    pub launch: String,
    #[arg(long, default_value_t = 8)]
    pub users: usize,
    /// Minutes of load after warm-up.
    #[arg(long, default_value_t = 30.0)]
    pub minutes: f64,
    /// Seconds of load before the reference RSS is read.
    #[arg(long, default_value_t = 120.0)]
    pub warmup: f64,
    /// Share of requests the client hangs up on mid-answer.
    #[arg(long, default_value_t = 0.2)]
    pub disconnect: f64,
    #[arg(long = "max-tokens", default_value_t = 128)]
    pub max_tokens: usize,
    /// Seconds between RSS samples.
    #[arg(long, default_value_t = 10.0)]
    pub sample: f64,
    #[arg(long, default_value_t = 8393)]
    pub port: u16,
    /// Where the report (soak.md, soak.json) and the server's log go.
    #[arg(long, default_value = "soak")]
    pub out: PathBuf,
}

pub fn execute(a: SoakArgs) -> Result<(), CliError> {
    if a.users == 0 || !(0.0..=1.0).contains(&a.disconnect) {
        return Err(CliError::Usage(
            "--users must be at least 1 and --disconnect within 0..1".into(),
        ));
    }
    std::fs::create_dir_all(&a.out).map_err(|e| CliError::io(&a.out, e))?;
    let cfg = SoakConfig {
        launch: a.launch,
        port: a.port,
        users: a.users,
        warmup_s: a.warmup,
        duration_s: a.minutes * 60.0,
        disconnect: a.disconnect,
        max_tokens: a.max_tokens,
        sample_s: a.sample,
        log: a.out.join("server.log"),
    };
    let report = soak::run(&cfg).map_err(CliError::Usage)?;
    let md = soak::markdown(&report);
    let json = serde_json::to_string_pretty(&report).expect("serializable");
    for (name, text) in [("soak.md", &md), ("soak.json", &json)] {
        let p = a.out.join(name);
        std::fs::write(&p, text).map_err(|e| CliError::io(&p, e))?;
    }
    print!("{md}");
    Ok(())
}
