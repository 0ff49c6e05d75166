//! The recipes on the wgpu backend (lavapipe in CI): the tiny random-weight models against
//! their float64 numpy logits and against the CPU (mixtures of experts too), rows identical
//! whatever the batch.

mod common;

use common::{reference, relative_error, run_stages_on, tokens, Backend, Keyed, FIXTURES};
use gguf::GgmlType;
use model::Model;

const DENSE: [&str; 6] = [
    "llama-tiny.gguf",
    "qwen2-tiny.gguf",
    "qwen3-tiny.gguf",
    "phi3-tiny.gguf",
    "mistral-tiny.gguf",
    "gemma3-tiny.gguf",
];

fn one_batch(case: &serde_json::Value) -> Vec<Vec<(usize, u32)>> {
    vec![tokens(case).iter().map(|&t| (0, t)).collect()]
}

/// The largest `|a - b|` over two runs' logits.
fn max_diff(a: &Keyed, b: &Keyed) -> f32 {
    a.iter()
        .zip(b)
        .flat_map(|((_, x), (_, y))| x.iter().zip(y).map(|(p, q)| (p - q).abs()))
        .fold(0f32, f32::max)
}

#[test]
fn logits_match_the_float64_reference_and_the_cpu() {
    if !gpu::adapter_for_tests() {
        return;
    }
    for case in reference("reference.json") {
        against_reference_and_cpu(&case);
    }
}

/// The case's model on the GPU, its prompt in one forward, against the float64 logits
/// (asserted) and the CPU (printed); returns the GPU's logits.
fn against_reference_and_cpu(case: &serde_json::Value) -> Keyed {
    let file = case["file"].as_str().unwrap();
    let model = Model::load(format!("{FIXTURES}{file}")).unwrap();
    let batches = one_batch(case);
    let ours = run_stages_on(Backend::Gpu, &[&model], &batches, 1, GgmlType::F32);
    let worst = ours
        .iter()
        .zip(case["logits"].as_array().unwrap())
        .map(|((_, logits), want)| relative_error(logits, want))
        .fold(0f64, f64::max);
    let cpu = Backend::Cpu {
        threads: 2,
        precision: device::Precision::F32,
    };
    let theirs = run_stages_on(cpu, &[&model], &batches, 1, GgmlType::F32);
    let d = max_diff(&ours, &theirs);
    eprintln!("{file}: relative logit error {worst:.2e}; max |logit - cpu| {d:.2e}");
    assert!(worst < 1e-4, "{file}: relative logit error {worst}");
    ours
}

#[test]
fn rows_are_identical_whatever_the_batch() {
    if !gpu::adapter_for_tests() {
        return;
    }
    let a: Vec<u32> = vec![1, 5, 9, 2, 33, 61, 7, 7, 40, 12];
    let b: Vec<u32> = vec![3, 3, 8, 50, 21, 4];
    for file in DENSE {
        let model = Model::load(format!("{FIXTURES}{file}")).unwrap();
        let run = |batches: &[Vec<(usize, u32)>]| {
            run_stages_on(Backend::Gpu, &[&model], batches, 2, GgmlType::F16)
        };
        let alone = |toks: &[u32], seq: usize, chunk: usize| -> Keyed {
            let batches: Vec<Vec<(usize, u32)>> = toks
                .chunks(chunk)
                .map(|c| c.iter().map(|&t| (seq, t)).collect())
                .collect();
            run(&batches)
        };
        let mut whole = alone(&a, 0, a.len());
        whole.extend(alone(&b, 1, b.len()));
        whole.sort_by_key(|(k, _)| *k);
        let mut one_by_one = alone(&a, 0, 1);
        one_by_one.extend(alone(&b, 1, 1));
        one_by_one.sort_by_key(|(k, _)| *k);
        let interleaved: Vec<(usize, u32)> = (0..a.len().max(b.len()))
            .flat_map(|i| [a.get(i).map(|&t| (0, t)), b.get(i).map(|&t| (1, t))])
            .flatten()
            .collect();
        let mixed: Vec<Vec<(usize, u32)>> = interleaved.chunks(3).map(|c| c.to_vec()).collect();
        for (what, got) in [
            ("one token per forward", one_by_one),
            ("mixed batches of 3", run(&mixed)),
        ] {
            assert_eq!(got.len(), whole.len());
            for ((key, l), (wkey, w)) in got.iter().zip(&whole) {
                assert_eq!(key, wkey);
                let same = l.iter().zip(w).all(|(x, y)| x.to_bits() == y.to_bits());
                assert!(same, "{file}: row {key:?} differs ({what})");
            }
        }
    }
}

/// Every mixture of the MoE fixtures (1 to 8 experts per token, shared experts) against its
/// float64 logits and the CPU, and its rows the same bits one token per forward as whole.
#[test]
fn mixtures_match_the_float64_reference_and_the_cpu_whatever_the_batch() {
    if !gpu::adapter_for_tests() {
        return;
    }
    for case in reference("moe-reference.json") {
        let whole = against_reference_and_cpu(&case);
        let file = case["file"].as_str().unwrap();
        let model = Model::load(format!("{FIXTURES}{file}")).unwrap();
        let singles: Vec<Vec<(usize, u32)>> = tokens(&case).iter().map(|&t| vec![(0, t)]).collect();
        let one_by_one = run_stages_on(Backend::Gpu, &[&model], &singles, 1, GgmlType::F32);
        for ((key, l), (_, w)) in one_by_one.iter().zip(&whole) {
            let same = l.iter().zip(w).all(|(x, y)| x.to_bits() == y.to_bits());
            assert!(same, "{file}: row {key:?} differs one token per forward");
        }
    }
}
