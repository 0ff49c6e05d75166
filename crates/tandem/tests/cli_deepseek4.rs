//! DeepSeek-V4 against llama.cpp: a synthetic deepseek4 (every feature on: a window smaller
//! than the context, blocks compressed at ratios 4 and 128, the lightning indexer picking 8
//! of up to 1,024 compressed blocks, hyper-connections, hash-routed blocks) read as
//! llama-perplexity reads it at -c 1024 (two chunks, 1,022 positions) and -c 4096 (2,047
//! positions), golden log-probabilities from scripts/gen_dsv4_golden.sh, on the CPU and
//! the reference backend, and at -c 1024 on the wgpu backend (lavapipe in CI).

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
    let gpu = gpu::adapter_for_tests();
    let short: &[&str] = if gpu {
        &["cpu", "reference", "gpu"]
    } else {
        &["cpu", "reference"]
    };
    for (ctx, positions, devices) in [(1024, 1022, short), (4096, 2047, &["cpu", "reference"][..])]
    {
        let golden = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join(format!("tests/golden/deepseek4-c{ctx}-llamacpp.kld"));
        for &device in devices {
            let r = json(&[
                "perplexity",
                "-m",
                &model,
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
    }
}
