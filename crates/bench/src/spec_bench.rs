//! Speculative decoding against plain decoding, served: each arm is a server command
//! (tandem or llama-server, with or without a drafter) launched alone, asked the same chat
//! prompts at temperature 0 by one user and then by several at once, and stopped.
//!
//! Figures per arm: decode tok/s of each prompt alone (the server's own `timings`), draft
//! tokens and accepted ones, total output tok/s with N users (completion tokens of all
//! requests / wall time from the first request sent to the last answer), peak RSS, and the
//! answers' text, so that speculation's byte-identity with plain decoding can be checked.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::{json, Value};

use crate::launch::{local_url, Launched};
use crate::race::summary::first_difference;
use crate::report::{ratio, Table};

/// One server configuration.
#[derive(Debug, Clone, Serialize)]
pub struct Arm {
    pub name: String,
    /// Program and arguments, without `--port`.
    pub command: Vec<String>,
    /// The arm plain decoding is compared with (its own server without a drafter).
    pub baseline: Option<String>,
}

#[derive(Debug, Clone)]
pub struct SpecBenchConfig {
    /// `(label, user message)`.
    pub prompts: Vec<(String, String)>,
    pub n_predict: usize,
    pub users: Vec<usize>,
    pub port: u16,
    /// Where each server's stderr goes.
    pub log_dir: PathBuf,
}

#[derive(Debug, Clone, Serialize)]
pub struct Single {
    pub prompt: String,
    pub tok_s: f64,
    pub n: u64,
    pub draft_n: u64,
    pub draft_n_accepted: u64,
    pub text: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct Multi {
    pub users: usize,
    pub tok_s: f64,
    pub tokens: u64,
    pub seconds: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct ArmReport {
    pub arm: Arm,
    pub single: Vec<Single>,
    pub multi: Vec<Multi>,
    pub peak_rss_mib: f64,
    /// The line in which a tandem server prints the cost curves its policy starts from.
    pub cost_curves: Option<String>,
}

/// One chat request at temperature 0; returns the response body.
fn chat(port: u16, message: &str, n_predict: usize) -> Result<Value, String> {
    let body = json!({
        "messages": [{"role": "user", "content": message}],
        "max_tokens": n_predict,
        "temperature": 0.0,
        "seed": 0,
    });
    let r = minreq::post(local_url(port, "/v1/chat/completions"))
        .with_json(&body)
        .map_err(|e| e.to_string())?
        .with_timeout(3600)
        .send()
        .map_err(|e| e.to_string())?;
    if r.status_code != 200 {
        return Err(format!(
            "HTTP {}: {}",
            r.status_code,
            r.as_str().unwrap_or("")
        ));
    }
    r.json().map_err(|e| e.to_string())
}

fn field(v: &Value, path: &[&str]) -> Option<f64> {
    path.iter().try_fold(v, |v, k| v.get(*k))?.as_f64()
}

/// Launches `arm`, measures it, and stops it.
pub fn run_arm(arm: &Arm, cfg: &SpecBenchConfig) -> Result<ArmReport, String> {
    let (program, args) = arm.command.split_first().ok_or("empty command")?;
    let log = cfg
        .log_dir
        .join(format!("{}.log", arm.name.replace(' ', "_")));
    let mut args = args.to_vec();
    args.extend(["--port".to_string(), cfg.port.to_string()]);
    let mut server = Launched::spawn(program, &args, &log)?;
    let result = measure(arm, cfg, &mut server);
    let rss = server.peak_rss_mib();
    drop(server);
    let cost_curves = std::fs::File::open(&log).ok().and_then(|f| {
        BufReader::new(f)
            .lines()
            .map_while(Result::ok)
            .find(|l| l.starts_with("speculation ("))
    });
    let (single, multi) = result?;
    Ok(ArmReport {
        arm: arm.clone(),
        single,
        multi,
        peak_rss_mib: rss,
        cost_curves,
    })
}

fn measure(
    arm: &Arm,
    cfg: &SpecBenchConfig,
    server: &mut Launched,
) -> Result<(Vec<Single>, Vec<Multi>), String> {
    let port = cfg.port;
    server
        .wait_ready(&local_url(port, ""), Duration::from_secs(900))
        .map_err(|e| format!("{}: {e}", arm.name))?;
    chat(port, "Say hello.", 8)?;
    let mut single = Vec::new();
    for (label, message) in &cfg.prompts {
        let v = chat(port, message, cfg.n_predict)?;
        let n = field(&v, &["usage", "completion_tokens"]).unwrap_or(0.0) as u64;
        single.push(Single {
            prompt: label.clone(),
            tok_s: field(&v, &["timings", "predicted_per_second"]).unwrap_or(0.0),
            n,
            draft_n: field(&v, &["timings", "draft_n"]).unwrap_or(0.0) as u64,
            draft_n_accepted: field(&v, &["timings", "draft_n_accepted"]).unwrap_or(0.0) as u64,
            text: v["choices"][0]["message"]["content"]
                .as_str()
                .unwrap_or("")
                .to_string(),
        });
    }
    let mut multi = Vec::new();
    for &users in &cfg.users {
        let t0 = Instant::now();
        let answers: Vec<Result<Value, String>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..users)
                .map(|u| {
                    let (_, message) = &cfg.prompts[u % cfg.prompts.len()];
                    let message = format!("(user {u}) {message}");
                    s.spawn(move || chat(port, &message, cfg.n_predict))
                })
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or_else(|_| Err("client thread panicked".into()))
                })
                .collect()
        });
        let seconds = t0.elapsed().as_secs_f64();
        let mut tokens = 0;
        for a in answers {
            tokens += field(&a?, &["usage", "completion_tokens"]).unwrap_or(0.0) as u64;
        }
        multi.push(Multi {
            users,
            tok_s: tokens as f64 / seconds,
            tokens,
            seconds,
        });
    }
    Ok((single, multi))
}

