//! `tandem bench race`: OpenAI-compatible servers raced on the same prompts, users × prompt
//! sizes × runs, one server at a time, every request recorded.
//!
//! For each target in turn: start it (a `--launch` command) or take its URL, send one
//! uncounted warm-up request, then for each prompt size, each number of users and each run
//! send that many streamed requests at once and record each (`client::Exchange`). Every
//! prompt starts with a tag unique to its request, so no prefix cache helps; the tags are
//! the same for every target, so their texts can be compared. After the runs, the first
//! prompt of each size's busiest level is asked again alone (the repeat pass): at
//! temperature 0 it must give the same text. Then the target's peak RSS is read and it is
//! stopped before the next one starts.

pub mod client;
pub mod mix;
pub mod plot;
pub mod prompts;
pub mod summary;

use std::path::PathBuf;
use std::sync::Barrier;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;

use crate::launch::{local_url, Launched};
use client::{exchange, Api, Ask, Exchange};
use prompts::{fnv, Corpus, PromptSize, Sizer};

/// Where a target is.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Endpoint {
    /// A server already running at this base URL.
    Url(String),
    /// A shell command that starts a server; `{port}` in it is replaced by the race's
    /// port, or `--port PORT` is appended when it has none.
    Launch(String),
}

#[derive(Debug, Clone, Serialize)]
pub struct Target {
    pub name: String,
    pub endpoint: Endpoint,
}

impl Target {
    /// `NAME=VALUE`.
    pub fn parse(spec: &str, launch: bool) -> Result<Target, String> {
        let (name, value) = spec
            .split_once('=')
            .filter(|(n, v)| !n.trim().is_empty() && !v.trim().is_empty())
            .ok_or_else(|| format!("{spec:?}: expected NAME=VALUE"))?;
        let value = value.trim().to_string();
        Ok(Target {
            name: name.trim().to_string(),
            endpoint: if launch {
                Endpoint::Launch(value)
            } else {
                Endpoint::Url(value.trim_end_matches('/').to_string())
            },
        })
    }
}

#[derive(Debug, Clone)]
pub struct RaceConfig {
    pub targets: Vec<Target>,
    pub users: Vec<usize>,
    pub sizes: Vec<PromptSize>,
    pub runs: usize,
    pub max_tokens: usize,
    pub corpus: Corpus,
    pub api: Api,
    pub out: PathBuf,
    /// The port launched targets listen on.
    pub port: u16,
    /// The `model` field of requests; by default each target's first `/v1/models` entry.
    pub model: Option<String>,
    pub ignore_eos: bool,
    /// Sent to every target as `Authorization: Bearer KEY`.
    pub api_key: Option<String>,
    /// After the runs: users streaming while others send long prompts.
    pub mix: Option<mix::Mix>,
    /// Tokens per reply of the mix's streaming users.
    pub mix_tokens: usize,
    pub request_timeout_s: u64,
    pub ready_timeout_s: u64,
    /// The command line, for the JSON document.
    pub argv: Vec<String>,
}

/// Which pass a request belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Pass {
    Run(usize),
    /// The prompt of run 0, user 0, asked again alone after the runs.
    Repeat,
    /// A request of the mix (see [`mix`]).
    Mix,
}

/// One request of the race.
#[derive(Debug, Clone, Serialize)]
pub struct Record {
    pub target: String,
    pub size: String,
    pub users: usize,
    pub pass: Pass,
    pub user: usize,
    pub tag: String,
    /// The prompt's tokens by the target's `/tokenize` (or estimated, see the target).
    pub prompt_sized: usize,
    /// FNV-1a of the prompt text: equal prompts across targets have equal hashes.
    pub prompt_hash: String,
    /// Seconds from the start of the request's level to its sending.
    pub sent_at: f64,
    #[serde(flatten)]
    pub exchange: Exchange,
}

/// What happened to a target as a whole.
#[derive(Debug, Clone, Serialize)]
pub struct TargetReport {
    pub name: String,
    pub endpoint: Endpoint,
    pub url: String,
    pub model: Option<String>,
    /// Whether prompts were sized with the target's own tokenizer.
    pub sized_by_tokenizer: bool,
    pub peak_rss_mib: Option<f64>,
    /// Why the target could not be raced at all.
    pub error: Option<String>,
    pub warmup: Option<Exchange>,
}

/// A level of one run: its requests went out together.
#[derive(Debug, Clone, Serialize)]
pub struct Level {
    pub target: String,
    pub size: String,
    pub users: usize,
    pub run: usize,
    /// From the first request sent to the last response ended.
    pub wall_s: f64,
}

#[derive(Debug, Serialize)]
pub struct RaceResult {
    pub argv: Vec<String>,
    pub users: Vec<usize>,
    pub sizes: Vec<PromptSize>,
    pub runs: usize,
    pub max_tokens: usize,
    pub api: Api,
    pub corpus: String,
    pub session: String,
    pub targets: Vec<TargetReport>,
    pub levels: Vec<Level>,
    pub requests: Vec<Record>,
    pub mix: Option<mix::Mix>,
}

