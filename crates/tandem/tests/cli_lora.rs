//! LoRA adapters against llama.cpp: a synthetic qwen2 model (f32 weights) with a random
//! rank-8 adapter at scale 0.7, read as llama-perplexity reads it with `--lora-scaled`
//! (golden log-probabilities from scripts/gen_lora_golden.sh), on the CPU, the reference and
//! the wgpu backend (lavapipe in CI). The model without the adapter, or with it at scale 1,
//! is far from the golden: it tests the adapter's term and its scale (`alpha / rank`).

mod common;
use common::{ok, tandem};

/// `tandem synth --lora-of` arguments of the golden adapter (as the script has them).
const ADAPTER: &[&str] = &["--lora-rank", "8", "--lora-alpha", "16", "--seed", "11"];
const SCALED: &str = ":0.7";

/// Mean KL divergence from the golden and the share of positions with its top token.
fn against_golden(model: &str, device: &str, flags: &[&str]) -> (f64, f64) {
    common::against_golden(model, 512, device, "lora-llamacpp.kld", flags)
}

#[test]
fn an_adapter_reads_as_llama_cpp_reads_it() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("qwen2.gguf");
    let model = model.to_str().unwrap();
    let adapter = dir.path().join("adapter.gguf");
    let adapter = adapter.to_str().unwrap();
    common::synth_qwen2(model);
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
