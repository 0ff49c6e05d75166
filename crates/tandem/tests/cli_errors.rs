//! Bad model files end `tandem` with one line on stderr and a non-zero exit, never a panic.

use std::path::Path;
use std::process::Command;

use gguf::{GgmlType, GgufWriter, Value};

fn tandem_on(model: &Path, command: &str) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tandem"))
        .args([command, "-m"])
        .arg(model)
        .args(if command == "run" {
            vec!["-p", "hi", "-n", "1"]
        } else {
            vec![]
        })
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn assert_one_line_error(model: &Path, needle: &str) {
    for command in ["run", "info"] {
        let (ok, stderr) = tandem_on(model, command);
        assert!(!ok, "{command} succeeded on a bad file");
        assert!(!stderr.contains("panicked"), "{command} panicked: {stderr}");
        assert_eq!(
            stderr.trim_end().lines().count(),
            1,
            "{command}: not one line: {stderr}"
        );
        assert!(stderr.starts_with("error: "), "{stderr}");
        assert!(
            stderr.contains(needle),
            "{command}: '{needle}' not in: {stderr}"
        );
    }
}

/// A tiny llama-shaped file: enough metadata and one tensor to get past the header.
fn tiny(arch: &str, n_embd: u32, ty: GgmlType, data: Vec<u8>) -> GgufWriter {
    let mut w = GgufWriter::new();
    w.metadata("general.architecture", Value::String(arch.into()))
        .metadata(&format!("{arch}.embedding_length"), Value::U32(n_embd))
        .metadata(&format!("{arch}.block_count"), Value::U32(1))
        .metadata(&format!("{arch}.feed_forward_length"), Value::U32(64))
        .metadata(&format!("{arch}.attention.head_count"), Value::U32(2))
        .metadata(
            &format!("{arch}.attention.layer_norm_rms_epsilon"),
            Value::F32(1e-5),
        )
        .metadata(&format!("{arch}.vocab_size"), Value::U32(8))
        .tensor("token_embd.weight", &[n_embd as u64, 8], ty, data);
    w
}

#[test]
fn truncated_file() {
    let dir = tempfile::tempdir().unwrap();
    let bytes = tiny("llama", 32, GgmlType::F32, vec![0; 32 * 8 * 4]).to_bytes();
    let path = dir.path().join("truncated.gguf");
    std::fs::write(&path, &bytes[..bytes.len() / 2]).unwrap();
    assert_one_line_error(&path, "truncated");
}

#[test]
fn wrong_magic() {
    let dir = tempfile::tempdir().unwrap();
    let mut bytes = tiny("llama", 32, GgmlType::F32, vec![0; 32 * 8 * 4]).to_bytes();
    bytes[..4].copy_from_slice(b"GGML");
    let path = dir.path().join("magic.gguf");
    std::fs::write(&path, bytes).unwrap();
    assert_one_line_error(&path, "not a GGUF file");
}

#[test]
fn unknown_tensor_type_id() {
    let dir = tempfile::tempdir().unwrap();
    let bytes = tiny("llama", 32, GgmlType::F32, vec![0; 32 * 8 * 4]).to_bytes();
    let name = b"token_embd.weight";
    let at = bytes.windows(name.len()).position(|w| w == name).unwrap() + name.len();
    let type_at = at + 4 + 2 * 8;
    let mut bytes = bytes;
    bytes[type_at..type_at + 4].copy_from_slice(&77u32.to_le_bytes());
    let path = dir.path().join("type.gguf");
    std::fs::write(&path, bytes).unwrap();
    assert_one_line_error(&path, "unknown tensor type id 77");
}

#[test]
fn unsupported_tensor_type() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q8_k.gguf");
    tiny("llama", 256, GgmlType::Q8_K, vec![0; 8 * 292])
        .write(&path)
        .unwrap();
    assert_one_line_error(&path, "tensor 'token_embd.weight' has type Q8_K");
}

#[test]
fn unknown_architecture() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("arch.gguf");
    tiny("mamba9", 32, GgmlType::F32, vec![0; 32 * 8 * 4])
        .write(&path)
        .unwrap();
    assert_one_line_error(&path, "unknown architecture 'mamba9'");
}

#[test]
fn missing_file_and_unknown_name() {
    let (ok, stderr) = tandem_on(Path::new("/nonexistent/model.gguf"), "info");
    assert!(!ok);
    assert!(
        stderr.contains("neither a file nor a known model name"),
        "{stderr}"
    );
}
