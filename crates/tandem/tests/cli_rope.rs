//! RoPE scaling against llama.cpp: a synthetic qwen2 model (f32 weights) read with YaRN at
//! factor 4 over an original context of 64 positions, as llama-perplexity reads it with the
//! same flags (golden log-probabilities from scripts/gen_rope_golden.sh), on the CPU, the
//! reference and the wgpu backend (lavapipe in CI). The same model read without scaling, or
//! with linear scaling alone, is far from the golden: it tests YaRN's ramp and magnitudes.

mod common;

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
    common::against_golden(model, 512, device, "yarn-llamacpp.kld", flags)
}

#[test]
fn yarn_reads_as_llama_cpp_does() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("qwen2.gguf");
    let model = model.to_str().unwrap();
    common::synth_qwen2(model);
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
