//! Speculative decoding against plain decoding, served: each arm is a server command
//! (tandem or llama-server, with or without a drafter), all launched one after the other
//! (each ready and idle before the next starts), then asked the same chat prompts at
//! temperature 0 by one user and by several at once, the arms taking turns cell by cell,
//! over several rounds. This machine's memory rate moves by a fifth from minute to minute,
//! so arms measured one after the other compared the minutes as much as the arms: each
//! ratio here is the median over rounds of the ratio within a round.
//!
//! Figures per arm: decode tok/s of each prompt alone (the server's own `timings`), draft
//! tokens and accepted ones, per prompt and number of users the total output tok/s
//! (completion tokens of all requests / wall time from the first request sent to the last
//! answer) and what a tandem policy chose meanwhile (depths, paused slots, catching up,
//! its predicted step time against the measured one, from `/metrics`), peak RSS, and the
//! answers' text, so that speculation's byte-identity with plain decoding can be checked.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::Value;

use crate::launch::{chat, local_url, Launched};
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
    /// Times each cell is measured, arms taking turns.
    pub rounds: usize,
    /// The first arm's port; the others' follow.
    pub port: u16,
    /// Where each server's stderr goes.
    pub log_dir: PathBuf,
}

#[derive(Debug, Clone, Serialize)]
pub struct Single {
    pub round: usize,
    pub prompt: String,
    pub tok_s: f64,
    pub n: u64,
    pub draft_n: u64,
    pub draft_n_accepted: u64,
    pub text: String,
}

/// One cell: `users` requests of one prompt at once.
#[derive(Debug, Clone, Serialize)]
pub struct Multi {
    pub round: usize,
    pub prompt: String,
    pub users: usize,
    pub tok_s: f64,
    pub tokens: u64,
    pub seconds: f64,
    /// A tandem server's speculation during the cell (none for other servers).
    pub policy: Option<PolicyCell>,
}

/// What a tandem server's speculation policy did during one cell, from its `/metrics`
/// before and after.
#[derive(Debug, Clone, Default, Serialize)]
pub struct PolicyCell {
    /// Slot-steps at each chosen depth (index = depth).
    pub depths: Vec<u64>,
    /// Draft tokens accepted at each position of a draft (index 0: the first drafted).
    pub accepted: Vec<u64>,
    /// Slot-steps whose drafter was paused (depth 0, behind the sequence).
    pub paused: u64,
    pub catch_up_tokens: u64,
    /// Predicted and measured seconds of the steps the policy chose depths for.
    pub predicted_s: f64,
    pub measured_s: f64,
    /// The engine's seconds by part (`tandem:step_seconds_total`): prefill, decode, verify
    /// and draft add up to the steps; sample is within the forwards'.
    pub step_s: std::collections::BTreeMap<String, f64>,
}

impl PolicyCell {
    fn slot_steps(&self) -> u64 {
        self.depths.iter().sum()
    }

    /// Share of slot-steps at depth 0, and paused.
    pub fn shares(&self) -> (f64, f64) {
        let n = self.slot_steps().max(1) as f64;
        (
            self.depths.first().copied().unwrap_or(0) as f64 / n,
            self.paused as f64 / n,
        )
    }

    /// Counter by counter, `count(self, o)` and `secs(self, o)`.
    fn combine(
        &self,
        o: &PolicyCell,
        count: impl Fn(u64, u64) -> u64,
        secs: impl Fn(f64, f64) -> f64,
    ) -> PolicyCell {
        let at = |v: &[u64], i: usize| v.get(i).copied().unwrap_or(0);
        let each = |a: &[u64], b: &[u64]| -> Vec<u64> {
            (0..a.len().max(b.len()))
                .map(|d| count(at(a, d), at(b, d)))
                .collect()
        };
        PolicyCell {
            depths: each(&self.depths, &o.depths),
            accepted: each(&self.accepted, &o.accepted),
            paused: count(self.paused, o.paused),
            catch_up_tokens: count(self.catch_up_tokens, o.catch_up_tokens),
            predicted_s: secs(self.predicted_s, o.predicted_s),
            measured_s: secs(self.measured_s, o.measured_s),
            step_s: (self.step_s.keys().chain(o.step_s.keys()))
                .map(|k| {
                    let at = |m: &std::collections::BTreeMap<String, f64>| m.get(k).copied();
                    (
                        k.clone(),
                        secs(
                            at(&self.step_s).unwrap_or(0.0),
                            at(&o.step_s).unwrap_or(0.0),
                        ),
                    )
                })
                .collect(),
        }
    }

