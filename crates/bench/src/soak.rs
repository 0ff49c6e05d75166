//! `tandem bench soak`: a launched server under users that never stop, some of whom hang up
//! mid-answer, for a long time. What must hold: its resident memory at the end is that after
//! warm-up (within a few percent), no request fails but those dropped on purpose, and
//! afterwards every slot is idle.
//!
//! Each user loops: a streamed chat request at temperature 0 with a prompt of 16..512
//! tokens cut from the corpus behind a unique tag, or (one time in three) its previous
//! prompt continued, like a resumed conversation; with probability `disconnect` the user
//! hangs up after a few output events. RSS (VmRSS) is sampled every `sample_s` seconds.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::launch::{local_url, Launched};
use crate::race::client::{exchange, Api, Ask, Outcome};
use crate::race::prompts::{fnv, Corpus, Sizer};

#[derive(Debug, Clone)]
pub struct SoakConfig {
    /// The server command line (`{port}` or an appended `--port`).
    pub launch: String,
    pub port: u16,
    pub users: usize,
    pub warmup_s: f64,
    pub duration_s: f64,
    /// Share of requests the client hangs up on.
    pub disconnect: f64,
    pub max_tokens: usize,
    pub sample_s: f64,
    pub log: std::path::PathBuf,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct Tally {
    pub completed: u64,
    pub dropped: u64,
    pub failed: u64,
    pub output_tokens: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct SoakReport {
    pub users: usize,
    pub duration_s: f64,
    /// `(seconds since start, VmRSS MiB)`.
    pub rss: Vec<(f64, f64)>,
    pub rss_after_warmup_mib: f64,
    pub rss_end_mib: f64,
    pub rss_peak_mib: f64,
    /// End over after-warm-up.
    pub rss_growth: f64,
    pub tally: Tally,
    /// The first errors of unintended failures.
    pub errors: Vec<String>,
    /// Whether /slots showed every slot idle after the load stopped.
    pub slots_idle_after: bool,
    pub healthy_after: bool,
}

/// xorshift64 for the users' choices.
fn next(s: &mut u64) -> u64 {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    *s
}

fn slots_idle(url: &str) -> bool {
    let Ok(r) = minreq::get(format!("{url}/slots")).with_timeout(10).send() else {
        return false;
    };
    serde_json::from_slice::<serde_json::Value>(r.as_bytes())
        .ok()
        .and_then(|v| {
            v.as_array()
                .map(|a| a.iter().all(|s| s["is_processing"] == false))
        })
        .unwrap_or(false)
}

pub fn run(cfg: &SoakConfig) -> Result<SoakReport, String> {
    let command = if cfg.launch.contains("{port}") {
        cfg.launch.replace("{port}", &cfg.port.to_string())
    } else {
        format!("{} --port {}", cfg.launch, cfg.port)
    };
    let mut server = Launched::spawn_shell(&command, &cfg.log)?;
    let url = local_url(cfg.port, "");
    server.wait_ready(&url, Duration::from_secs(600))?;
    let sizer = Sizer::probe(&url, None);
    let corpus = Corpus::built_in();
    let stop = AtomicBool::new(false);
    let tally = Mutex::new(Tally::default());
    let errors = Mutex::new(Vec::<String>::new());
    let t0 = Instant::now();
    let mut rss = Vec::new();
    let mut rss_after_warmup = None;
    std::thread::scope(|s| {
        for user in 0..cfg.users {
            let (stop, tally, errors, sizer, corpus, url) =
                (&stop, &tally, &errors, &sizer, &corpus, &url);
            s.spawn(move || {
                let mut rng = fnv(&format!("user {user}")) | 1;
                let mut previous: Option<String> = None;
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    n += 1;
                    let tag = format!("[soak {user}/{n}]");
                    let size = 16 + (next(&mut rng) % 497) as usize;
                    let seed = next(&mut rng);
                    let (fresh, _) = sizer.prompt(corpus, &tag, seed, size, true);
                    let prompt = match previous.take() {
                        Some(p) if p.len() < 4000 && next(&mut rng).is_multiple_of(3) => {
                            format!("{p}\n{fresh}")
                        }
                        _ => fresh,
                    };
                    let hang_up = (next(&mut rng) % 10_000) as f64 / 10_000.0 < cfg.disconnect;
                    let ask = Ask {
                        base_url: url.clone(),
                        api: Api::Chat,
                        model: None,
                        prompt: prompt.clone(),
                        max_tokens: cfg.max_tokens,
                        ignore_eos: false,
                        timeout_s: 600,
                        api_key: None,
                        drop_after: hang_up.then(|| 1 + (next(&mut rng) % 8) as usize),
                        started: None,
                    };
                    let ex = exchange(&ask);
                    let mut t = tally.lock().expect("tally");
                    match ex.outcome {
                        Outcome::Ok => {
                            t.completed += 1;
                            t.output_tokens += ex.n_out();
                            previous = Some(prompt);
                        }
                        Outcome::Dropped => t.dropped += 1,
                        _ => {
                            t.failed += 1;
                            let mut e = errors.lock().expect("errors");
                            if e.len() < 10 {
                                e.push(format!(
                                    "{:?}: {}",
                                    ex.outcome,
                                    ex.error.unwrap_or_default()
                                ));
                            }
                        }
                    }
                }
            });
        }
        let end = cfg.warmup_s + cfg.duration_s;
        loop {
            let now = t0.elapsed().as_secs_f64();
            rss.push((now, server.rss_mib()));
            if rss_after_warmup.is_none() && now >= cfg.warmup_s {
                rss_after_warmup = Some(server.rss_mib());
            }
            if now >= end {
                break;
            }
            std::thread::sleep(Duration::from_secs_f64(
                cfg.sample_s.min(end - now).max(0.05),
            ));
        }
        stop.store(true, Ordering::Relaxed);
    });
    let rss_end = server.rss_mib();
    std::thread::sleep(Duration::from_secs(1));
    let slots_idle_after = slots_idle(&url);
    let healthy_after = crate::launch::health_ok(&url);
    let after = rss_after_warmup.unwrap_or(rss_end);
    let report = SoakReport {
        users: cfg.users,
        duration_s: t0.elapsed().as_secs_f64(),
        rss_peak_mib: server.peak_rss_mib(),
        rss,
        rss_after_warmup_mib: after,
        rss_end_mib: rss_end,
        rss_growth: rss_end / after,
        tally: tally.into_inner().expect("tally"),
        errors: errors.into_inner().expect("errors"),
        slots_idle_after,
        healthy_after,
    };
    drop(server);
    Ok(report)
}

/// The soak's verdict and figures as Markdown.
pub fn markdown(r: &SoakReport) -> String {
    let t = &r.tally;
    let mut out = format!(
        "soak: {} users for {:.0} s: {} completed ({} output tokens), {} dropped on purpose, {} failed\n",
        r.users, r.duration_s, t.completed, t.output_tokens, t.dropped, t.failed
    );
    out += &format!(
        "RSS after warm-up {:.1} MiB, at the end {:.1} MiB ({:+.2}%), peak {:.1} MiB\n",
        r.rss_after_warmup_mib,
        r.rss_end_mib,
        (r.rss_growth - 1.0) * 100.0,
        r.rss_peak_mib
    );
    out += &format!(
        "after the load: every slot idle: {}, /health 200: {}\n",
        r.slots_idle_after, r.healthy_after
    );
    for e in &r.errors {
        out += &format!("error: {e}\n");
    }
    out
}
