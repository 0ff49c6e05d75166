//! DeepSeek-V4 against llama.cpp: a synthetic deepseek4 (every feature on: a window smaller
//! than the context, blocks compressed at ratios 4 and 128, the lightning indexer picking 8
//! of up to 1,024 compressed blocks, hyper-connections, hash-routed blocks) read as
//! llama-perplexity reads it at -c 1024 (two chunks, 1,022 positions) and -c 4096 (2,047
//! positions), golden log-probabilities from scripts/gen_dsv4_golden.sh, on the CPU, and at
//! -c 1024 on the reference and wgpu backends (lavapipe in CI; the reference at -c 4096 in
//! the slow tier).

use std::path::Path;
use std::process::Command;

mod common;
use common::json;

/// `tandem synth` arguments of the golden model (as scripts/gen_dsv4_golden.sh has them).
/// Sixteen indexer heads: with a few, many blocks score exactly 0 (every head's product
/// negative) and which of the tied blocks a query sees is each engine's own order.
const SYNTH: &[&str] = &[
    "--arch",
    "deepseek4",
    "--dsv4-indexer-heads",
    "16",
    "--type",
    "f32",
    "--tokenizer",
    "smollm2-135m",
    "--vocab",
    "320",
    "--seed",
    "7",
];

fn synth(dir: &Path) -> String {
    let model = dir.join("deepseek4.gguf");
    let model = model.to_str().unwrap().to_string();
    let out = Command::new(env!("CARGO_BIN_EXE_tandem"))
        .args(["synth", "-o", &model])
        .args(SYNTH)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    model
}

#[test]
fn deepseek4_reads_as_llama_cpp_does() {
    let dir = tempfile::tempdir().unwrap();
    let model = synth(dir.path());
    let mut devices = vec!["cpu", "reference"];
    if gpu::adapter_for_tests() {
        devices.push("gpu");
    }
    for device in devices {
        reads_as_llama_cpp_does(&model, (1024, 1022), device);
    }
    reads_as_llama_cpp_does(&model, (4096, 2047), "cpu");
}

/// Slow tier: the reference backend is checked at -c 1024 above, -c 4096 on the CPU.
#[test]
#[ignore = "slow tier: scripts/test --slow"]
fn deepseek4_on_the_reference_backend_reads_4096_as_llama_cpp_does() {
    let dir = tempfile::tempdir().unwrap();
    let model = synth(dir.path());
    reads_as_llama_cpp_does(&model, (4096, 2047), "reference");
}

/// `tandem perplexity` of `model` on `device` against the golden log-probabilities at
/// `-c ctx`: mean KL divergence at most 1e-3 and the same top token at 98% of `positions`.
fn reads_as_llama_cpp_does(model: &str, (ctx, positions): (usize, usize), device: &str) {
    let golden = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(format!("tests/golden/deepseek4-c{ctx}-llamacpp.kld"));
    let r = json(&[
        "perplexity",
        "-m",
        model,
        "--device",
        device,
        "-ctk",
        "f32",
        "--kl-divergence-base",
        golden.to_str().unwrap(),
        "--kl-divergence",
        "--json",
    ]);
    let k = &r["kl_divergence"];
    let (kld, top) = (
        k["kld_mean"].as_f64().unwrap(),
        k["same_top"].as_f64().unwrap(),
    );
    assert_eq!(k["positions"], positions, "-c {ctx} {device}: {r}");
    assert!(
        kld <= 1e-3,
        "-c {ctx} {device}: mean KL divergence {kld}: {r}"
    );
    assert!(
        top >= 0.98,
        "-c {ctx} {device}: same top token at {top}: {r}"
    );
}