/// Races every target in turn.
pub fn run(cfg: &RaceConfig) -> Result<RaceResult, String> {
    std::fs::create_dir_all(&cfg.out).map_err(|e| format!("{}: {e}", cfg.out.display()))?;
    let session = format!(
        "{:06x}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64)
            & 0xff_ffff
    );
    let bar = ProgressBar::new(per_target_requests(cfg) * cfg.targets.len() as u64);
    bar.set_style(
        ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {pos}/{len} requests {msg}")
            .expect("valid template"),
    );
    let mut result = RaceResult {
        argv: cfg.argv.clone(),
        users: cfg.users.clone(),
        sizes: cfg.sizes.clone(),
        runs: cfg.runs,
        max_tokens: cfg.max_tokens,
        api: cfg.api,
        corpus: cfg.corpus.name.clone(),
        session: session.clone(),
        targets: Vec::new(),
        levels: Vec::new(),
        requests: Vec::new(),
        mix: cfg.mix.clone(),
    };
    for target in &cfg.targets {
        bar.set_message(target.name.clone());
        let report = race_target(cfg, target, &session, &bar, &mut result);
        result.targets.push(report);
    }
    bar.finish_and_clear();
    Ok(result)
}

fn race_target(
    cfg: &RaceConfig,
    target: &Target,
    session: &str,
    bar: &ProgressBar,
    result: &mut RaceResult,
) -> TargetReport {
    let (url, mut server) = match &target.endpoint {
        Endpoint::Url(u) => (u.clone(), None),
        Endpoint::Launch(command) => {
            let command = if command.contains("{port}") {
                command.replace("{port}", &cfg.port.to_string())
            } else {
                format!("{command} --port {}", cfg.port)
            };
            let log = cfg.out.join(format!("{}.log", file_name(&target.name)));
            (
                local_url(cfg.port, ""),
                Some(Launched::spawn_shell(&command, &log)),
            )
        }
    };
    let mut report = TargetReport {
        name: target.name.clone(),
        endpoint: target.endpoint.clone(),
        url: url.clone(),
        model: None,
        sized_by_tokenizer: false,
        peak_rss_mib: None,
        error: None,
        warmup: None,
    };
    let ready = match server.as_mut() {
        None => Ok(()),
        Some(Err(e)) => Err(e.clone()),
        Some(Ok(s)) => s.wait_ready(&url, Duration::from_secs(cfg.ready_timeout_s)),
    };
    if let Err(e) = ready {
        report.error = Some(e);
        bar.inc(per_target_requests(cfg));
        return report;
    }
    let key = cfg.api_key.as_deref();
    report.model = cfg.model.clone().or_else(|| first_model(&url, key));
    let sizer = Sizer::probe(&url, key);
    report.sized_by_tokenizer = sizer.exact();
    let model = report.model.clone();
    let ask = |prompt: String| Ask {
        base_url: url.clone(),
        api: cfg.api,
        model: model.clone(),
        prompt,
        max_tokens: cfg.max_tokens,
        ignore_eos: cfg.ignore_eos,
        timeout_s: cfg.request_timeout_s,
        api_key: cfg.api_key.clone(),
        drop_after: None,
        started: None,
    };
    let mut warm = ask(format!("[race {session} warm-up] Say hello."));
    warm.max_tokens = 8;
    let warmup = exchange(&warm);
    bar.inc(1);
    let chat = cfg.api == Api::Chat;
    let prompt_of = |key: &str, tokens: usize| {
        let tag = format!("[race {session} {key}]");
        let (text, sized) = sizer.prompt(&cfg.corpus, &tag, fnv(key), tokens, chat);
        Prompt { tag, text, sized }
    };
    for size in &cfg.sizes {
        let prompt = |key: &str| prompt_of(key, size.tokens);
        for &users in &cfg.users {
            for run in 0..cfg.runs {
                let prompts: Vec<Prompt> = (0..users)
                    .map(|user| prompt(&format!("{}/{users}u/r{run}/{user}", size.label)))
                    .collect();
                let barrier = Barrier::new(users);
                let t0 = Instant::now();
                let answers: Vec<(f64, Exchange)> = std::thread::scope(|s| {
                    let handles: Vec<_> = prompts
                        .iter()
                        .map(|p| {
                            let (a, barrier) = (ask(p.text.clone()), &barrier);
                            s.spawn(move || {
                                barrier.wait();
                                let sent = t0.elapsed().as_secs_f64();
                                let ex = exchange(&a);
                                bar.inc(1);
                                (sent, ex)
                            })
                        })
                        .collect();
                    handles
                        .into_iter()
                        .map(|h| h.join().expect("request threads do not panic"))
                        .collect()
                });
                let first = answers.iter().map(|a| a.0).fold(f64::INFINITY, f64::min);
                let last = answers
                    .iter()
                    .map(|(sent, ex)| sent + ex.t_end)
                    .fold(0.0, f64::max);
                result.levels.push(Level {
                    target: target.name.clone(),
                    size: size.label.clone(),
                    users,
                    run,
                    wall_s: last - first,
                });
                for (user, ((sent, ex), p)) in answers.into_iter().zip(prompts).enumerate() {
                    let pass = Pass::Run(run);
                    result
                        .requests
                        .push(p.record(target, size, users, pass, user, sent, ex));
                }
            }
        }
        let users = cfg.users.iter().copied().max().unwrap_or(1);
        let p = prompt(&format!("{}/{users}u/r0/0", size.label));
        let ex = exchange(&ask(p.text.clone()));
        bar.inc(1);
        result
            .requests
            .push(p.record(target, size, users, Pass::Repeat, 0, 0.0, ex));
    }
    if let Some(m) = &cfg.mix {
        let size = |user: usize| match user < m.streaming {
            true => &m.stream_size,
            false => &m.long_size,
        };
        let prompts: Vec<Prompt> = (0..m.streaming + m.long)
            .map(|user| prompt_of(&format!("mix/{user}"), size(user).tokens))
            .collect();
        let sent = mix::run(m, &|user| {
            let mut a = ask(prompts[user].text.clone());
            if user < m.streaming {
                a.max_tokens = cfg.mix_tokens;
            }
            a
        });
        bar.inc((m.streaming + m.long) as u64);
        for (s, p) in sent.into_iter().zip(prompts) {
            let (users, size) = (m.streaming + m.long, size(s.user));
            result.requests.push(p.record(
                target,
                size,
                users,
                Pass::Mix,
                s.user,
                s.at,
                s.exchange,
            ));
        }
    }
    report.warmup = Some(warmup);
    if let Some(Ok(s)) = &server {
        report.peak_rss_mib = Some(s.peak_rss_mib());
    }
    report
}