    /// Each part's share of the steps' seconds (drafting, the forwards' rows by kind), and
    /// sampling's share within them.
    pub fn step_split(&self) -> String {
        let part = |k: &str| self.step_s.get(k).copied().unwrap_or(0.0);
        let parts = ["draft", "verify", "decode", "prefill"];
        let total: f64 = parts.iter().map(|k| part(k)).sum();
        if total <= 0.0 {
            return String::new();
        }
        let share = |k: &str| format!("{k} {:.0}%", 100.0 * part(k) / total);
        let mut cells: Vec<String> = parts.iter().map(|k| share(k)).collect();
        cells.push(format!("(sample {:.1}%)", 100.0 * part("sample") / total));
        cells.join(" ")
    }

    /// `position:rate` for every draft position some slot-step's chosen depth reached: the
    /// tokens accepted there over those slot-steps.
    pub fn acceptance(&self) -> String {
        let cells: Vec<String> = (0..self.accepted.len())
            .filter_map(|p| {
                let reached: u64 = self.depths.iter().skip(p + 1).sum();
                (reached > 0).then(|| {
                    let rate = 100.0 * self.accepted[p] as f64 / reached as f64;
                    format!("{}:{rate:.0}%", p + 1)
                })
            })
            .collect();
        cells.join(" ")
    }

    /// `depth:count` for every depth chosen.
    pub fn histogram(&self) -> String {
        let cells: Vec<String> = (self.depths.iter().enumerate())
            .filter(|(_, &n)| n > 0)
            .map(|(d, n)| format!("{d}:{n}"))
            .collect();
        cells.join(" ")
    }
}

/// The speculation counters of a tandem server's `/metrics`; `None` from other servers.
fn policy_counters(port: u16) -> Option<PolicyCell> {
    let r = minreq::get(local_url(port, "/metrics"))
        .with_timeout(30)
        .send()
        .ok()?;
    parse_policy(r.as_str().ok()?)
}

/// `N` of a metric named `{prefix}N"}`.
fn label(name: &str, prefix: &str) -> Option<usize> {
    name.strip_prefix(prefix)?.strip_suffix("\"}")?.parse().ok()
}

