//! LoRA adapters against llama.cpp: a synthetic qwen2 model (f32 weights) with a random
//! rank-8 adapter at scale 0.7, read as llama-perplexity reads it with `--lora-scaled`
//! (golden log-probabilities from scripts/gen_lora_golden.sh), on the CPU, the reference and
//! the wgpu backend (lavapipe in CI). The model without the adapter, or with it at scale 1,
//! is far from the golden: it tests the adapter's term and its scale (`alpha / rank`).

use std::path::Path;

mod common;
use common::{json, ok, tandem};

/// `tandem synth` arguments of the golden model and adapter (as the script has them).
#[rustfmt::skip]
const SYNTH: &[&str] = &[
    "--arch", "qwen2", "--experts", "0", "--n-embd", "128", "--n-layer", "2", "--n-head", "4",
    "--n-head-kv", "2", "--n-ff", "256", "--type", "f32", "--tokenizer", "smollm2-135m",
    "--vocab", "320", "--seed", "7",
];
const ADAPTER: &[&str] = &["--lora-rank", "8", "--lora-alpha", "16", "--seed", "11"];
const SCALED: &str = ":0.7";

/// Mean KL divergence from the golden and the share of positions with its top token.
fn against_golden(model: &str, device: &str, flags: &[&str]) -> (f64, f64) {
    let golden = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden/lora-llamacpp.kld");
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
fn an_adapter_reads_as_llama_cpp_reads_it() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("qwen2.gguf");
    let model = model.to_str().unwrap();
    let adapter = dir.path().join("adapter.gguf");
    let adapter = adapter.to_str().unwrap();
    let mut synth = vec!["synth", "-o", model];
    synth.extend(SYNTH);
    ok(&synth);
    let mut synth = vec!["synth", "--lora-of", model, "-o", adapter];
    synth.extend(ADAPTER);
    ok(&synth);
    let scaled = format!("{adapter}{SCALED}");
    let gpu = gpu::adapter_for_tests().then_some("gpu");
    for device in ["cpu", "reference"].into_iter().chain(gpu) {
        let (kld, top) = against_golden(model, device, &["--lora-scaled", &scaled]);
        assert!(
            kld <= 1e-5,
            "{device}: mean KL divergence {kld} from llama.cpp's"
        );
        assert!(
            top >= 0.99,
            "{device}: same top token at {top} of positions"
        );
    }
    for (what, flags) in [
        ("no adapter", &[][..]),
        ("scale 1", &["--lora", adapter][..]),
    ] {
        let (kld, _) = against_golden(model, "cpu", flags);
        assert!(
            kld >= 1e-2,
            "{what}: {kld}: the golden does not tell the adapter's term"
        );
    }
    let (fine, err) = tandem(&["info", "-m", model, "--lora", model]);
    assert!(!fine && err.contains("not a LoRA adapter"), "{err}");
}