/// Markdown: one row per arm with its ratios to its baseline, then text identity and
/// the tandem cost curves.
pub fn markdown(reports: &[ArmReport]) -> String {
    let mut out = String::new();
    let find = |name: &Option<String>| {
        name.as_ref()
            .and_then(|n| reports.iter().find(|r| &r.arm.name == n))
    };
    let first = &reports[0];
    let mut header = vec!["arm".to_string()];
    for s in &first.single {
        header.extend([
            format!("{} tok/s", s.prompt),
            "× plain".into(),
            "accepted".into(),
        ]);
    }
    for m in &first.multi {
        header.extend([format!("{} users tok/s", m.users), "× plain".into()]);
    }
    header.push("peak RSS MiB".into());
    let mut table = Table::new(&header);
    for r in reports {
        let base = find(&r.arm.baseline);
        let mut row = vec![r.arm.name.clone()];
        for (i, s) in r.single.iter().enumerate() {
            let b = base.and_then(|b| b.single.get(i)).map_or(0.0, |b| b.tok_s);
            let acc = if s.draft_n > 0 {
                format!("{}/{}", s.draft_n_accepted, s.draft_n)
            } else {
                "-".into()
            };
            row.extend([format!("{:.1}", s.tok_s), ratio(s.tok_s, b), acc]);
        }
        for (i, m) in r.multi.iter().enumerate() {
            let b = base.and_then(|b| b.multi.get(i)).map_or(0.0, |b| b.tok_s);
            row.extend([format!("{:.1}", m.tok_s), ratio(m.tok_s, b)]);
        }
        row.push(format!("{:.0}", r.peak_rss_mib));
        table.row(&row);
    }
    out += &table.markdown();
    out += "\nText at temperature 0 against the arm's baseline (one user):\n";
    for r in reports {
        let Some(base) = find(&r.arm.baseline) else {
            continue;
        };
        for (s, b) in r.single.iter().zip(&base.single) {
            let verdict = match first_difference(&s.text, &b.text) {
                None => "byte-identical".to_string(),
                Some(at) => format!("differs from character {at}"),
            };
            out += &format!("- {} / {}: {verdict}\n", r.arm.name, s.prompt);
        }
    }
    for r in reports {
        if let Some(c) = &r.cost_curves {
            out += &format!("\n{}: {c}\n", r.arm.name);
        }
    }
    out
}
