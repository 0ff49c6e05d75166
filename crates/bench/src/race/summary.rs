//! From a race's records to its figures: one cell per target × prompt size × users, the
//! consistency checks, and the Markdown report.

use std::collections::BTreeMap;

use serde::Serialize;

use super::client::{Exchange, Outcome};
use super::{Pass, RaceResult, Record};
use crate::report::{fixed, mean, percentile, ratio, Table};

/// The figures of one target at one prompt size and number of users, over all runs.
/// Only requests that completed (`Outcome::Ok`) count toward speeds.
#[derive(Debug, Clone, Serialize)]
pub struct Cell {
    pub target: String,
    pub size: String,
    pub users: usize,
    pub requests: usize,
    pub ok: usize,
    /// Failed requests by outcome.
    pub failures: BTreeMap<String, usize>,
    pub first_error: Option<String>,
    pub prompt_tokens: Option<f64>,
    pub ttft_s: Option<f64>,
    pub prompt_tok_s: Option<f64>,
    pub server_prompt_tok_s: Option<f64>,
    pub decode_tok_s: Option<f64>,
    pub total_tok_s: Option<f64>,
    /// Inter-token latency p50, p90, p99 in milliseconds.
    pub itl_ms: [Option<f64>; 3],
    /// The longest gap between two output events of one request, ms.
    pub longest_gap_ms: Option<f64>,
    pub draft_acceptance: Option<f64>,
    pub cached_tokens: Option<f64>,
}

