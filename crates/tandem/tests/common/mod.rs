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