/// [`policy_counters`] from the text of `/metrics`.
fn parse_policy(text: &str) -> Option<PolicyCell> {
    let mut c = PolicyCell::default();
    let mut seen = false;
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some((name, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let v: f64 = value.parse().unwrap_or(0.0);
        let indexed = [
            ("tandem:spec_depth_chosen_total{depth=\"", &mut c.depths),
            (
                "vllm:spec_decode_num_accepted_tokens_per_pos{position=\"",
                &mut c.accepted,
            ),
        ];
        let mut matched = false;
        for (prefix, into) in indexed {
            if let Some(i) = label(name, prefix) {
                if into.len() <= i {
                    into.resize(i + 1, 0);
                }
                into[i] = v as u64;
                matched = true;
            }
        }
        if let Some(part) = name
            .strip_prefix("tandem:step_seconds_total{part=\"")
            .and_then(|r| r.strip_suffix("\"}"))
        {
            c.step_s.insert(part.to_string(), v);
            matched = true;
        }
        match name {
            _ if matched => {}
            "tandem:spec_paused_slot_steps_total" => c.paused = v as u64,
            "tandem:spec_catch_up_tokens_total" => c.catch_up_tokens = v as u64,
            "tandem:spec_step_predicted_seconds_total" => c.predicted_s = v,
            "tandem:spec_step_measured_seconds_total" => c.measured_s = v,
            _ => continue,
        }
        seen = true;
    }
    seen.then_some(c)
}

/// `after - before`, counter by counter.
fn since(before: &PolicyCell, after: &PolicyCell) -> PolicyCell {
    after.combine(before, u64::saturating_sub, |a, b| a - b)
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

fn field(v: &Value, path: &[&str]) -> Option<f64> {
    path.iter().try_fold(v, |v, k| v.get(*k))?.as_f64()
}

/// Launches every arm, each ready before the next starts, measures them taking turns, and
/// stops them.
pub fn run_arms(arms: &[Arm], cfg: &SpecBenchConfig) -> Result<Vec<ArmReport>, String> {
    let mut servers = Vec::new();
    for (i, arm) in arms.iter().enumerate() {
        eprintln!("bench spec: starting {}", arm.name);
        let (program, args) = arm.command.split_first().ok_or("empty command")?;
        let log = cfg
            .log_dir
            .join(format!("{}.log", arm.name.replace(' ', "_")));
        let port = cfg.port + i as u16;
        let mut args = args.to_vec();
        args.extend(["--port".to_string(), port.to_string()]);
        let mut server = Launched::spawn(program, &args, &log)?;
        server
            .wait_ready(&local_url(port, ""), Duration::from_secs(900))
            .map_err(|e| format!("{}: {e}", arm.name))?;
        chat(port, "Say hello.", 8)?;
        servers.push((server, log, port));
    }
    let mut reports: Vec<ArmReport> = arms
        .iter()
        .map(|arm| ArmReport {
            arm: arm.clone(),
            single: Vec::new(),
            multi: Vec::new(),
            peak_rss_mib: 0.0,
            cost_curves: None,
        })
        .collect();
    for round in 0..cfg.rounds {
        eprintln!("bench spec: round {} of {}", round + 1, cfg.rounds);
        for (label, message) in &cfg.prompts {
            let message = format!("(round {round}) {message}");
            for (r, (_, _, port)) in reports.iter_mut().zip(&servers) {
                r.single
                    .push(single(*port, round, label, &message, cfg.n_predict)?);
            }
        }
        for (label, message) in &cfg.prompts {
            let message = format!("(round {round}) {message}");
            for &users in &cfg.users {
                for (r, (_, _, port)) in reports.iter_mut().zip(&servers) {
                    r.multi
                        .push(cell(*port, round, label, &message, users, cfg.n_predict)?);
                }
            }
        }
    }
    for (r, (server, log, _)) in reports.iter_mut().zip(servers) {
        r.peak_rss_mib = server.peak_rss_mib();
        drop(server);
        r.cost_curves = std::fs::File::open(&log).ok().and_then(|f| {
            BufReader::new(f)
                .lines()
                .map_while(Result::ok)
                .find(|l| l.starts_with("speculation ("))
        });
    }
    Ok(reports)
}

/// One request of `message` alone, with the server's own timings.
fn single(
    port: u16,
    round: usize,
    label: &str,
    message: &str,
    n_predict: usize,
) -> Result<Single, String> {
    let v = chat(port, message, n_predict)?;
    Ok(Single {
        round,
        prompt: label.to_string(),
        tok_s: field(&v, &["timings", "predicted_per_second"]).unwrap_or(0.0),
        n: field(&v, &["usage", "completion_tokens"]).unwrap_or(0.0) as u64,
        draft_n: field(&v, &["timings", "draft_n"]).unwrap_or(0.0) as u64,
        draft_n_accepted: field(&v, &["timings", "draft_n_accepted"]).unwrap_or(0.0) as u64,
        text: v["choices"][0]["message"]["content"]
            .as_str()
            .unwrap_or("")
            .to_string(),
    })
}

/// `users` requests of `message` at once (each with its user number in front, so that no
/// answer comes from another's cached prompt), timed from the first sent to the last
/// answered.
fn cell(
    port: u16,
    round: usize,
    label: &str,
    message: &str,
    users: usize,
    n_predict: usize,
) -> Result<Multi, String> {
    let before = policy_counters(port);
    let t0 = Instant::now();
    let answers: Vec<Result<Value, String>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..users)
            .map(|u| {
                let message = format!("(user {u}) {message}");
                s.spawn(move || chat(port, &message, n_predict))
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
    let policy = before
        .zip(policy_counters(port))
        .map(|(b, a)| since(&b, &a));
    Ok(Multi {
        round,
        prompt: label.to_string(),
        users,
        tok_s: tokens as f64 / seconds,
        tokens,
        seconds,
        policy,
    })
}

/// The median of `v` (the mean of the middle two for an even count); 0 when empty.
fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => 0.0,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// The median over rounds of `x`, and its ratio to `base` in each round, in round order
/// (`None` for an arm without a baseline).
fn medians<T>(
    of: &[&T],
    base: Option<&[&T]>,
    round: impl Fn(&T) -> usize,
    x: impl Fn(&T) -> f64,
) -> (f64, Option<Vec<f64>>) {
    let ratios = base.map(|b| {
        of.iter()
            .filter_map(|m| {
                let b = b.iter().find(|b| round(b) == round(m))?;
                Some(x(m) / x(b))
            })
            .collect()
    });
    (median(of.iter().map(|m| x(m)).collect()), ratios)
}

/// `r`'s one-user runs of prompt `p`, every round.
fn singles<'a>(r: &'a ArmReport, p: &str) -> Vec<&'a Single> {
    r.single.iter().filter(|s| s.prompt == p).collect()
}

/// `r`'s cells of prompt `p` at `users`, every round.
fn cells<'a>(r: &'a ArmReport, p: &str, users: usize) -> Vec<&'a Multi> {
    r.multi
        .iter()
        .filter(|m| m.prompt == p && m.users == users)
        .collect()
}

