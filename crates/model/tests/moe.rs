//! Mixtures of experts (scripts/make_synthetic.py: Mixtral, qwen2moe, qwen3moe and a
//! DeepSeek-style variant, 1 to 8 experts per token out of 8 to 64) against float64 numpy
//! logits computed from the same files through the `gguf` package, at every batch size
//! from 1 to 64 rows; batch invariance of the expert-grouped path; and llama.cpp's top-5
//! log-probabilities on `tandem synth` mixtures (scripts/gen_moe_golden.py).

mod common;

use common::{reference, relative_error, run_with, same_bits, tokens, Keyed, FIXTURES};
use device::Precision;
use gguf::{GgmlType, GgufFile, GgufWriter, Value};
use model::synthetic::{ExpertShape, Synthetic};
use model::{Arch, Model};

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

/// `file` of the fixtures rewritten with its metadata edited by `edit` (`None` drops a key)
/// and without the tensor `drop`, at a path of its own.
fn rewritten(
    file: &str,
    edit: &dyn Fn(&str, &Value) -> Option<Value>,
    drop: Option<&str>,
) -> std::path::PathBuf {
    let src = GgufFile::open(format!("{FIXTURES}{file}")).unwrap();
    let mut w = GgufWriter::new();
    for (k, v) in src.header.metadata.iter() {
        if let Some(v) = edit(k, v) {
            w.metadata(k, v);
        }
    }
    for t in src
        .header
        .tensors
        .iter()
        .filter(|t| Some(t.name.as_str()) != drop)
    {
        w.tensor(&t.name, &t.dims, t.ggml_type, src.tensor_bytes(t).to_vec());
    }
    let path = std::env::temp_dir().join(format!(
        "tandem-moe-{}-{}.gguf",
        std::process::id(),
        drop.unwrap_or("metadata").replace('.', "-")
    ));
    w.write(&path).unwrap();
    path
}

fn load_error(path: &std::path::Path) -> String {
    let err = Model::load(path).err().expect("the load fails").to_string();
    std::fs::remove_file(path).unwrap();
    err
}

#[test]
fn bad_mixtures_are_load_errors_naming_the_key_or_tensor() {
    let too_many = rewritten(
        "llama-moe-k2.gguf",
        &|k, v| {
            Some(if k == "llama.expert_used_count" {
                Value::U32(9)
            } else {
                v.clone()
            })
        },
        None,
    );
    let err = load_error(&too_many);
    assert!(
        err.contains("llama.expert_used_count") && err.contains("between 1 and expert_count 8"),
        "{err}"
    );
    let no_count = rewritten(
        "qwen3moe-moe-k3.gguf",
        &|k, v| (k != "qwen3moe.expert_count").then(|| v.clone()),
        None,
    );
    let err = load_error(&no_count);
    assert!(err.contains("qwen3moe.expert_count"), "{err}");
    let missing = rewritten(
        "qwen2moe-moe-k4.gguf",
        &|_, v| Some(v.clone()),
        Some("blk.1.ffn_down_exps.weight"),
    );
    let err = load_error(&missing);
    assert!(err.contains("blk.1.ffn_down_exps.weight"), "{err}");
}

fn smollm2() -> std::path::PathBuf {
    let dir = std::env::var_os("TANDEM_MODELS")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| dirs::cache_dir().unwrap().join("tandem").join("models"));
    let p = dir.join("SmolLM2-135M-Instruct.Q4_1.gguf");
    assert!(
        p.is_file(),
        "{} missing: run `tandem pull smollm2-135m`",
        p.display()
    );
    p
}

/// The log-probabilities of `logits`.
fn log_softmax(logits: &[f32]) -> Vec<f64> {
    let max = logits.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v)) as f64;
    let sum: f64 = logits.iter().map(|&v| (v as f64 - max).exp()).sum();
    logits.iter().map(|&v| v as f64 - max - sum.ln()).collect()
}

#[test]
fn top5_log_probabilities_match_llama_cpp() {
    let golden: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/golden/moe-llamacpp.json"
        ))
        .unwrap(),
    )
    .unwrap();
    let shape = &golden["shape"];
    let dim = |k: &str| shape[k].as_u64().unwrap() as usize;
    let tokenizer = GgufFile::open(smollm2()).unwrap();
    for case in golden["cases"].as_array().unwrap() {
        let arch = case["arch"].as_str().unwrap();
        let spec = Synthetic {
            arch: Arch::from_name(arch).unwrap(),
            n_embd: dim("n_embd"),
            n_layer: dim("n_layer"),
            n_head: dim("n_head"),
            n_head_kv: dim("n_head_kv"),
            n_ff: dim("n_ff"),
            experts: Some(ExpertShape {
                n_expert: case["n_expert"].as_u64().unwrap() as usize,
                n_expert_used: case["n_expert_used"].as_u64().unwrap() as usize,
                n_ff_exp: dim("n_ff_exp"),
            }),
            delta: None,
            nextn: 0,
            window: None,
            ty: GgmlType::F32,
            seed: shape["seed"].as_u64().unwrap(),
        };
        let path = std::env::temp_dir().join(format!(
            "tandem-moe-golden-{}-{arch}-{}.gguf",
            std::process::id(),
            case["n_expert"]
        ));
        spec.write(&tokenizer, &path).unwrap();
        let model = Model::load(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        let toks = tokens(case);
        let got = run_with(
            &model,
            &chunked(&toks, 0, 16),
            1,
            2,
            GgmlType::F32,
            Precision::F32,
        );
        let mut worst = 0f64;
        for ((key, logits), want) in got.iter().zip(case["top5"].as_array().unwrap()) {
            let lp = log_softmax(logits);
            for pair in want.as_array().unwrap() {
                let id = pair[0].as_u64().unwrap() as usize;
                let diff = (lp[id] - pair[1].as_f64().unwrap()).abs();
                worst = worst.max(diff);
                assert!(diff < 1e-4, "{arch}: token {id} at {key:?}: {diff}");
            }
            let top = want[0][0].as_u64().unwrap() as usize;
            assert!(
                lp.iter().all(|&v| v <= lp[top]),
                "{arch}: top token at {key:?}"
            );
        }
        eprintln!(
            "{arch} {:?}: top-5 log-probabilities within {worst:.1e} of llama.cpp's",
            spec.experts
        );
    }
}
