//! Benchmarks that print a ratio against a peer measured in the same run.

pub mod launch;
pub mod model_bench;
pub mod peer;
pub mod prefill;
pub mod probe;
pub mod quality;
pub mod race;
pub mod report;
pub mod soak;
pub mod spec_bench;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Engine(#[from] engine::Error),
    #[error("peer {tool}: {problem}")]
    Peer { tool: String, problem: String },
}

pub type Result<T> = std::result::Result<T, Error>;

/// The machine a figure was measured on.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Machine {
    pub cpu: String,
    pub cores: usize,
    /// Threads the measured process used, where the benchmark sets them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub threads: Option<usize>,
    pub commit: String,
}

impl Machine {
    pub fn here(threads: Option<usize>) -> Machine {
        let cpu = std::fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find(|l| l.starts_with("model name"))
                    .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
            })
            .unwrap_or_else(|| std::env::consts::ARCH.to_string());
        let commit = std::process::Command::new("git")
            .args(["rev-parse", "--short", "HEAD"])
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .unwrap_or_else(|| "unknown".into());
        Machine {
            cpu,
            cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
            threads,
            commit,
        }
    }
}
