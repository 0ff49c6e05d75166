//! Hybrid recurrent models against llama.cpp: synthetic qwen35 and qwen35moe (Gated DeltaNet
//! and gated attention blocks), nemotron_h (Mamba-2, attention without RoPE and
//! squared-ReLU blocks, by its default pattern M-M*) and nemotron_h_moe (mixtures in place of
//! the squared-ReLU blocks) read as llama-perplexity reads them, over 1,023 positions of one chunk of
//! 2,048 tokens (golden log-probabilities from scripts/gen_hybrid_golden.sh), on the CPU,
//! the reference and the wgpu backend (lavapipe in CI).

use std::path::Path;
use std::process::Command;

mod common;
use common::json;

/// `tandem synth` arguments of the golden models but their architecture and experts (as
/// scripts/gen_hybrid_golden.sh has them).
const SYNTH: &[&str] = &[
    "--n-embd",
    "128",
    "--n-layer",
    "4",
    "--n-head",
    "4",
    "--n-head-kv",
    "2",
    "--n-ff",
    "256",
    "--ssm-state-size",
    "32",
    "--ssm-group-count",
    "2",
    "--ssm-time-step-rank",
    "4",
    "--type",
    "f32",
    "--tokenizer",
    "smollm2-135m",
    "--vocab",
    "320",
    "--seed",
    "7",
];

#[test]
fn qwen35_reads_as_llama_cpp_does() {
    reads_as_llama_cpp_does("qwen35", &["--experts", "0"]);
}

/// 2 of 8 experts, a gated shared expert.
#[test]
fn qwen35moe_reads_as_llama_cpp_does() {
    let experts = ["--experts", "8", "--experts-used", "2", "--n-ff-exp", "64"];
    reads_as_llama_cpp_does("qwen35moe", &experts);
}

/// Mamba-2 blocks of 4 heads of 64 (the default inner width, 2 · n_embd) over a state of
/// 32 in 2 groups of B and C; the attention block's 4 heads over 2 key-value heads.
#[test]
fn nemotron_h_reads_as_llama_cpp_does() {
    reads_as_llama_cpp_does("nemotron_h", &["--experts", "0"]);
}

/// nemotron_h with 2 of 8 squared-ReLU experts chosen by sigmoid scores plus a bias, and a
/// shared expert, in place of the feed-forward block (`MEM*`).
#[test]
fn nemotron_h_moe_reads_as_llama_cpp_does() {
    let experts = ["--experts", "8", "--experts-used", "2", "--n-ff-exp", "64"];
    reads_as_llama_cpp_does("nemotron_h_moe", &experts);
}

fn reads_as_llama_cpp_does(arch: &str, experts: &[&str]) {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join(format!("{arch}.gguf"));
    let model = model.to_str().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_tandem"))
        .args(["synth", "-o", model, "--arch", arch])
        .args(experts)
        .args(SYNTH)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let golden =
        Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/golden/{arch}-llamacpp.kld"));
    let golden = golden.to_str().unwrap();
    let gpu = gpu::adapter_for_tests().then_some("gpu");
    for device in ["cpu", "reference"].into_iter().chain(gpu) {
        let r = json(&[
            "perplexity",
            "-m",
            model,
            "--device",
            device,
            "--kl-divergence-base",
            golden,
            "--kl-divergence",
            "--json",
        ]);
        let k = &r["kl_divergence"];
        let (kld, top) = (
            k["kld_mean"].as_f64().unwrap(),
            k["same_top"].as_f64().unwrap(),
        );
        assert_eq!(k["positions"], 1023, "{arch} {device}: {r}");
        assert!(
            kld <= 1e-3,
            "{arch} {device}: mean KL divergence {kld} from llama.cpp: {r}"
        );
        assert!(
            top >= 0.98,
            "{arch} {device}: same top token at {top} of positions: {r}"
        );
    }
}
