//! `--mix`: users streaming answers to short prompts while others send long prompts, as
//! a chat service sees them: how long the streams freeze while the long prompts are read,
//! and how long the long prompts wait for their first token.
//!
//! The streaming users' requests go out together; once every one of them has its first
//! token, the long prompts go out together. Each stream's worst gap is the longest wait
//! between two of its output events.

use std::str::FromStr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use serde::Serialize;

use super::client::{exchange, Ask, Exchange, Outcome};
use super::prompts::PromptSize;
use super::summary::decode_tok_s;
use super::{Pass, RaceResult, Record};
use crate::report::{fixed, mean, percentile, Table};

/// `S x SIZE + L x SIZE`: `S` users streaming replies to prompts of the first size while
/// `L` users send prompts of the second.
#[derive(Debug, Clone, Serialize)]
pub struct Mix {
    pub streaming: usize,
    pub stream_size: PromptSize,
    pub long: usize,
    pub long_size: PromptSize,
}

impl FromStr for Mix {
    type Err = String;

    /// `2x64+2x4k`.
    fn from_str(s: &str) -> Result<Mix, String> {
        let bad = || format!("--mix {s:?}: expected USERSxSIZE+USERSxSIZE, e.g. 2xshort+2x4k");
        let (a, b) = s.split_once('+').ok_or_else(bad)?;
        let side = |t: &str| -> Result<(usize, PromptSize), String> {
            let (n, size) = t.trim().split_once('x').ok_or_else(bad)?;
            let n: usize = n.trim().parse().map_err(|_| bad())?;
            if n == 0 {
                return Err(bad());
            }
            Ok((n, size.parse()?))
        };
        let ((streaming, stream_size), (long, long_size)) = (side(a)?, side(b)?);
        Ok(Mix {
            streaming,
            stream_size,
            long,
            long_size,
        })
    }
}

/// One request of the mix: which user, when it was sent (seconds from the start of the
/// mix), what came back.
pub(super) struct Sent {
    pub user: usize,
    pub at: f64,
    pub exchange: Exchange,
}

/// Runs the mix: `ask(user)` is the request of user `user` (the first `mix.streaming`
/// stream, the rest send long prompts).
pub(super) fn run(mix: &Mix, ask: &dyn Fn(usize) -> Ask) -> Vec<Sent> {
    let started = Arc::new(AtomicUsize::new(0));
    let t0 = Instant::now();
    let barrier = Barrier::new(mix.streaming);
    std::thread::scope(|s| {
        let streams: Vec<_> = (0..mix.streaming)
            .map(|user| {
                let mut a = ask(user);
                a.started = Some(started.clone());
                let barrier = &barrier;
                s.spawn(move || {
                    barrier.wait();
                    send(&a, user, t0)
                })
            })
            .collect();
        while started.load(Ordering::Acquire) < mix.streaming {
            std::thread::sleep(Duration::from_millis(5));
        }
        let long: Vec<_> = (mix.streaming..mix.streaming + mix.long)
            .map(|user| {
                let a = ask(user);
                s.spawn(move || send(&a, user, t0))
            })
            .collect();
        streams
            .into_iter()
            .chain(long)
            .map(|h| h.join().expect("request threads do not panic"))
            .collect()
    })
}

fn send(a: &Ask, user: usize, t0: Instant) -> Sent {
    let at = t0.elapsed().as_secs_f64();
    Sent {
        user,
        at,
        exchange: exchange(a),
    }
}

/// A target's figures in the mix.
#[derive(Debug, Clone, Serialize)]
pub struct MixCell {
    pub target: String,
    /// The streams' longest gap between two output events, ms.
    pub worst_gap_ms: Option<f64>,
    /// The streams' inter-token latency p50 and p99, ms.
    pub stream_itl_ms: [Option<f64>; 2],
    pub stream_decode_tok_s: Option<f64>,
    pub long_ttft_s: Option<f64>,
    pub long_prompt_tokens: Option<f64>,
    pub failed: usize,
}

/// The mix's figures of every target that ran it.
pub fn cells(r: &RaceResult) -> Vec<MixCell> {
    let Some(mix) = &r.mix else {
        return Vec::new();
    };
    r.targets
        .iter()
        .map(|t| {
            let recs: Vec<&Record> = r
                .requests
                .iter()
                .filter(|q| q.target == t.name && q.pass == Pass::Mix)
                .collect();
            let ok = |q: &&&Record| q.exchange.outcome == Outcome::Ok;
            let (streams, long): (Vec<&Record>, Vec<&Record>) =
                recs.iter().filter(ok).partition(|q| q.user < mix.streaming);
            let gaps: Vec<f64> = streams
                .iter()
                .flat_map(|q| q.exchange.gaps.iter().map(|g| g * 1e3))
                .collect();
            let decode: Vec<f64> = streams
                .iter()
                .filter_map(|q| decode_tok_s(&q.exchange))
                .collect();
            MixCell {
                target: t.name.clone(),
                worst_gap_ms: gaps.iter().copied().reduce(f64::max),
                stream_itl_ms: [0.5, 0.99].map(|p| percentile(&gaps, p)),
                stream_decode_tok_s: mean(&decode),
                long_ttft_s: mean(
                    &long
                        .iter()
                        .filter_map(|q| q.exchange.t_first)
                        .collect::<Vec<_>>(),
                ),
                long_prompt_tokens: mean(
                    &long
                        .iter()
                        .filter_map(|q| q.exchange.prompt_tokens.map(|n| n as f64))
                        .collect::<Vec<_>>(),
                ),
                failed: recs.len() - streams.len() - long.len(),
            }
        })
        .collect()
}

/// The mix's section of race.md.
pub fn markdown(mix: &Mix, cells: &[MixCell]) -> String {
    let mut t = Table::new(&[
        "target",
        "streams' worst gap ms",
        "streams' ITL p50 / p99 ms",
        "streams' decode tok/s",
        "long prompts' TTFT s",
        "long prompt tokens",
        "failed",
    ]);
    for c in cells {
        t.row(&[
            c.target.clone(),
            fixed(c.worst_gap_ms, 0),
            c.stream_itl_ms.map(|v| fixed(v, 1)).join(" / "),
            fixed(c.stream_decode_tok_s, 1),
            fixed(c.long_ttft_s, 2),
            fixed(c.long_prompt_tokens, 0),
            c.failed.to_string(),
        ]);
    }
    format!(
        "\n## Mix: {} users streaming ({}-token prompts) while {} send {}-token prompts\n\n{}",
        mix.streaming,
        mix.stream_size.tokens,
        mix.long,
        mix.long_size.tokens,
        t.markdown()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mix_is_two_groups_of_users_and_sizes() {
        let m: Mix = "2xshort+3x4k".parse().unwrap();
        assert_eq!((m.streaming, m.stream_size.tokens), (2, 64));
        assert_eq!((m.long, m.long_size.tokens), (3, 4096));
        for bad in ["2x64", "0x64+1x4k", "2x64+x4k", "two x64+1x4k"] {
            assert!(bad.parse::<Mix>().is_err(), "{bad}");
        }
    }
}