/// The median of the rounds' ratios, and with more than one round each round's in order,
/// so that a cell's spread can be read beside it: `0.97× (0.94, 1.00)`.
fn times(r: Option<Vec<f64>>) -> String {
    match r {
        None => "-".into(),
        Some(rs) if rs.len() > 1 => {
            let each: Vec<String> = rs.iter().map(|r| format!("{r:.2}")).collect();
            format!("{:.2}× ({})", median(rs.clone()), each.join(", "))
        }
        Some(rs) => format!("{:.2}×", median(rs)),
    }
}

/// Markdown: one row per arm for one user (its ratios to its baseline), a table per
/// prompt of total tok/s by users, what the policy chose in each cell, then text identity
/// and the tandem cost curves. Figures are medians over rounds; ratios, medians of the
/// ratios within each round, each round's beside it.
pub fn markdown(reports: &[ArmReport]) -> String {
    let mut out = String::new();
    let find = |name: &Option<String>| {
        name.as_ref()
            .and_then(|n| reports.iter().find(|r| &r.arm.name == n))
    };
    let first = &reports[0];
    let prompts: Vec<&str> = first
        .single
        .iter()
        .filter(|s| s.round == 0)
        .map(|s| s.prompt.as_str())
        .collect();
    let mut header = vec!["arm (one user, server timings)".to_string()];
    for p in &prompts {
        header.extend([format!("{p} tok/s"), "× plain".into(), "accepted".into()]);
    }
    header.push("peak RSS MiB".into());
    let mut table = Table::new(&header);
    for r in reports {
        let base = find(&r.arm.baseline);
        let mut row = vec![r.arm.name.clone()];
        for p in &prompts {
            let of = singles(r, p);
            let b = base.map(|b| singles(b, p));
            let (tok_s, x) = medians(&of, b.as_deref(), |s| s.round, |s| s.tok_s);
            let (acc, n) = of
                .iter()
                .fold((0, 0), |a, s| (a.0 + s.draft_n_accepted, a.1 + s.draft_n));
            let acc = match n {
                0 => "-".into(),
                n => format!("{acc}/{n}"),
            };
            row.extend([format!("{tok_s:.1}"), times(x), acc]);
        }
        row.push(format!("{:.0}", r.peak_rss_mib));
        table.row(&row);
    }
    out += &table.markdown();
    let users: Vec<usize> = first
        .multi
        .iter()
        .filter(|m| m.round == 0 && m.prompt == prompts[0])
        .map(|m| m.users)
        .collect();
    for p in &prompts {
        out += &format!("\nTotal tok/s, {p} prompts, by users at once:\n\n");
        let mut header = vec!["users".to_string()];
        for r in reports {
            header.push(r.arm.name.clone());
            if r.arm.baseline.is_some() {
                header.push("× plain".into());
            }
        }
        let mut table = Table::new(&header);
        for &u in &users {
            let mut row = vec![u.to_string()];
            for r in reports {
                let base = find(&r.arm.baseline).map(|b| cells(b, p, u));
                let (tok_s, x) =
                    medians(&cells(r, p, u), base.as_deref(), |m| m.round, |m| m.tok_s);
                row.push(format!("{tok_s:.1}"));
                if r.arm.baseline.is_some() {
                    row.push(times(x));
                }
            }
            table.row(&row);
        }
        out += &table.markdown();
    }
    out += &policy_table(reports);
    out += "\nText at temperature 0 against the arm's baseline (one user, every round):\n";
    for r in reports {
        let Some(base) = find(&r.arm.baseline) else {
            continue;
        };
        for p in &prompts {
            let differs = singles(r, p).iter().find_map(|s| {
                let b = base
                    .single
                    .iter()
                    .find(|b| b.prompt == s.prompt && b.round == s.round)?;
                first_difference(&s.text, &b.text).map(|at| (s.round, at))
            });
            let verdict = match differs {
                None => "byte-identical".to_string(),
                Some((round, at)) => format!("differs from character {at} in round {}", round + 1),
            };
            out += &format!("- {} / {p}: {verdict}\n", r.arm.name);
        }
    }
    for r in reports {
        if let Some(c) = &r.cost_curves {
            out += &format!("\n{}: {c}\n", r.arm.name);
        }
    }
    out
}