/// A request's prompt: its tag, its text, its size in the target's tokens.
struct Prompt {
    tag: String,
    text: String,
    sized: usize,
}

impl Prompt {
    #[allow(clippy::too_many_arguments)]
    fn record(
        self,
        target: &Target,
        size: &PromptSize,
        users: usize,
        pass: Pass,
        user: usize,
        sent_at: f64,
        exchange: Exchange,
    ) -> Record {
        Record {
            target: target.name.clone(),
            size: size.label.clone(),
            users,
            pass,
            user,
            prompt_hash: format!("{:016x}", fnv(&self.text)),
            tag: self.tag,
            prompt_sized: self.sized,
            sent_at,
            exchange,
        }
    }
}

/// The warm-up, every run's requests, the repeat pass and the mix.
fn per_target_requests(cfg: &RaceConfig) -> u64 {
    let mix = cfg.mix.as_ref().map_or(0, |m| m.streaming + m.long);
    (1 + cfg.sizes.len() * (cfg.users.iter().sum::<usize>() * cfg.runs + 1) + mix) as u64
}

/// The first model a server lists at `/v1/models`.
fn first_model(url: &str, api_key: Option<&str>) -> Option<String> {
    let request = minreq::get(format!("{url}/v1/models")).with_timeout(10);
    let r = client::authorized(request, api_key)
        .send()
        .ok()
        .filter(|r| r.status_code == 200)?;
    let v: serde_json::Value = serde_json::from_slice(r.as_bytes()).ok()?;
    v["data"][0]["id"].as_str().map(str::to_string)
}

/// `name` with everything but letters, digits, `-` and `.` as `_`.
pub fn file_name(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// What the race writes into its output folder.
#[derive(Serialize)]
struct Written<'a> {
    #[serde(flatten)]
    race: &'a RaceResult,
    cells: &'a [summary::Cell],
    consistency: &'a [summary::Comparison],
    mix_cells: &'a [mix::MixCell],
}

/// Writes `race.md`, `race.json` (a versioned `tandem-race` document with every request)
/// and the SVG plots into `dir`; returns the Markdown and the files written.
pub fn write(r: &RaceResult, dir: &std::path::Path) -> Result<(String, Vec<PathBuf>), String> {
    let machine = crate::Machine::here(None);
    let cells = summary::cells(r);
    let checks = summary::consistency(r);
    let mix_cells = mix::cells(r);
    let mut md = summary::markdown(r, &cells, &checks, &machine);
    if let Some(m) = &r.mix {
        md += &mix::markdown(m, &mix_cells);
    }
    let doc = crate::report::Document {
        kind: "tandem-race",
        version: 1,
        machine,
        body: Written {
            race: r,
            cells: &cells,
            consistency: &checks,
            mix_cells: &mix_cells,
        },
    };
    let io = |p: &std::path::Path, e: std::io::Error| format!("{}: {e}", p.display());
    let (md_path, json_path) = (dir.join("race.md"), dir.join("race.json"));
    std::fs::write(&md_path, &md).map_err(|e| io(&md_path, e))?;
    let json = serde_json::to_string_pretty(&doc).map_err(|e| e.to_string())?;
    std::fs::write(&json_path, json).map_err(|e| io(&json_path, e))?;
    let mut files = vec![md_path, json_path];
    files.extend(plot::plots(r, &cells, dir)?);
    Ok((md, files))
}
