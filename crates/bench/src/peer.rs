//! llama.cpp's own benchmark tools, run on the same model in the same invocation.

use std::path::Path;
use std::process::Command;

use serde::Serialize;

use crate::{Error, Result};

/// llama-bench's prompt and generation speeds.
#[derive(Debug, Clone, Serialize)]
pub struct LlamaBench {
    pub pp_tok_s: f64,
    pub tg_tok_s: f64,
}

/// llama-batched-bench's aggregate decode speed per number of parallel sequences.
#[derive(Debug, Clone, Serialize)]
pub struct BatchedPeerPoint {
    pub batch: usize,
    pub tok_s: f64,
    pub ratio: f64,
}

fn run_json(tool: &Path, args: &[String]) -> Result<String> {
    let err = |problem: String| Error::Peer {
        tool: tool.display().to_string(),
        problem,
    };
    let out = Command::new(tool)
        .args(args)
        .output()
        .map_err(|e| err(e.to_string()))?;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        return Err(err(format!(
            "exited with {}: {}",
            out.status,
            stderr.lines().last().unwrap_or("")
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// `llama-bench -m MODEL -t T -p PP -n TG -r REPS -o json EXTRA..`.
pub fn llama_bench(
    tool: &Path,
    model: &Path,
    threads: usize,
    pp: usize,
    tg: usize,
    reps: usize,
    extra: &[String],
) -> Result<LlamaBench> {
    let mut args: Vec<String> = vec![
        "-m".into(),
        model.display().to_string(),
        "-t".into(),
        threads.to_string(),
        "-p".into(),
        pp.to_string(),
        "-n".into(),
        tg.to_string(),
        "-r".into(),
        reps.to_string(),
        "-o".into(),
        "json".into(),
    ];
    args.extend_from_slice(extra);
    let text = run_json(tool, &args)?;
    let rows: serde_json::Value = serde_json::from_str(&text).map_err(|e| Error::Peer {
        tool: tool.display().to_string(),
        problem: format!("unreadable JSON: {e}"),
    })?;
    let speed = |prompt: bool| {
        rows.as_array()
            .into_iter()
            .flatten()
            .find(|r| (r["n_prompt"].as_u64().unwrap_or(0) > 0) == prompt)
            .and_then(|r| r["avg_ts"].as_f64())
            .unwrap_or(0.0)
    };
    Ok(LlamaBench {
        pp_tok_s: speed(true),
        tg_tok_s: speed(false),
    })
}

/// `llama-batched-bench -npp PRIOR -ntg STEPS -npl B1,B2,.. --output-format jsonl`:
/// the decode speed over all sequences for each batch size.
pub fn batched_bench(
    tool: &Path,
    model: &Path,
    threads: usize,
    batch: &[usize],
    prior: usize,
    steps: usize,
) -> Result<Vec<BatchedPeerPoint>> {
    let max_b = batch.iter().copied().max().unwrap_or(1);
    let npl: Vec<String> = batch.iter().map(|b| b.to_string()).collect();
    let args: Vec<String> = [
        "-m",
        &model.display().to_string(),
        "-c",
        &(max_b * (prior + steps) + 16).to_string(),
        "-b",
        "2048",
        "-ub",
        "512",
        "-npp",
        &prior.to_string(),
        "-ntg",
        &steps.to_string(),
        "-npl",
        &npl.join(","),
        "-t",
        &threads.to_string(),
        "--output-format",
        "jsonl",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let text = run_json(tool, &args)?;
    let mut points: Vec<BatchedPeerPoint> = Vec::new();
    for line in text.lines().filter(|l| l.trim_start().starts_with('{')) {
        let v: serde_json::Value = serde_json::from_str(line).map_err(|e| Error::Peer {
            tool: tool.display().to_string(),
            problem: format!("unreadable JSON line: {e}"),
        })?;
        let (Some(b), Some(tok_s)) = (v["pl"].as_u64(), v["speed_tg"].as_f64()) else {
            continue;
        };
        let base = points.first().map_or(tok_s, |p| p.tok_s);
        points.push(BatchedPeerPoint {
            batch: b as usize,
            tok_s,
            ratio: tok_s / base,
        });
    }
    Ok(points)
}
