//! Helpers the CLI tests of `tandem quantize` and `tandem imatrix` share.

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
