//! Shared test helpers: locating the real models and the golden data.

#![allow(dead_code)]

use std::path::{Path, PathBuf};

/// The project's real models: `tandem pull` name and file name.
pub const MODELS: [(&str, &str); 4] = [
    ("smollm2-135m", "SmolLM2-135M-Instruct.Q4_1.gguf"),
    (
        "qwen2.5-coder-0.5b",
        "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
    ),
    (
        "qwen2.5-coder-1.5b",
        "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
    ),
    ("gemma3-270m", "gemma-3-270m-q4_k_m.gguf"),
];

/// The golden file (in `tests/golden/`) for each model.
pub fn golden_name(model: &str) -> &'static str {
    if model.starts_with("qwen2.5-coder") {
        "qwen2.5-coder.json"
    } else if model == "gemma3-270m" {
        "gemma3-270m.json"
    } else {
        "smollm2-135m.json"
    }
}

/// The folder holding models: `$TANDEM_MODELS`, else `~/.cache/tandem/models`.
pub fn models_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("TANDEM_MODELS") {
        return PathBuf::from(dir);
    }
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_default();
    home.join(".cache/tandem/models")
}

/// Path of the model pulled as `name`; fails the test with the command to fetch it.
pub fn model_path(name: &str) -> PathBuf {
    let file = MODELS
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, f)| *f)
        .unwrap_or_else(|| panic!("unknown model {name}"));
    let path = models_dir().join(file);
    assert!(
        path.is_file(),
        "model {} not found; run `tandem pull {name}` (or set TANDEM_MODELS)",
        path.display()
    );
    path
}

/// Model `name`, opened (its metadata is `.header.metadata`).
pub fn open(name: &str) -> gguf::GgufFile {
    let path = model_path(name);
    gguf::GgufFile::open(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn crate_dir() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The golden JSON for model `name`.
pub fn golden(name: &str) -> serde_json::Value {
    let path = crate_dir().join("tests/golden").join(golden_name(name));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).expect("golden json")
}

/// An evaluation text from `tests/data/` at the repository root.
pub fn eval_text(file: &str) -> String {
    let path = crate_dir().join("../../tests/data").join(file);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// GPT-2's byte-to-character map, for spelling synthetic vocabularies.
pub fn byte_char(b: u8) -> char {
    let printable = |b: u8| {
        (0x21..=0x7E).contains(&b) || (0xA1..=0xAC).contains(&b) || (0xAE..=0xFF).contains(&b)
    };
    if printable(b) {
        return b as char;
    }
    let rank = (0..b).filter(|&x| !printable(x)).count() as u32;
    char::from_u32(0x100 + rank).unwrap()
}

/// Metadata of a small byte-level BPE vocabulary: the 256 byte tokens, then the tokens formed by
/// `merges` (in order), then `specials` as `(text, token_type)`; `extra` adds or overrides keys.
pub fn synthetic(
    merges: &[&str],
    specials: &[(&str, i32)],
    extra: &[(&str, gguf::Value)],
) -> gguf::Metadata {
    let mut tokens: Vec<String> = (0..=255u8).map(|b| byte_char(b).to_string()).collect();
    for m in merges {
        tokens.push(m.replace(' ', ""));
    }
    let mut types = vec![1i32; tokens.len()];
    for (text, ty) in specials {
        tokens.push(text.to_string());
        types.push(*ty);
    }
    let mut w = gguf::GgufWriter::new();
    let mut keys: Vec<(String, gguf::Value)> = vec![
        (
            "tokenizer.ggml.model".into(),
            gguf::Value::String("gpt2".into()),
        ),
        (
            "tokenizer.ggml.pre".into(),
            gguf::Value::String("qwen2".into()),
        ),
        (
            "tokenizer.ggml.tokens".into(),
            gguf::Value::strings(&tokens),
        ),
        (
            "tokenizer.ggml.token_type".into(),
            gguf::Value::Array(
                gguf::ValueType::I32,
                types.iter().map(|&t| gguf::Value::I32(t)).collect(),
            ),
        ),
        ("tokenizer.ggml.merges".into(), gguf::Value::strings(merges)),
    ];
    for (k, v) in extra {
        match keys.iter_mut().find(|(key, _)| key == k) {
            Some(slot) => slot.1 = v.clone(),
            None => keys.push((k.to_string(), v.clone())),
        }
    }
    for (k, v) in keys {
        w.metadata(&k, v);
    }
    gguf::Gguf::parse(&w.to_bytes())
        .expect("synthetic gguf")
        .metadata
}
