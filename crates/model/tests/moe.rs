//! Mixtures of experts (scripts/make_synthetic.py: Mixtral, qwen2moe, qwen3moe and a
//! DeepSeek-style variant, 1 to 8 experts per token out of 8 to 64) against float64 numpy
//! logits computed from the same files through the `gguf` package, at every batch size
//! from 1 to 64 rows; and batch invariance of the expert-grouped path.

mod common;

use common::{reference, relative_error, run_with, same_bits, tokens, Keyed, FIXTURES};
use gguf::GgmlType;
use kernels::Precision;
use model::Model;

/// The rows of `toks` (sequence `seq`) in batches of `size`.
fn chunked(toks: &[u32], seq: usize, size: usize) -> Vec<Vec<(usize, u32)>> {
    toks.chunks(size)
        .map(|c| c.iter().map(|&t| (seq, t)).collect())
        .collect()
}

fn load(case: &serde_json::Value) -> (String, Model) {
    let file = case["file"].as_str().unwrap().to_string();
    let model = Model::load(format!("{FIXTURES}{file}")).unwrap();
    (file, model)
}

#[test]
fn every_experts_per_token_count_is_covered() {
    let mut ks: Vec<usize> = reference("moe-reference.json")
        .iter()
        .map(|c| load(c).1.hparams.moe.unwrap().n_expert_used)
        .collect();
    ks.sort();
    assert_eq!(ks, (1..=8).collect::<Vec<_>>());
}

#[test]
fn logits_match_the_float64_reference_at_every_batch_size() {
    for case in reference("moe-reference.json") {
        let (file, model) = load(&case);
        let toks = tokens(&case);
        let want = case["logits"].as_array().unwrap();
        let whole = run_with(
            &model,
            &chunked(&toks, 0, toks.len()),
            1,
            2,
            GgmlType::F32,
            Precision::F32,
        );
        let mut worst = 0f64;
        for size in 1..=toks.len() {
            let got = run_with(
                &model,
                &chunked(&toks, 0, size),
                1,
                2,
                GgmlType::F32,
                Precision::F32,
            );
            for ((key, logits), want) in got.iter().zip(want) {
                let err = relative_error(logits, want);
                assert!(
                    err < 1e-4,
                    "{file}: row {key:?} in batches of {size}: {err}"
                );
                worst = worst.max(err);
            }
            assert!(same_bits(&got, &whole), "{file}: batches of {size} differ");
        }
        let moe = model.hparams.moe.as_ref().unwrap();
        eprintln!(
            "{file}: {} of {} experts, batches of 1 to {}: largest relative logit error {worst:.2e}",
            moe.n_expert_used,
            moe.n_expert,
            toks.len()
        );
    }
}

#[test]
fn rows_are_identical_whatever_the_batch_with_8_bit_activations() {
    for case in reference("moe-reference.json") {
        let (file, model) = load(&case);
        let a = tokens(&case);
        let b: Vec<u32> = a.iter().rev().map(|t| (t * 7 + 3) % 64).collect();
        let run = |batches: &[Vec<(usize, u32)>], threads: usize| -> Keyed {
            run_with(&model, batches, 2, threads, GgmlType::F16, Precision::Int8)
        };
        let mut reference = run(&chunked(&a, 0, a.len()), 1);
        reference.extend(run(&chunked(&b, 1, b.len()), 1));
        reference.sort_by_key(|(k, _)| *k);
        let interleaved: Vec<(usize, u32)> = a
            .iter()
            .zip(&b)
            .flat_map(|(&x, &y)| [(0, x), (1, y)])
            .collect();
        for (what, batches, threads) in [
            ("both sequences in one batch", vec![interleaved.clone()], 2),
            (
                "mixed batches of 5",
                interleaved.chunks(5).map(|c| c.to_vec()).collect(),
                2,
            ),
            (
                "mixed batches of 48, 3 threads",
                interleaved.chunks(48).map(|c| c.to_vec()).collect(),
                3,
            ),
            (
                "one row at a time",
                interleaved.chunks(1).map(|c| c.to_vec()).collect(),
                1,
            ),
        ] {
            let got = run(&batches, threads);
            assert!(same_bits(&got, &reference), "{file}: {what}");
        }
    }
}