/// The policy's choices in each cell of the arms that draft with a tandem server.
fn policy_table(reports: &[ArmReport]) -> String {
    let mut table = Table::new(&[
        "arm",
        "prompts",
        "users",
        "depth 0",
        "paused",
        "depths chosen (depth:slot-steps)",
        "accepted by position (of the slot-steps that deep)",
        "step time by part",
        "catch-up tokens",
        "measured / predicted step time",
    ]);
    let mut any = false;
    for r in reports.iter().filter(|r| r.arm.baseline.is_some()) {
        let mut seen: Vec<(&str, usize)> = Vec::new();
        for m in &r.multi {
            let key = (m.prompt.as_str(), m.users);
            if seen.contains(&key) {
                continue;
            }
            seen.push(key);
            let Some(p) = r
                .multi
                .iter()
                .filter(|o| (o.prompt.as_str(), o.users) == key)
                .filter_map(|o| o.policy.as_ref())
                .fold(None, |sum: Option<PolicyCell>, p| {
                    Some(sum.map_or(p.clone(), |s| s.combine(p, |a, b| a + b, |a, b| a + b)))
                })
            else {
                continue;
            };
            any = true;
            let (zero, paused) = p.shares();
            table.row(&[
                r.arm.name.clone(),
                m.prompt.clone(),
                m.users.to_string(),
                format!("{:.0}%", 100.0 * zero),
                format!("{:.0}%", 100.0 * paused),
                p.histogram(),
                p.acceptance(),
                p.step_split(),
                p.catch_up_tokens.to_string(),
                ratio(p.measured_s, p.predicted_s),
            ]);
        }
    }
    match any {
        true => format!(
            "\nThe policy in each cell, all rounds together:\n\n{}",
            table.markdown()
        ),
        false => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn acceptance_by_position_is_over_the_slot_steps_that_drafted_that_deep() {
        let text = "# HELP x\n\
            tandem:spec_depth_chosen_total{depth=\"0\"} 5\n\
            tandem:spec_depth_chosen_total{depth=\"2\"} 10\n\
            tandem:spec_depth_chosen_total{depth=\"3\"} 5\n\
            vllm:spec_decode_num_accepted_tokens_per_pos{position=\"0\"} 12\n\
            vllm:spec_decode_num_accepted_tokens_per_pos{position=\"1\"} 6\n\
            vllm:spec_decode_num_accepted_tokens_per_pos{position=\"2\"} 1\n\
            tandem:spec_paused_slot_steps_total 2\n\
            tandem:step_seconds_total{part=\"draft\"} 1\n\
            tandem:step_seconds_total{part=\"verify\"} 2\n\
            tandem:step_seconds_total{part=\"decode\"} 6.5\n\
            tandem:step_seconds_total{part=\"prefill\"} 0.5\n\
            tandem:step_seconds_total{part=\"sample\"} 0.25\n";
        let c = parse_policy(text).unwrap();
        assert_eq!(
            (c.depths.clone(), c.accepted.clone(), c.paused),
            (vec![5, 0, 10, 5], vec![12, 6, 1], 2)
        );
        assert_eq!(c.acceptance(), "1:80% 2:40% 3:20%");
        let split = "draft 10% verify 20% decode 65% prefill 5% (sample 2.5%)";
        assert_eq!(c.step_split(), split);
        let twice = c.combine(&c, |a, b| a + b, |a, b| a + b);
        assert_eq!(twice.acceptance(), c.acceptance());
        assert_eq!(since(&c, &twice).accepted, c.accepted);
        assert_eq!(since(&c, &twice).step_split(), split);
        assert!(parse_policy("llamacpp:prompt_tokens_total 5\n").is_none());
    }

    #[test]
    fn a_ratio_shows_its_median_and_every_rounds() {
        assert_eq!(times(None), "-");
        assert_eq!(times(Some(vec![0.874])), "0.87×");
        assert_eq!(
            times(Some(vec![0.874, 0.96, 1.045, 1.037])),
            "1.00× (0.87, 0.96, 1.04, 1.04)"
        );
    }
}
