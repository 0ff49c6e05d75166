//! Helpers shared by the synthetic-model tests: batched evaluation over a KV pool and the
//! float64 reference logits written by scripts/make_synthetic.py. Each test binary uses
//! part of it.
#![allow(dead_code)]

use std::sync::Arc;

use device::Precision;
use device::{Device, Row, Step};
use gguf::GgmlType;
use kernels::ThreadPool;
use kv::{KvConfig, KvPool, SeqKv};
use model::{Model, Scratch};

pub const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/");

/// Logits keyed by `(sequence, position)`.
pub type Keyed = Vec<((usize, usize), Vec<f32>)>;

/// The backend a test computes on.
#[derive(Debug, Clone, Copy)]
pub enum Backend {
    /// The CPU with `threads` threads and activations as `precision` says.
    Cpu {
        threads: usize,
        precision: Precision,
    },
    /// The scalar reference backend.
    Reference,
    /// The wgpu backend on the best adapter there is (lavapipe in CI).
    Gpu,
}

impl Backend {
    fn open(self) -> Box<dyn Device> {
        match self {
            Backend::Cpu { threads, precision } => Box::new(kernels::cpu::Cpu::new(
                Arc::new(ThreadPool::new(threads)),
                precision,
            )),
            Backend::Reference => Box::new(device::reference::Reference::new()),
            Backend::Gpu => Box::new(gpu::Gpu::open(gpu::Choice::Any).expect("a GPU adapter")),
        }
    }
}

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
    let backend = Backend::Cpu { threads, precision };
    run_stages_on(backend, &[model], batches, n_seqs, kv_type)
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
    let backend = Backend::Cpu { threads, precision };
    run_stages_on(backend, stages, batches, n_seqs, kv_type)
}

/// [`run_stages`] with each stage on a device of `backend`.
pub fn run_stages_on(
    backend: Backend,
    stages: &[&Model],
    batches: &[Vec<(usize, u32)>],
    n_seqs: usize,
    kv_type: GgmlType,
) -> Keyed {
    let hp = &stages[0].hparams;
    let e = hp.n_embd;
    let mut devs: Vec<Box<dyn Device>> = stages.iter().map(|_| backend.open()).collect();
    let mut kvs = Vec::new();
    let mut uploaded = Vec::new();
    for (model, dev) in stages.iter().zip(&mut devs) {
        let cfg = KvConfig {
            n_layer: model.stage.layers.len(),
            n_head_kv: hp.n_head_kv,
            head_dim: hp.head_dim,
            ty: kv_type,
            n_positions: 256,
            window: None,
            state: None,
            records: None,
            empty: 0,
        };
        kvs.push(KvPool::new(cfg.clone()).unwrap());
        dev.kv_alloc(cfg).unwrap();
        let w = model.upload(&mut **dev, &|_, _| {}).unwrap();
        let scratch = Scratch::new(&mut **dev, hp, &model.scratch_widths(), 128).unwrap();
        let hidden = dev.alloc(128 * e).unwrap();
        let logits = dev.alloc(128 * hp.n_vocab).unwrap();
        uploaded.push((w, scratch, hidden, logits));
    }
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
        let n = batch.len();
        let tokens: Vec<u32> = batch.iter().map(|&(_, t)| t).collect();
        let mut states = vec![0f32; n * e];
        for (i, model) in stages.iter().enumerate() {
            let (dev, kv, seqs) = (&mut devs[i], &mut kvs[i], &mut seqs[i]);
            let (w, scratch, hidden, logits) = &uploaded[i];
            for (s, seq) in seqs.iter_mut().enumerate() {
                kv.reserve(seq, next[s]).unwrap();
            }
            let tables: Vec<&[u32]> = seqs.iter().map(|s| s.blocks()).collect();
            dev.begin(&Step {
                rows: &rows,
                tables: &tables,
                windowed: &[],
                states: &[],
                checkpoints: &[],
                bidirectional: &[],
            });
            if i == 0 {
                model
                    .embed(&mut **dev, w, scratch, &tokens, *hidden)
                    .unwrap();
            } else {
                dev.upload(*hidden, 0, &states);
            }
            model.forward_layers(
                &mut **dev,
                w,
                scratch,
                model.stage.layers.clone(),
                *hidden,
                n,
                (i == 0).then_some(&tokens[..]),
            );
            for (s, seq) in seqs.iter_mut().enumerate() {
                kv.commit(seq, next[s]);
            }
            if i + 1 < stages.len() {
                dev.download(*hidden, 0, &mut states);
            } else {
                model.output(&mut **dev, w, scratch, *hidden, n, *logits);
                let mut l = vec![0f32; n * hp.n_vocab];
                dev.download(*logits, 0, &mut l);
                for (row, l) in rows.iter().zip(l.chunks_exact(hp.n_vocab)) {
                    out.push(((row.seq, row.pos), l.to_vec()));
                }
            }
            dev.finish();
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
