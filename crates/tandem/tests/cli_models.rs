//! `tandem run` and `tandem perplexity` on the real SmolLM2 model (pulled if missing).

use std::process::Command;

mod common;
use common::json as tandem;

#[test]
fn greedy_text_is_identical_across_ubatch_and_threads() {
    let prompt = "Write a Python function that checks whether a number is prime.";
    let base = [
        "run",
        "-m",
        "smollm2-135m",
        "--chat",
        "-p",
        prompt,
        "-n",
        "64",
        "--temp",
        "0",
        "--json",
    ];
    let with = |extra: &[&str]| {
        let mut args = base.to_vec();
        args.extend_from_slice(extra);
        tandem(&args)
    };
    let reference = with(&["-t", "2"]);
    assert_eq!(reference["tokens"].as_array().unwrap().len(), 64);
    assert!(!reference["text"].as_str().unwrap().is_empty());
    for extra in [
        &["-t", "2", "-ub", "1"][..],
        &["-t", "1"][..],
        &["-t", "1", "-ub", "7"][..],
    ] {
        let other = with(extra);
        assert_eq!(
            other["tokens"], reference["tokens"],
            "tokens differ with {extra:?}"
        );
        assert_eq!(
            other["text"], reference["text"],
            "text differs with {extra:?}"
        );
    }
}

/// llama.cpp's figures on this machine (`llama-perplexity -c 512 --chunks 16`).
#[test]
fn smollm2_perplexity_within_one_percent_of_llama_cpp() {
    let data = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/data/");
    for (file, llama_cpp) in [("eval-prose.txt", 18.3914), ("eval-code.txt", 5.3766)] {
        let path = format!("{data}{file}");
        let out = tandem(&[
            "perplexity",
            "-m",
            "smollm2-135m",
            "-f",
            &path,
            "-c",
            "512",
            "--chunks",
            "16",
            "--json",
        ]);
        let ppl = out["ppl"].as_f64().unwrap();
        let rel = (ppl - llama_cpp) / llama_cpp;
        eprintln!(
            "{file}: tandem {ppl:.4}, llama.cpp {llama_cpp}, {:+.2}%",
            rel * 100.0
        );
        assert!(
            rel.abs() < 0.01,
            "{file}: perplexity {ppl} is {:+.2}% from llama.cpp's {llama_cpp}",
            rel * 100.0
        );
    }
}

/// `--device auto` (the default) takes a real GPU when wgpu finds one and the CPU otherwise
/// (CI's only adapter is lavapipe, a CPU-type one: auto must not take it), and listing the
/// adapters prints nothing (Mesa's device-select layer would complain of a missing display).
#[test]
fn auto_takes_a_real_gpu_or_the_cpu_and_lists_adapters_quietly() {
    let out = Command::new(env!("CARGO_BIN_EXE_tandem"))
        .args(["info", "-m", "smollm2-135m"])
        .env_remove("XDG_RUNTIME_DIR")
        .env_remove("WAYLAND_DISPLAY")
        .env_remove("DISPLAY")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.is_empty(), "{stderr}");
    let want = match gpu::real_gpu() {
        true => "gpu",
        false => "cpu",
    };
    let stdout = String::from_utf8(out.stdout).unwrap();
    let device = stdout.lines().find(|l| l.starts_with("device:")).unwrap();
    assert_eq!(device.split_whitespace().nth(1), Some(want), "{stdout}");
}

/// A reader that closes the pipe early (`tandem info | head -1`) ends the command quietly:
/// no panic of `println!` into a closed pipe.
#[test]
fn printing_into_a_closed_pipe_is_no_panic() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_tandem"))
        .args(["info", "-m", "smollm2-135m"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_ne!(out.status.code(), Some(101), "{stderr}");
}
