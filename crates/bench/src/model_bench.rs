//! `tandem bench model`: prompt processing, generation, batched decode and the cost of
//! verifying k tokens in one forward, like llama-bench and llama-batched-bench.

use std::sync::Arc;
use std::time::Instant;

use engine::{ContextConfig, Executor, Outputs};
use kv::SeqKv;
use model::Model;
use serde::Serialize;

use crate::{Machine, Result};

/// What to measure.
#[derive(Debug, Clone)]
pub struct ModelBenchConfig {
    /// Prompt length for the prompt-processing test (0: skip).
    pub pp: usize,
    /// Tokens generated one at a time (0: skip).
    pub tg: usize,
    /// Sequences decoding together, one row each per forward.
    pub batch: Vec<usize>,
    /// New tokens of one sequence in one forward.
    pub verify: Vec<usize>,
    pub reps: usize,
    pub context: ContextConfig,
}

#[derive(Debug, Clone, Serialize)]
pub struct BatchedPoint {
    pub batch: usize,
    /// Tokens per second over all sequences.
    pub tok_s: f64,
    /// `tok_s` over batch 1's.
    pub ratio: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct VerifyPoint {
    pub k: usize,
    /// Milliseconds of one forward over `k` new tokens.
    pub ms: f64,
    /// Over k = 1's.
    pub ratio: f64,
    /// Mixtures of experts: experts streamed per block (those any of the k rows chose).
    pub experts_per_block: Option<f64>,
}

/// One kind of op's share of a decode step, on a device that times its ops.
#[derive(Debug, Clone, Serialize)]
pub struct OpPoint {
    pub op: String,
    pub calls_per_token: f64,
    pub ms_per_token: f64,
    /// Weight bytes it streamed over its time, in GB/s (0 where not counted).
    pub gb_s: f64,
}

/// Decode tokens timed op by op (after tg, on a device that can).
pub const PROFILED_TOKENS: usize = 16;

/// What tg's decode streamed, against what the machine streams.
#[derive(Debug, Clone, Serialize)]
pub struct DecodeBandwidth {
    /// Weight bytes one decode step streams (`probe::decode_weight_bytes`).
    pub weight_bytes_per_token: u64,
    /// Those bytes times tg's tokens per second, in GB/s.
    pub gb_s: f64,
    /// The machine's streaming-read bandwidth with the same threads (`probe::read_bandwidth`),
    /// measured just before each tg repetition (their mean): the memory's rate drifts on a
    /// shared machine, so each repetition is set against its own moment.
    pub probe_gb_s: f64,
    /// The mean over tg's repetitions of their GB/s over the probe just before them.
    pub share: f64,
    /// Whether the probe was the device's own kernel (a GPU's memory), not the host's
    /// threads.
    pub device_probe: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct ModelBenchReport {
    pub model: String,
    pub pp: usize,
    pub tg: usize,
    pub pp_tok_s: f64,
    pub tg_tok_s: f64,
    /// Decode against the memory's limit (with a tg test).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decode: Option<DecodeBandwidth>,
    pub batched: Vec<BatchedPoint>,
    pub verify: Vec<VerifyPoint>,
    /// Decode op by op, where the device times its ops (the GPU's).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub ops: Vec<OpPoint>,
    pub machine: Machine,
}

/// Context before the measured tokens of the batched and verify tests.
pub const PRIOR: usize = 128;
/// Decode steps per batched measurement.
pub const BATCH_STEPS: usize = 32;

/// Deterministic token ids spread over the vocabulary (llama-bench also uses arbitrary ids).
pub fn tokens(n: usize, n_vocab: usize, seed: u64) -> Vec<u32> {
    let mut s = seed.wrapping_mul(0x9E3779B97F4A7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s % n_vocab as u64) as u32
        })
        .collect()
}

fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len().max(1) as f64
}

/// The context a configuration needs.
pub fn context_for(cfg: &ModelBenchConfig, base: ContextConfig) -> ContextConfig {
    let max_batch = cfg.batch.iter().copied().max().unwrap_or(1);
    let max_k = cfg.verify.iter().copied().max().unwrap_or(1);
    ContextConfig {
        n_ctx: (cfg.pp + 1)
            .max(cfg.tg + 1)
            .max(max_batch * (PRIOR + BATCH_STEPS + 1))
            .max(PRIOR + max_k + 1),
        n_ubatch: cfg.pp.max(max_batch).max(max_k).max(PRIOR),
        n_seq: max_batch,
        ..base
    }
}

