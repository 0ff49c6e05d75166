//! `--load-mode` and `--lazy-mode`: a model read into memory, locked, or with its tables left
//! in the file computes what the mapped one does; a lock the system refuses is a load error
//! that says so; an unknown mode is refused by name.

mod common;
use common::{json, ok, tandem};

const TEXT: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../tests/data/eval-prose.txt"
);

/// A small llama with SmolLM2's tokenizer cut to 320 tokens, in `dir`.
fn model(dir: &std::path::Path) -> String {
    let path = dir.join("small.gguf").to_str().unwrap().to_string();
    ok(&[
        "synth",
        "-o",
        &path,
        "--arch",
        "llama",
        "--experts",
        "0",
        "--n-embd",
        "64",
        "--n-layer",
        "2",
        "--n-head",
        "4",
        "--n-head-kv",
        "2",
        "--n-ff",
        "128",
        "--type",
        "q8_0",
        "--tokenizer",
        "smollm2-135m",
        "--vocab",
        "320",
    ]);
    path
}

/// `tandem perplexity` of `model` over two chunks of 128 tokens, with `extra` flags.
fn perplexity<'a>(model: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec!["perplexity", "-m", model, "-f", TEXT, "-c", "128"];
    args.extend(["--chunks", "2"]);
    args.extend(extra);
    args.push("--json");
    args
}

fn ppl(model: &str, extra: &[&str]) -> f64 {
    json(&perplexity(model, extra))["ppl"].as_f64().unwrap()
}

#[test]
fn every_load_mode_computes_the_same() {
    let dir = tempfile::tempdir().unwrap();
    let model = &model(dir.path());
    let mapped = ppl(model, &[]);
    for extra in [
        &["--load-mode", "none"][..],
        &["--lazy-mode", "on"],
        &["--lazy-mode", "off", "--load-mode", "mmap"],
    ] {
        assert_eq!(ppl(model, extra), mapped, "{extra:?}");
    }
    let args = perplexity(model, &["--load-mode", "mlock"]);
    match tandem(&args) {
        (true, _) => assert_eq!(ppl(model, &["--load-mode", "mmap+mlock"]), mapped),
        (false, err) => assert!(err.contains("mlock"), "{err}"),
    }
}

/// On the wgpu backend (lavapipe in CI) a table left in the file is embedded from the map:
/// the perplexity is the uploaded table's, to the bit.
#[test]
fn lazy_tables_on_the_gpu_compute_the_same() {
    if !gpu::adapter_for_tests() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let model = &model(dir.path());
    let uploaded = ppl(model, &["--device", "gpu", "--lazy-mode", "off"]);
    assert_eq!(
        ppl(model, &["--device", "gpu", "--lazy-mode", "on"]),
        uploaded
    );
}

#[test]
fn an_unknown_mode_is_refused_by_name() {
    for (flag, value) in [("--load-mode", "dio"), ("--lazy-mode", "maybe")] {
        let (ok, err) = tandem(&["perplexity", "-m", "any.gguf", "-f", TEXT, flag, value]);
        assert!(!ok && err.contains(value), "{flag} {value}: {err}");
    }
}
