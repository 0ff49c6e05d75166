//! `tandem bench quality`: what a long context costs in quality, against llama.cpp on the
//! same model in the same run. Code-continuation NLL: `tandem perplexity` and
//! llama-perplexity over the same file, chunk sizes and KV types. Needles: every server
//! (tandem in one process or split across two, llama-server) launched in turn with one slot
//! and asked the same [`needle::NeedleCase`]s at temperature 0.

pub mod needle;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::Value;

use crate::launch::{chat, local_url, Launched};
use crate::report::Table;
use needle::{recalled, NeedleCase};

/// The arm name of llama.cpp's tools in every table.
pub const PEER: &str = "llama.cpp";

/// One server configuration the needles are asked of.
#[derive(Debug, Clone, Serialize)]
pub struct ServerArm {
    pub name: String,
    pub kv: String,
    /// The server's command line, without `--port`.
    pub command: Vec<String>,
    /// A split's first stage, started before the server and ready when its log says
    /// `listening on`.
    pub stage_box: Option<Vec<String>>,
}

/// One server's answer to one needle case.
#[derive(Debug, Clone, Serialize)]
pub struct NeedleAnswer {
    pub arm: String,
    pub kv: String,
    #[serde(flatten)]
    pub case: NeedleCase,
    /// Prompt tokens the server counted (chat template included).
    pub prompt_tokens: Option<u64>,
    pub answer: String,
    pub recalled: bool,
}

/// A code-continuation NLL: the mean negative log-likelihood per token (the log of the
/// perplexity) over the file's chunks of `ctx` tokens.
#[derive(Debug, Clone, Serialize)]
pub struct NllPoint {
    pub arm: String,
    pub kv: String,
    pub ctx: usize,
    pub ppl: f64,
    pub nll: f64,
}

fn run_tool(program: &Path, args: &[String]) -> Result<String, String> {
    let out = Command::new(program)
        .args(args)
        .output()
        .map_err(|e| format!("cannot run {}: {e}", program.display()))?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    match out.status.success() {
        true => Ok(text),
        false => Err(format!(
            "{} exited with {}: {}",
            program.display(),
            out.status,
            text.lines()
                .rev()
                .find(|l| !l.trim().is_empty())
                .unwrap_or("")
        )),
    }
}

/// One NLL measurement: `file` scored by `model` in chunks of `ctx` (at most `chunks` of
/// them) with a KV cache of type `kv`.
pub struct NllRun<'a> {
    pub model: &'a Path,
    pub file: &'a Path,
    pub kv: &'a str,
    pub ctx: usize,
    pub chunks: Option<usize>,
}

/// The arguments both perplexity tools take alike (llama-perplexity's `-ctv` aside).
fn ppl_args(run: &NllRun) -> Vec<String> {
    let NllRun {
        model,
        file,
        kv,
        ctx,
        chunks,
    } = *run;
    let mut args: Vec<String> = [
        "-m",
        &model.display().to_string(),
        "-f",
        &file.display().to_string(),
    ]
    .map(String::from)
    .to_vec();
    args.extend(["-c".into(), ctx.to_string(), "-ctk".into(), kv.into()]);
    if let Some(n) = chunks {
        args.extend(["--chunks".into(), n.to_string()]);
    }
    args
}

fn point(arm: &str, run: &NllRun, ppl: f64) -> NllPoint {
    NllPoint {
        arm: arm.into(),
        kv: run.kv.into(),
        ctx: run.ctx,
        ppl,
        nll: ppl.ln(),
    }
}

/// `tandem perplexity --json` (the binary `tandem`, with `extra` flags such as threads and
/// device).
pub fn tandem_nll(tandem: &Path, run: &NllRun, extra: &[String]) -> Result<NllPoint, String> {
    let mut args = vec!["perplexity".to_string()];
    args.extend(ppl_args(run));
    args.extend(extra.iter().cloned());
    args.push("--json".into());
    let out = run_tool(tandem, &args)?;
    let ppl = out
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find_map(|v| v.get("ppl")?.as_f64())
        .ok_or("tandem perplexity printed no ppl")?;
    Ok(point("tandem", run, ppl))
}

