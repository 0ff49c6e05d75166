//! Helpers shared by the synthetic-model tests: batched evaluation over a KV pool and the
//! float64 reference logits written by scripts/make_synthetic.py. Each test binary uses
//! part of it.
#![allow(dead_code)]

use gguf::GgmlType;
use kernels::{Precision, ThreadPool};
use kv::{KvConfig, KvPool, SeqKv};
use model::{Batch, Model, Row, Scratch};

pub const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/");

/// Logits keyed by `(sequence, position)`.
pub type Keyed = Vec<((usize, usize), Vec<f32>)>;

/// Evaluates `batches` (each a list of `(sequence, token)` rows, positions following each
/// sequence's cache) and returns every row's logits, keyed by `(sequence, position)`.
pub fn run_with(
    model: &Model,
    batches: &[Vec<(usize, u32)>],
    n_seqs: usize,
    threads: usize,
    kv_type: GgmlType,
    precision: Precision,
) -> Keyed {
    run_stages(&[model], batches, n_seqs, threads, kv_type, precision)
}

/// [`run_with`] through consecutive stages of one model (the first embeds, the last has the
/// output head), each with a KV pool of its own blocks; hidden states pass between them.
pub fn run_stages(
    stages: &[&Model],
    batches: &[Vec<(usize, u32)>],
    n_seqs: usize,
    threads: usize,
    kv_type: GgmlType,
    precision: Precision,
) -> Keyed {
    let hp = &stages[0].hparams;
    let mut kvs: Vec<KvPool> = stages
        .iter()
        .map(|m| {
            KvPool::new(KvConfig {
                n_layer: m.stage.layers.len(),
                n_head_kv: hp.n_head_kv,
                head_dim: hp.head_dim,
                ty: kv_type,
                n_positions: 256,
            })
            .unwrap()
        })
        .collect();
    let pool = ThreadPool::new(threads);
    let mut scratch = Scratch::new(hp, 128);
    scratch.precision = precision;
    let mut seqs = vec![vec![SeqKv::default(); n_seqs]; stages.len()];
    let mut out = Vec::new();
    for batch in batches {
        let mut rows = Vec::new();
        let mut next: Vec<usize> = seqs[0].iter().map(|s| s.len()).collect();
        for &(s, _) in batch {
            rows.push(Row {
                pos: next[s],
                seq: s,
            });
            next[s] += 1;
        }
        let tokens: Vec<u32> = batch.iter().map(|&(_, t)| t).collect();
        let mut hidden = vec![0f32; tokens.len() * hp.n_embd];
        stages[0].embed(&tokens, &mut hidden).unwrap();
        for ((model, kv), seqs) in stages.iter().zip(&mut kvs).zip(&mut seqs) {
            for (s, seq) in seqs.iter_mut().enumerate() {
                kv.reserve(seq, next[s]).unwrap();
            }
            let refs: Vec<&SeqKv> = seqs.iter().collect();
            let forward = Batch {
                rows: &rows,
                seqs: &refs,
            };
            model.forward_layers(
                model.stage.layers.clone(),
                &mut hidden,
                forward,
                kv,
                &mut scratch,
                &pool,
            );
            for (s, seq) in seqs.iter_mut().enumerate() {
                kv.commit(seq, next[s]);
            }
        }
        let mut logits = vec![0f32; tokens.len() * hp.n_vocab];
        let last = stages[stages.len() - 1];
        last.output(&mut hidden, &mut logits, &pool, precision);
        for (row, l) in rows.iter().zip(logits.chunks_exact(hp.n_vocab)) {
            out.push(((row.seq, row.pos), l.to_vec()));
        }
    }
    out.sort_by_key(|(k, _)| *k);
    out
}

pub fn run(model: &Model, batches: &[Vec<(usize, u32)>], n_seqs: usize, threads: usize) -> Keyed {
    run_with(
        model,
        batches,
        n_seqs,
        threads,
        GgmlType::F32,
        Precision::F32,
    )
}

/// The cases of a reference file of the fixtures (`reference.json`, `moe-reference.json`).
pub fn reference(file: &str) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(format!("{FIXTURES}{file}")).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    v["cases"].as_array().unwrap().clone()
}

/// The largest difference between `logits` and `want` (one row each), relative to the
/// row's largest reference logit (at least 1).
pub fn relative_error(logits: &[f32], want: &serde_json::Value) -> f64 {
    let want: Vec<f64> = want
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_f64().unwrap())
        .collect();
    let scale = want.iter().fold(1f64, |m, v| m.max(v.abs()));
    logits
        .iter()
        .zip(&want)
        .map(|(a, b)| (*a as f64 - b).abs() / scale)
        .fold(0f64, f64::max)
}

/// The token ids of a reference case.
pub fn tokens(case: &serde_json::Value) -> Vec<u32> {
    case["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_u64().unwrap() as u32)
        .collect()
}

/// Whether two runs gave every row the same bits.
pub fn same_bits(a: &Keyed, b: &Keyed) -> bool {
    a.len() == b.len()
        && a.iter().zip(b).all(|((ka, la), (kb, lb))| {
            ka == kb && la.iter().zip(lb).all(|(x, y)| x.to_bits() == y.to_bits())
        })
}
