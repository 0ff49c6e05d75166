//! RoPE scaling against llama.cpp: a synthetic qwen2 model (f32 weights) read with YaRN at
//! factor 4 over an original context of 64 positions, as llama-perplexity reads it with the
//! same flags (golden log-probabilities from scripts/gen_rope_golden.sh), on the CPU, the
//! reference and the wgpu backend (lavapipe in CI). The same model read without scaling, or
//! with linear scaling alone, is far from the golden: it tests YaRN's ramp and magnitudes.

use std::path::Path;

mod common;
use common::{json, ok};

/// `tandem synth` arguments of the golden model (as scripts/gen_rope_golden.sh has them).
#[rustfmt::skip]
const SYNTH: &[&str] = &[
    "--arch", "qwen2", "--experts", "0", "--n-embd", "128", "--n-layer", "2", "--n-head", "4",
    "--n-head-kv", "2", "--n-ff", "256", "--type", "f32", "--tokenizer", "smollm2-135m",
    "--vocab", "320", "--seed", "7",
];
const YARN: &[&str] = &[
    "--rope-scaling",
    "yarn",
    "--rope-scale",
    "4",
    "--yarn-orig-ctx",
    "64",
];

/// Mean KL divergence from the golden and the share of positions with its top token.
fn against_golden(model: &str, device: &str, flags: &[&str]) -> (f64, f64) {
    let golden = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden/yarn-llamacpp.kld");
    let mut args = vec![
        "perplexity",
        "-m",
        model,
        "-c",
        "512",
        "--chunks",
        "1",
        "--device",
        device,
        "--kl-divergence-base",
        golden.to_str().unwrap(),
        "--kl-divergence",
        "--json",
    ];
    args.extend(flags);
    let r = json(&args);
    let k = &r["kl_divergence"];
    assert_eq!(k["positions"], 255, "{device}: {r}");
    (
        k["kld_mean"].as_f64().unwrap(),
        k["same_top"].as_f64().unwrap(),
    )
}

#[test]
fn yarn_reads_as_llama_cpp_does() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("qwen2.gguf");
    let model = model.to_str().unwrap();
    let mut synth = vec!["synth", "-o", model];
    synth.extend(SYNTH);
    ok(&synth);
    let gpu = gpu::adapter_for_tests().then_some("gpu");
    for device in ["cpu", "reference"].into_iter().chain(gpu) {
        let (kld, top) = against_golden(model, device, YARN);
        assert!(
            kld <= 1e-5,
            "{device}: mean KL divergence {kld} from llama.cpp's YaRN"
        );
        assert!(
            top >= 0.99,
            "{device}: same top token at {top} of positions"
        );
    }
    let linear = ["--rope-scaling", "linear", "--rope-scale", "4"];
    for (what, flags) in [("unscaled", &[][..]), ("linear", &linear[..])] {
        let (kld, _) = against_golden(model, "cpu", flags);
        assert!(
            kld >= 1e-2,
            "{what}: {kld}: the golden does not tell YaRN from it"
        );
    }
}
