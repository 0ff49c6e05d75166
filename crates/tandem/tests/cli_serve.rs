//! `tandem serve`'s start-up: llama-server's flags, refusals before anything is allocated.

use std::process::Command;

fn serve(args: &[&str]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tandem"))
        .arg("serve")
        .args(args)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_plan_over_the_memory_limit_is_refused_naming_what_to_shrink() {
    let (ok, err) = serve(&[
        "-m",
        "smollm2-135m",
        "--port",
        "0",
        "-c",
        "8192",
        "--mem-limit",
        "64M",
    ]);
    assert!(!ok);
    assert!(err.contains("memory plan: weights"), "{err}");
    let last = err.trim_end().lines().last().unwrap();
    assert!(last.starts_with("error: the memory plan"), "{err}");
    assert!(
        last.contains("64.0 MiB --mem-limit") && last.contains("shrink -c"),
        "{last}"
    );
}

#[test]
fn differing_key_and_value_cache_types_are_an_error() {
    let (ok, err) = serve(&["-m", "smollm2-135m", "-ctk", "bf16", "-ctv", "q8_0"]);
    assert!(!ok);
    assert!(err.contains("-ctv q8_0 differs from -ctk bf16"), "{err}");
}

#[test]
fn unknown_flags_are_an_error_and_no_op_flags_a_warning() {
    let (ok, err) = serve(&["-m", "smollm2-135m", "--no-such-flag"]);
    assert!(!ok);
    assert!(err.contains("--no-such-flag"), "{err}");
    let (ok, err) = serve(&[
        "-m",
        "smollm2-135m",
        "--device",
        "cpu",
        "-ngl",
        "-1",
        "--flash-attn",
        "on",
        "--port",
        "0",
        "--mem-limit",
        "1M",
    ]);
    assert!(!ok);
    assert_eq!(err.matches("warning: -ngl").count(), 1, "{err}");
    assert_eq!(err.matches("warning: --flash-attn").count(), 1, "{err}");
}

#[test]
fn ngl_takes_a_count_of_layers_or_all() {
    let (ok, err) = serve(&["-m", "smollm2-135m", "-ngl", "many", "--port", "0"]);
    assert!(!ok);
    let last = err.trim_end().lines().last().unwrap();
    assert_eq!(
        last,
        "error: -ngl: 'many' is not a number of layers (a count, -1 or all)"
    );
}

#[test]
fn too_small_a_context_per_slot_is_an_error() {
    let (ok, err) = serve(&["-m", "smollm2-135m", "-c", "64", "-np", "8", "--port", "0"]);
    assert!(!ok);
    assert!(
        err.contains("per slot") && err.contains("--kv-unified"),
        "{err}"
    );
}

#[test]
fn an_empty_or_padded_api_key_refuses_to_start() {
    for (key, said) in [
        ("", "empty API key"),
        ("   ", "empty API key"),
        (" secret", "whitespace around it"),
    ] {
        let (ok, err) = serve(&["-m", "smollm2-135m", "--port", "0", "--api-key", key]);
        assert!(!ok, "{key:?} started");
        assert!(err.contains(said), "{key:?}: {err}");
    }
    let dir = std::env::temp_dir().join(format!("tandem-keys-{}", std::process::id()));
    std::fs::write(&dir, "# no keys here\n\n").unwrap();
    let (ok, err) = serve(&["--port", "0", "--api-key-file", dir.to_str().unwrap()]);
    std::fs::remove_file(&dir).unwrap();
    assert!(!ok && err.contains("holds no key"), "{err}");
}

/// `--spec-type draft-mtp` drafts with the model's NextN blocks, or an MTP file's (`-md`, or
/// an `mtp-*.gguf` beside a model without them): a file without any is refused.
#[test]
fn mtp_drafts_need_nextn_blocks() {
    let (ok, err) = serve(&["-m", "smollm2-135m", "--spec-type", "draft-mtp"]);
    assert!(!ok);
    let last = err.trim_end().lines().last().unwrap();
    assert!(
        last.contains("holds no multi-token-prediction (nextn) blocks"),
        "{err}"
    );
    let (ok, err) = serve(&[
        "-m",
        "smollm2-135m",
        "-md",
        "smollm2-135m",
        "--spec-type",
        "draft-mtp",
    ]);
    assert!(!ok);
    let last = err.trim_end().lines().last().unwrap();
    assert!(
        last.contains("holds no multi-token-prediction (nextn) blocks"),
        "{err}"
    );
}

#[test]
fn drafter_spec_types_need_a_drafter_file() {
    for t in ["draft-eagle3", "draft-dflash"] {
        let (ok, err) = serve(&["-m", "smollm2-135m", "--spec-type", t]);
        assert!(!ok, "{t} started");
        assert!(
            err.contains(&format!("--spec-type {t} drafts with a drafter file")),
            "{err}"
        );
    }
}