pub fn run(model: Arc<Model>, name: &str, cfg: &ModelBenchConfig) -> Result<ModelBenchReport> {
    let nv = model.hparams.n_vocab;
    let weights_of = model.clone();
    let mut ctx = Executor::new(model, cfg.context)?;
    let reps = cfg.reps.max(1);
    let mut ignore = |_: usize, _: &[f32]| {};
    let mut drop_logits = |_: usize, _: &mut [f32]| {};

    let warm = tokens(8, nv, 99);
    let mut s = SeqKv::default();
    ctx.eval(&mut s, &warm, Outputs::Last, &mut ignore)?;
    ctx.release(&mut s);

    let mut pp = Vec::new();
    for r in 0..reps.min(if cfg.pp > 0 { reps } else { 0 }) {
        let prompt = tokens(cfg.pp, nv, r as u64 + 1);
        let mut s = SeqKv::default();
        let t = Instant::now();
        ctx.eval(&mut s, &prompt, Outputs::Last, &mut ignore)?;
        pp.push(cfg.pp as f64 / t.elapsed().as_secs_f64());
        ctx.release(&mut s);
    }

    let mut tg = Vec::new();
    let mut probes = Vec::new();
    let mut device_probe = false;
    for r in 0..reps.min(if cfg.tg > 0 { reps } else { 0 }) {
        let probe = ctx.device_mut().read_bandwidth();
        device_probe = probe.is_some();
        probes.push(probe.map_or_else(
            || crate::probe::read_bandwidth(cfg.context.n_threads),
            |b| b / 1e9,
        ));
        let gen = tokens(cfg.tg, nv, r as u64 + 100);
        let mut s = SeqKv::default();
        ctx.eval(&mut s, &gen[..1], Outputs::Last, &mut ignore)?;
        let t = Instant::now();
        for &tok in &gen[1..] {
            ctx.eval(&mut s, &[tok], Outputs::Last, &mut ignore)?;
        }
        tg.push((cfg.tg - 1) as f64 / t.elapsed().as_secs_f64());
        ctx.release(&mut s);
    }

    let ops = match cfg.tg > 0 && ctx.device_mut().profile_ops(true) {
        true => profile_decode(&mut ctx, nv)?,
        false => Vec::new(),
    };

    let mut batched: Vec<BatchedPoint> = Vec::new();
    for &b in &cfg.batch {
        let mut speeds = Vec::new();
        for r in 0..reps {
            let mut seqs = vec![SeqKv::default(); b];
            for (i, seq) in seqs.iter_mut().enumerate() {
                ctx.eval(
                    seq,
                    &tokens(PRIOR, nv, (1000 * r + i) as u64),
                    Outputs::Last,
                    &mut ignore,
                )?;
            }
            let steps = tokens(BATCH_STEPS * b, nv, 7 + r as u64);
            let all: Vec<usize> = (0..b).collect();
            let t = Instant::now();
            for step in steps.chunks(b) {
                let rows: Vec<(usize, u32)> =
                    step.iter().enumerate().map(|(i, &t)| (i, t)).collect();
                ctx.append(&mut seqs, &rows, &all, &mut drop_logits)?;
            }
            speeds.push((BATCH_STEPS * b) as f64 / t.elapsed().as_secs_f64());
            for seq in seqs.iter_mut() {
                ctx.release(seq);
            }
        }
        let tok_s = mean(&speeds);
        let base = batched.first().map_or(tok_s, |p| p.tok_s);
        batched.push(BatchedPoint {
            batch: b,
            tok_s,
            ratio: tok_s / base,
        });
    }

    let mut verify: Vec<VerifyPoint> = Vec::new();
    if !cfg.verify.is_empty() {
        let mut seqs = vec![SeqKv::default()];
        ctx.eval(
            &mut seqs[0],
            &tokens(PRIOR, nv, 5),
            Outputs::Last,
            &mut ignore,
        )?;
        for &k in &cfg.verify {
            let mut times = Vec::new();
            let before = ctx.moe_stats();
            for r in 0..reps.max(3) {
                let rows: Vec<(usize, u32)> = tokens(k, nv, 50 + r as u64)
                    .into_iter()
                    .map(|t| (0, t))
                    .collect();
                let all: Vec<usize> = (0..k).collect();
                let t = Instant::now();
                ctx.append(&mut seqs, &rows, &all, &mut drop_logits)?;
                times.push(t.elapsed().as_secs_f64() * 1000.0);
                ctx.truncate(&mut seqs[0], PRIOR);
            }
            let ms = mean(&times);
            let base = verify.first().map_or(ms, |p| p.ms);
            let after = ctx.moe_stats();
            let blocks = after.blocks - before.blocks;
            verify.push(VerifyPoint {
                k,
                ms,
                ratio: ms / base,
                experts_per_block: (blocks > 0)
                    .then(|| (after.experts - before.experts) as f64 / blocks as f64),
            });
        }
    }

    let decode = (!tg.is_empty()).then(|| {
        let bytes = crate::probe::decode_weight_bytes(&weights_of, cfg.context.device);
        let gb_s = bytes as f64 * mean(&tg) / 1e9;
        let shares: Vec<f64> = tg
            .iter()
            .zip(&probes)
            .map(|(t, p)| bytes as f64 * t / 1e9 / p)
            .collect();
        DecodeBandwidth {
            weight_bytes_per_token: bytes,
            gb_s,
            probe_gb_s: mean(&probes),
            share: mean(&shares),
            device_probe,
        }
    });

    Ok(ModelBenchReport {
        model: name.to_string(),
        pp: cfg.pp,
        tg: cfg.tg,
        pp_tok_s: mean(&pp),
        tg_tok_s: mean(&tg),
        decode,
        batched,
        verify,
        ops,
        machine: Machine::here(Some(cfg.context.n_threads)),
    })
}

/// [`PROFILED_TOKENS`] decode steps with the device timing its ops (then it stops).
fn profile_decode(ctx: &mut Executor, nv: usize) -> Result<Vec<OpPoint>> {
    let mut ignore = |_: usize, _: &[f32]| {};
    let gen = tokens(PROFILED_TOKENS + 1, nv, 77);
    let mut s = SeqKv::default();
    ctx.eval(&mut s, &gen[..1], Outputs::Last, &mut ignore)?;
    ctx.device_mut().op_times();
    for &tok in &gen[1..] {
        ctx.eval(&mut s, &[tok], Outputs::Last, &mut ignore)?;
    }
    let times = ctx.device_mut().op_times();
    ctx.device_mut().profile_ops(false);
    ctx.release(&mut s);
    let per = PROFILED_TOKENS as f64;
    Ok(times
        .into_iter()
        .map(|o| OpPoint {
            calls_per_token: o.calls as f64 / per,
            ms_per_token: o.seconds * 1e3 / per,
            gb_s: match o.seconds > 0.0 {
                true => o.bytes as f64 / o.seconds / 1e9,
                false => 0.0,
            },
            op: o.op,
        })
        .collect())
}