/// The formulas under every table.
pub const FORMULAS: &str = "\
- prompt tokens: the server's usage count, averaged; in parentheses those it reports served from its cache (a chat template's fixed start: every prompt begins with a tag of its own).
- TTFT: seconds from sending a request to the first event carrying output text (monotonic clock).
- prompt tok/s = prompt tokens (the server's usage count) / TTFT, per request, averaged; in parentheses the server's own `timings.prompt_per_second` where it reports one.
- decode tok/s per user = (n_out − 1) / (t_last − t_first), per request, averaged; n_out is the server's usage count of output tokens.
- total tok/s = output tokens of all completed requests of a run / (last response end − first request sent), averaged over the runs in which any request completed.
- ITL: gaps between consecutive output events of completed requests, p50 / p90 / p99 (an event may carry several tokens, e.g. accepted drafts); longest gap: the longest of them.
- failed: requests with a non-200 status, an error inside the stream, a stream without finish_reason, or no response; `memory` marks a 5xx whose body speaks of memory or a compute error. Failed requests count toward no speed.";

/// Every cell of the race, in target, size, users order.
pub fn cells(r: &RaceResult) -> Vec<Cell> {
    let mut out = Vec::new();
    for t in &r.targets {
        for size in &r.sizes {
            for &users in &r.users {
                let recs: Vec<&Record> = r
                    .requests
                    .iter()
                    .filter(|q| q.target == t.name && q.size == size.label && q.users == users)
                    .filter(|q| matches!(q.pass, Pass::Run(_)))
                    .collect();
                if !recs.is_empty() || t.error.is_none() {
                    out.push(cell(r, &t.name, &size.label, users, &recs));
                }
            }
        }
    }
    out
}

/// A request's decode speed: `(n_out − 1) / (t_last − t_first)`.
pub(super) fn decode_tok_s(e: &Exchange) -> Option<f64> {
    let span = e.t_last? - e.t_first?;
    (e.n_out() >= 2 && span > 0.0).then(|| (e.n_out() - 1) as f64 / span)
}

fn cell(r: &RaceResult, target: &str, size: &str, users: usize, recs: &[&Record]) -> Cell {
    let ok: Vec<&&Record> = recs
        .iter()
        .filter(|q| q.exchange.outcome == Outcome::Ok)
        .collect();
    let mut failures = BTreeMap::new();
    for q in recs.iter().filter(|q| q.exchange.outcome != Outcome::Ok) {
        let kind = serde_json::to_value(q.exchange.outcome)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default();
        *failures.entry(kind).or_insert(0) += 1;
    }
    let first_error = recs.iter().find_map(|q| q.exchange.error.clone());
    let prompt_n = |q: &Record| {
        q.exchange
            .prompt_tokens
            .map_or(q.prompt_sized as f64, |n| n as f64)
    };
    let with_first: Vec<(f64, f64)> = ok
        .iter()
        .filter_map(|q| q.exchange.t_first.map(|t| (prompt_n(q), t)))
        .collect();
    let decode: Vec<f64> = ok
        .iter()
        .filter_map(|q| decode_tok_s(&q.exchange))
        .collect();
    let totals: Vec<f64> = r
        .levels
        .iter()
        .filter(|l| l.target == target && l.size == size && l.users == users && l.wall_s > 0.0)
        .filter_map(|l| {
            let done: Vec<u64> = ok
                .iter()
                .filter(|q| q.pass == Pass::Run(l.run))
                .map(|q| q.exchange.n_out())
                .collect();
            (!done.is_empty()).then(|| done.iter().sum::<u64>() as f64 / l.wall_s)
        })
        .collect();
    let gaps_ms: Vec<f64> = ok
        .iter()
        .flat_map(|q| q.exchange.gaps.iter().map(|g| g * 1e3))
        .collect();
    let (drafted, accepted) = ok.iter().fold((0, 0), |(d, a), q| {
        (
            d + q.exchange.draft_n.unwrap_or(0),
            a + q.exchange.draft_accepted.unwrap_or(0),
        )
    });
    let opt_mean = |v: Vec<f64>| mean(&v);
    Cell {
        target: target.into(),
        size: size.into(),
        users,
        requests: recs.len(),
        ok: ok.len(),
        failures,
        first_error,
        prompt_tokens: opt_mean(ok.iter().map(|q| prompt_n(q)).collect()),
        ttft_s: opt_mean(with_first.iter().map(|p| p.1).collect()),
        prompt_tok_s: opt_mean(
            with_first
                .iter()
                .filter(|p| p.1 > 0.0)
                .map(|p| p.0 / p.1)
                .collect(),
        ),
        server_prompt_tok_s: opt_mean(
            ok.iter()
                .filter_map(|q| q.exchange.server_prompt_tok_s)
                .collect(),
        ),
        decode_tok_s: mean(&decode),
        total_tok_s: mean(&totals),
        itl_ms: [0.5, 0.9, 0.99].map(|p| percentile(&gaps_ms, p)),
        longest_gap_ms: gaps_ms.iter().copied().reduce(f64::max),
        draft_acceptance: (drafted > 0).then(|| accepted as f64 / drafted as f64),
        cached_tokens: opt_mean(
            ok.iter()
                .filter_map(|q| q.exchange.cached_tokens.map(|n| n as f64))
                .collect(),
        ),
    }
}

/// Where two texts first differ.
#[derive(Debug, Clone, Serialize)]
pub struct Difference {
    /// The tag of the prompt.
    pub prompt: String,
    /// Characters before the first difference.
    pub at_char: usize,
    /// Each text from a little before the difference.
    pub a: String,
    pub b: String,
}

/// Texts at temperature 0 that should be equal, compared.
#[derive(Debug, Clone, Serialize)]
pub struct Comparison {
    pub what: String,
    pub compared: usize,
    pub identical: usize,
    pub first_difference: Option<Difference>,
}

/// Characters before the first difference, `None` when equal.
pub fn first_difference(a: &str, b: &str) -> Option<usize> {
    if a == b {
        return None;
    }
    Some(a.chars().zip(b.chars()).take_while(|(x, y)| x == y).count())
}

fn excerpt(s: &str, at: usize) -> String {
    s.chars().skip(at.saturating_sub(20)).take(60).collect()
}

fn compare(what: String, pairs: &[(&Record, &Record)]) -> Comparison {
    let mut c = Comparison {
        what,
        compared: 0,
        identical: 0,
        first_difference: None,
    };
    for (a, b) in pairs {
        c.compared += 1;
        match first_difference(&a.exchange.text, &b.exchange.text) {
            None => c.identical += 1,
            Some(at) => {
                c.first_difference.get_or_insert_with(|| Difference {
                    prompt: a.tag.clone(),
                    at_char: at,
                    a: excerpt(&a.exchange.text, at),
                    b: excerpt(&b.exchange.text, at),
                });
            }
        }
    }
    c
}

/// Every pair of targets on the prompts both answered (same text of prompt), and each
/// target's repeat pass against its first answer.
pub fn consistency(r: &RaceResult) -> Vec<Comparison> {
    let ok = |q: &&Record| q.exchange.outcome == Outcome::Ok;
    let mut out = Vec::new();
    for (i, a) in r.targets.iter().enumerate() {
        for b in &r.targets[i + 1..] {
            let pairs: Vec<(&Record, &Record)> =
                r.requests
                    .iter()
                    .filter(|q| q.target == a.name && matches!(q.pass, Pass::Run(_)))
                    .filter(ok)
                    .filter_map(|qa| {
                        let qb = r.requests.iter().filter(ok).find(|qb| {
                            qb.target == b.name && qb.pass == qa.pass && qb.tag == qa.tag
                        })?;
                        (qb.prompt_hash == qa.prompt_hash).then_some((qa, qb))
                    })
                    .collect();
            out.push(compare(format!("{} vs {}", a.name, b.name), &pairs));
        }
    }
    for t in &r.targets {
        let pairs: Vec<(&Record, &Record)> =
            r.requests
                .iter()
                .filter(|q| q.target == t.name && q.pass == Pass::Repeat)
                .filter(ok)
                .filter_map(|rep| {
                    let first = r.requests.iter().filter(ok).find(|q| {
                        q.target == t.name && q.pass == Pass::Run(0) && q.tag == rep.tag
                    })?;
                    Some((first, rep))
                })
                .collect();
        out.push(compare(
            format!("{}: first answer vs asked again alone", t.name),
            &pairs,
        ));
    }
    out
}

fn failed(c: &Cell) -> String {
    let n: usize = c.failures.values().sum();
    let mut s = format!("{n}/{}", c.requests);
    if n > 0 {
        let kinds: Vec<String> = c.failures.iter().map(|(k, v)| format!("{k} {v}")).collect();
        s += &format!(" ({})", kinds.join(", "));
    }
    s
}

/// The report: per prompt size a table (rows: measure per number of users; columns:
/// targets), then memory, failures, consistency, and the formulas.
pub fn markdown(
    r: &RaceResult,
    cells: &[Cell],
    checks: &[Comparison],
    machine: &crate::Machine,
) -> String {
    let names: Vec<&str> = r.targets.iter().map(|t| t.name.as_str()).collect();
    let mut out = format!(
        "# Race: {}\n\n{} ({} cores), commit {}; {} API, replies up to {} tokens at temperature 0, {} run(s), prompts from the {} corpus, session {}.\n",
        names.join(" vs "),
        machine.cpu,
        machine.cores,
        machine.commit,
        serde_json::to_value(r.api).ok().and_then(|v| v.as_str().map(str::to_string)).unwrap_or_default(),
        r.max_tokens,
        r.runs,
        r.corpus,
        r.session,
    );
    for t in &r.targets {
        if let Some(e) = &t.error {
            out += &format!("\n**{}** could not be raced: {e}\n", t.name);
        }
    }
    let find = |t: &str, size: &str, users: usize| {
        cells
            .iter()
            .find(|c| c.target == t && c.size == size && c.users == users)
    };
    for size in &r.sizes {
        out += &format!("\n## {} prompts ({} tokens)\n\n", size.label, size.tokens);
        let mut header = vec!["measure"];
        header.extend(&names);
        let mut table = Table::new(&header);
        for &users in &r.users {
            let row = |label: &str, f: &dyn Fn(&Cell, Option<&Cell>) -> String| {
                let mut cells_row = vec![format!(
                    "{users} user{}: {label}",
                    if users == 1 { "" } else { "s" }
                )];
                for n in &names {
                    let base = find(names[0], &size.label, users);
                    cells_row.push(
                        find(n, &size.label, users)
                            .map_or("-".into(), |c| f(c, base.filter(|b| b.target != c.target))),
                    );
                }
                cells_row
            };
            let with_ratio = |v: Option<f64>, b: Option<f64>| match (v, b) {
                (Some(v), Some(b)) => format!("{v:.1} ({})", ratio(v, b)),
                (v, _) => fixed(v, 1),
            };
            table.row(&row("prompt tokens", &|c, _| match c.cached_tokens {
                Some(n) if n >= 0.5 => format!("{} ({n:.0} cached)", fixed(c.prompt_tokens, 0)),
                _ => fixed(c.prompt_tokens, 0),
            }));
            table.row(&row("TTFT s", &|c, _| fixed(c.ttft_s, 3)));
            table.row(&row("prompt tok/s", &|c, _| match c.server_prompt_tok_s {
                Some(s) => format!("{} ({s:.1})", fixed(c.prompt_tok_s, 1)),
                None => fixed(c.prompt_tok_s, 1),
            }));
            table.row(&row("decode tok/s per user", &|c, b| {
                with_ratio(c.decode_tok_s, b.and_then(|b| b.decode_tok_s))
            }));
            table.row(&row("total tok/s", &|c, b| {
                with_ratio(c.total_tok_s, b.and_then(|b| b.total_tok_s))
            }));
            table.row(&row("ITL p50/p90/p99 ms", &|c, _| {
                c.itl_ms.map(|v| fixed(v, 1)).join(" / ")
            }));
            table.row(&row("longest gap ms", &|c, _| fixed(c.longest_gap_ms, 0)));
            if cells
                .iter()
                .any(|c| c.users == users && c.draft_acceptance.is_some())
            {
                table.row(&row("draft accepted", &|c, _| {
                    c.draft_acceptance
                        .map_or("-".into(), |a| format!("{:.0}%", a * 100.0))
                }));
            }
            table.row(&row("failed", &|c, _| failed(c)));
        }
        out += &table.markdown();
    }
    out += "\nRatios in parentheses are to the first target in the same run.\n\n## Memory\n\n";
    let mut mem = Table::new(&["target", "peak RSS MiB", "prompts sized by"]);
    for t in &r.targets {
        mem.row(&[
            t.name.clone(),
            fixed(t.peak_rss_mib, 0),
            if t.sized_by_tokenizer {
                "its /tokenize"
            } else {
                "4 bytes per token (no /tokenize)"
            }
            .into(),
        ]);
    }
    out += &mem.markdown();
    let failing: Vec<&Cell> = cells.iter().filter(|c| !c.failures.is_empty()).collect();
    if !failing.is_empty() {
        out += "\n## Failures\n\n";
        for c in failing {
            out += &format!(
                "- {} / {} / {} users: {}; first error: {}\n",
                c.target,
                c.size,
                c.users,
                failed(c),
                c.first_error
                    .as_deref()
                    .unwrap_or("-")
                    .chars()
                    .take(200)
                    .collect::<String>()
            );
        }
    }
    out += "\n## Consistency at temperature 0\n\n";
    for c in checks {
        out += &format!("- {}: {}/{} identical", c.what, c.identical, c.compared);
        if let Some(d) = &c.first_difference {
            out += &format!(
                "; **differs** first in {} at character {}: {:?} vs {:?}",
                d.prompt, d.at_char, d.a, d.b
            );
        }
        out += "\n";
    }
    out += &format!("\n## Formulas\n\n{FORMULAS}\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn differences_count_characters() {
        assert_eq!(first_difference("héllo", "héllo"), None);
        assert_eq!(first_difference("héllo", "hélp"), Some(3));
        assert_eq!(first_difference("ab", "abc"), Some(2));
    }
}
