//! Tiny random-weight models (scripts/make_synthetic.py) against float64 numpy logits, and
//! batch invariance: a row's logits are the same bits whatever else shares its batch.

mod common;

use common::{reference, relative_error, run, run_stages_on, run_with, tokens, Backend, FIXTURES};
use device::Precision;
use gguf::GgmlType;
use model::Model;

#[test]
fn logits_match_the_float64_reference() {
    for case in reference("reference.json") {
        let file = case["file"].as_str().unwrap();
        let model = Model::load(format!("{FIXTURES}{file}")).unwrap();
        let batch: Vec<(usize, u32)> = tokens(&case).iter().map(|&t| (0, t)).collect();
        let ours = run(&model, &[batch], 1, 2);
        let worst = ours
            .iter()
            .zip(case["logits"].as_array().unwrap())
            .map(|((_, logits), want)| relative_error(logits, want))
            .fold(0f64, f64::max);
        eprintln!("{file}: largest relative logit error {worst:.2e}");
        assert!(worst < 1e-4, "{file}: relative logit error {worst}");
    }
}

#[test]
fn rows_are_identical_whatever_the_batch() {
    for precision in [Precision::Int8, Precision::F32] {
        rows_identical(precision);
    }
}

fn rows_identical(precision: Precision) {
    let a: Vec<u32> = vec![1, 5, 9, 2, 33, 61, 7, 7, 40, 12];
    let b: Vec<u32> = vec![3, 3, 8, 50, 21, 4];
    for file in [
        "llama-tiny.gguf",
        "qwen2-tiny.gguf",
        "qwen3-tiny.gguf",
        "phi3-tiny.gguf",
        "mistral-tiny.gguf",
        "gemma3-tiny.gguf",
    ] {
        let model = Model::load(format!("{FIXTURES}{file}")).unwrap();
        let alone = |toks: &[u32], seq: usize, chunk: usize| {
            let batches: Vec<Vec<(usize, u32)>> = toks
                .chunks(chunk)
                .map(|c| c.iter().map(|&t| (seq, t)).collect())
                .collect();
            run_with(&model, &batches, 2, 1, GgmlType::F16, precision)
        };
        let mut reference = alone(&a, 0, a.len());
        reference.extend(alone(&b, 1, b.len()));
        reference.sort_by_key(|(k, _)| *k);
        let one_by_one = {
            let mut r = alone(&a, 0, 1);
            r.extend(alone(&b, 1, 1));
            r.sort_by_key(|(k, _)| *k);
            r
        };
        let interleaved: Vec<(usize, u32)> = (0..a.len().max(b.len()))
            .flat_map(|i| [a.get(i).map(|&t| (0, t)), b.get(i).map(|&t| (1, t))])
            .flatten()
            .collect();
        let mixed_chunks: Vec<Vec<(usize, u32)>> =
            interleaved.chunks(3).map(|c| c.to_vec()).collect();
        for (what, got) in [
            ("one token per forward", one_by_one),
            (
                "two sequences in one batch, 3 threads",
                run_with(
                    &model,
                    std::slice::from_ref(&interleaved),
                    2,
                    3,
                    GgmlType::F16,
                    precision,
                ),
            ),
            (
                "mixed batches of 3, 2 threads",
                run_with(&model, &mixed_chunks, 2, 2, GgmlType::F16, precision),
            ),
        ] {
            assert_eq!(got.len(), reference.len());
            for ((key, l), (rkey, r)) in got.iter().zip(&reference) {
                assert_eq!(key, rkey);
                assert!(
                    l.iter().zip(r).all(|(x, y)| x.to_bits() == y.to_bits()),
                    "{file}: row {key:?} differs ({what}, {precision:?})"
                );
            }
        }
    }
}

#[test]
fn reduced_precision_kv_caches_stay_close() {
    let model = Model::load(format!("{FIXTURES}qwen3-tiny.gguf")).unwrap();
    let batch: Vec<(usize, u32)> = [1u32, 5, 9, 2, 33, 61, 7, 7]
        .iter()
        .map(|&t| (0, t))
        .collect();
    let exact = run(&model, std::slice::from_ref(&batch), 1, 2);
    let scale = exact
        .iter()
        .flat_map(|(_, l)| l.iter())
        .fold(0f32, |m, v| m.max(v.abs()));
    // Relative to the largest logit: f16 keeps 11 bits, bf16 8; q8_0 rounds each element
    // by up to 1/254 of its block maximum, compounded over two layers of attention.
    for (ty, tol) in [
        (GgmlType::F16, 1e-3),
        (GgmlType::BF16, 1e-2),
        (GgmlType::Q8_0, 2e-2),
    ] {
        let got = run_with(
            &model,
            std::slice::from_ref(&batch),
            1,
            2,
            ty,
            Precision::F32,
        );
        let worst = got
            .iter()
            .zip(&exact)
            .flat_map(|((_, a), (_, b))| a.iter().zip(b).map(|(x, y)| (x - y).abs()))
            .fold(0f32, f32::max)
            / scale;
        eprintln!("{ty} KV: largest logit difference {worst:.2e} of the largest logit");
        assert!(worst < tol, "{ty} KV: logits differ by {worst}");
        assert!(worst > 0.0, "{ty} KV: no rounding at all is suspicious");
    }
}

/// The reference backend against the float64 logits, on every fixture (dense and mixture),
/// and the CPU backend against the reference backend: with 8-bit activations and an f16 KV
/// cache on the dense models; with f32 activations on the mixtures, whose random routers
/// have near-ties that 8-bit activations flip (another expert, another answer).
#[test]
fn the_reference_backend_matches_the_float64_reference_and_bounds_the_cpu() {
    let cases = reference("reference.json")
        .into_iter()
        .chain(reference("moe-reference.json"));
    for case in cases {
        let file = case["file"].as_str().unwrap().to_string();
        let model = Model::load(format!("{FIXTURES}{file}")).unwrap();
        let batch: Vec<(usize, u32)> = tokens(&case).iter().map(|&t| (0, t)).collect();
        let batches = [batch];
        let ours = run_stages_on(Backend::Reference, &[&model], &batches, 1, GgmlType::F32);
        let worst = ours
            .iter()
            .zip(case["logits"].as_array().unwrap())
            .map(|((_, logits), want)| relative_error(logits, want))
            .fold(0f64, f64::max);
        let moe = model.hparams.moe.is_some();
        let (kv, precision, bound) = match moe {
            false => (GgmlType::F16, Precision::Int8, 0.05),
            true => (GgmlType::F32, Precision::F32, 1e-4),
        };
        let cpu = run_with(&model, &batches, 1, 2, kv, precision);
        let cpu_vs_ref = cpu
            .iter()
            .zip(&ours)
            .map(|((_, a), (_, b))| {
                let scale = b.iter().fold(1f32, |m, v| m.max(v.abs()));
                a.iter()
                    .zip(b)
                    .map(|(x, y)| (x - y).abs() / scale)
                    .fold(0f32, f32::max)
            })
            .fold(0f32, f32::max);
        eprintln!(
            "{file}: reference backend {worst:.2e} from float64; cpu ({precision:?}, {kv} KV) {cpu_vs_ref:.2e} from the reference backend"
        );
        assert!(worst < 1e-5, "{file}: reference backend off by {worst}");
        assert!(
            cpu_vs_ref < bound,
            "{file}: cpu off the reference by {cpu_vs_ref}"
        );
    }
}