/// llama-perplexity with flash attention on (llama.cpp's quantized V cache needs it), a
/// batch of the whole chunk, and `extra` flags; its `Final estimate: PPL = X`.
pub fn llama_nll(tool: &Path, run: &NllRun, extra: &[String]) -> Result<NllPoint, String> {
    let mut args = ppl_args(run);
    let (kv, batch) = (run.kv.to_string(), run.ctx.max(512).to_string());
    args.extend([
        "-ctv".into(),
        kv,
        "-fa".into(),
        "on".into(),
        "-b".into(),
        batch,
    ]);
    args.extend(extra.iter().cloned());
    let out = run_tool(tool, &args)?;
    let ppl = out
        .lines()
        .find_map(|l| l.split("Final estimate: PPL = ").nth(1))
        .and_then(|rest| rest.split_whitespace().next()?.parse::<f64>().ok())
        .ok_or_else(|| format!("{} printed no final estimate", tool.display()))?;
    Ok(point(PEER, run, ppl))
}

/// Waits until `log` has a line containing `marker`.
fn wait_for_log(
    log: &Path,
    marker: &str,
    stage: &mut Launched,
    timeout: Duration,
) -> Result<(), String> {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if std::fs::read_to_string(log).is_ok_and(|s| s.contains(marker)) {
            return Ok(());
        }
        if !stage.running() {
            return Err(format!(
                "it exited before it said '{marker}' (see {})",
                log.display()
            ));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    Err(format!(
        "it did not say '{marker}' within {} s",
        timeout.as_secs()
    ))
}

/// One chat request at temperature 0: the answer's text and the prompt tokens counted.
fn ask(port: u16, message: &str, answer_tokens: usize) -> Result<(String, Option<u64>), String> {
    let v = chat(port, message, answer_tokens)?;
    let text = v["choices"][0]["message"]["content"]
        .as_str()
        .ok_or("the response has no choices[0].message.content")?
        .to_string();
    Ok((text, v["usage"]["prompt_tokens"].as_u64()))
}

/// Starts `arm` (its box first) on `port`, asks every case (by length, the deepest needle of a
/// length first, so a server's prefix cache may keep the filler before the next needle), and
/// stops it. Answers come back in the cases' order. Logs go to `log_dir/<arm>-<kv>*.log`.
pub fn ask_needles(
    arm: &ServerArm,
    cases: &[NeedleCase],
    port: u16,
    box_port: u16,
    log_dir: &Path,
    answer_tokens: usize,
) -> Result<Vec<NeedleAnswer>, String> {
    let stem = format!("{}-{}", arm.name.replace([' ', '(', ')'], "_"), arm.kv);
    let _stage = match &arm.stage_box {
        Some(cmd) => {
            let (program, args) = cmd.split_first().ok_or("empty box command")?;
            let mut args = args.to_vec();
            args.extend(["--listen".into(), format!("127.0.0.1:{box_port}")]);
            let log = log_dir.join(format!("{stem}-box.log"));
            let mut stage = Launched::spawn(program, &args, &log)?;
            wait_for_log(&log, "listening on", &mut stage, Duration::from_secs(600))
                .map_err(|e| format!("{} box: {e}", arm.name))?;
            Some(stage)
        }
        None => None,
    };
    let (program, args) = arm.command.split_first().ok_or("empty server command")?;
    let mut args = args.to_vec();
    if arm.stage_box.is_some() {
        args.extend(["--box".into(), format!("127.0.0.1:{box_port}")]);
    }
    args.extend(["--port".into(), port.to_string()]);
    let mut server = Launched::spawn(program, &args, &log_dir.join(format!("{stem}.log")))?;
    server
        .wait_ready(&local_url(port, ""), Duration::from_secs(900))
        .map_err(|e| format!("{} ({}): {e}", arm.name, arm.kv))?;
    let mut order: Vec<usize> = (0..cases.len()).collect();
    order.sort_by_key(|&i| (cases[i].length, std::cmp::Reverse(cases[i].depth)));
    let mut answers: Vec<Option<NeedleAnswer>> = vec![None; cases.len()];
    for i in order {
        let c = &cases[i];
        let (answer, prompt_tokens) = ask(port, &c.message, answer_tokens).map_err(|e| {
            format!(
                "{} ({}), {} tokens at {}%: {e}",
                arm.name, arm.kv, c.length, c.depth
            )
        })?;
        let hit = recalled(&answer, &c.secret);
        eprintln!(
            "bench quality: {} ({}) {} tokens at {:>3}%: {}",
            arm.name,
            arm.kv,
            c.length,
            c.depth,
            if hit { "recalled" } else { "missed" }
        );
        answers[i] = Some(NeedleAnswer {
            arm: arm.name.clone(),
            kv: arm.kv.clone(),
            case: c.clone(),
            prompt_tokens,
            answer,
            recalled: hit,
        });
    }
    Ok(answers.into_iter().flatten().collect())
}

/// `hits/n` of the answers that pass `keep`.
fn recall_cell(answers: &[NeedleAnswer], keep: impl Fn(&NeedleAnswer) -> bool) -> String {
    let (mut hit, mut n) = (0, 0);
    for a in answers.iter().filter(|a| keep(a)) {
        n += 1;
        hit += a.recalled as usize;
    }
    match n {
        0 => "-".into(),
        _ => format!("{hit}/{n}"),
    }
}

/// The NLL table (tandem beside llama.cpp per KV type and chunk size) and, per KV type, the
/// needles recalled per length and depth by every arm, with a total row.
pub fn markdown(nll: &[NllPoint], answers: &[NeedleAnswer]) -> String {
    let mut out = String::new();
    if !nll.is_empty() {
        let mut cells: BTreeMap<(String, usize), [Option<f64>; 2]> = BTreeMap::new();
        for p in nll {
            let slot = cells.entry((p.kv.clone(), p.ctx)).or_default();
            slot[(p.arm == PEER) as usize] = Some(p.nll);
        }
        let mut t = Table::new(&[
            "KV",
            "ctx",
            "tandem NLL",
            "llama.cpp NLL",
            "tandem − llama.cpp",
        ]);
        for ((kv, ctx), [ours, theirs]) in cells {
            let f = |v: Option<f64>| v.map_or("-".into(), |v| format!("{v:.4}"));
            let diff = match (ours, theirs) {
                (Some(a), Some(b)) => format!("{:+.2}%", 100.0 * (a - b) / b),
                _ => "-".into(),
            };
            t.row(&[kv, ctx.to_string(), f(ours), f(theirs), diff]);
        }
        out += "Code-continuation NLL (nats per token; lower is better):\n\n";
        out += &t.markdown();
    }
    let mut kvs: Vec<&str> = answers.iter().map(|a| a.kv.as_str()).collect();
    kvs.dedup();
    kvs.sort();
    kvs.dedup();
    for kv in kvs {
        let of_kv: Vec<&NeedleAnswer> = answers.iter().filter(|a| a.kv == kv).collect();
        let mut arms: Vec<&str> = Vec::new();
        let mut cells: Vec<(usize, u32)> = Vec::new();
        for a in &of_kv {
            if !arms.contains(&a.arm.as_str()) {
                arms.push(&a.arm);
            }
            if !cells.contains(&(a.case.length, a.case.depth)) {
                cells.push((a.case.length, a.case.depth));
            }
        }
        let mut header = vec!["length", "depth"];
        header.extend(arms.iter().copied());
        let mut t = Table::new(&header);
        let owned: Vec<NeedleAnswer> = of_kv.iter().map(|a| (*a).clone()).collect();
        for (length, depth) in cells {
            let mut row = vec![length.to_string(), format!("{depth}%")];
            for arm in &arms {
                row.push(recall_cell(&owned, |a| {
                    a.arm == *arm && a.case.length == length && a.case.depth == depth
                }));
            }
            t.row(&row);
        }
        let mut total = vec!["all".to_string(), String::new()];
        total.extend(
            arms.iter()
                .map(|arm| recall_cell(&owned, |a| a.arm == *arm)),
        );
        t.row(&total);
        out += &format!("\nNeedles recalled, KV {kv}:\n\n{}", t.markdown());
    }
    out
}
