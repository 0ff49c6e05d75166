//! Helpers the CLI tests share (each test crate uses some of them).
#![allow(dead_code)]

use std::process::Command;

/// `tandem ARGS`: success and stderr.
pub fn tandem(args: &[&str]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tandem"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `tandem ARGS`, which must succeed: its stderr.
pub fn ok(args: &[&str]) -> String {
    let (ok, stderr) = tandem(args);
    assert!(ok, "tandem {args:?}: {stderr}");
    stderr
}

/// `tandem ARGS`, which must succeed: the JSON object its stdout ends with.
pub fn json(args: &[&str]) -> serde_json::Value {
    let out = Command::new(env!("CARGO_BIN_EXE_tandem"))
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "tandem {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    serde_json::from_str(stdout.lines().last().unwrap_or("null")).unwrap()
}

/// `tandem synth` arguments of the small qwen2 model (f32 weights, SmolLM2's tokenizer cut to
/// 320 tokens) that the golden log-probabilities of scripts/gen_rope_golden.sh,
/// gen_lora_golden.sh and gen_kv_golden.sh were computed on.
#[rustfmt::skip]
pub const SYNTH_QWEN2: &[&str] = &[
    "--arch", "qwen2", "--experts", "0", "--n-embd", "128", "--n-layer", "2", "--n-head", "4",
    "--n-head-kv", "2", "--n-ff", "256", "--type", "f32", "--tokenizer", "smollm2-135m",
    "--vocab", "320", "--seed", "7",
];

/// Writes the [`SYNTH_QWEN2`] model to `path`.
pub fn synth_qwen2(path: &str) {
    let mut args = vec!["synth", "-o", path];
    args.extend(SYNTH_QWEN2);
    ok(&args);
}

/// `tandem perplexity` of `model` over one chunk of `n_ctx` on `device` with `flags`, against
/// the golden log-probabilities `tests/golden/{golden}`: the mean KL divergence and the share
/// of positions with the golden's top token, over all `n_ctx / 2 - 1` scored positions.
pub fn against_golden(
    model: &str,
    n_ctx: usize,
    device: &str,
    golden: &str,
    flags: &[&str],
) -> (f64, f64) {
    let golden = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(golden);
    let n = n_ctx.to_string();
    let mut args = vec![
        "perplexity",
        "-m",
        model,
        "-c",
        &n,
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
    assert_eq!(k["positions"], n_ctx / 2 - 1, "{device}: {r}");
    (
        k["kld_mean"].as_f64().unwrap(),
        k["same_top"].as_f64().unwrap(),
    )
}
