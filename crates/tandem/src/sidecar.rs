//! Drafter files beside a model, found as llama.cpp finds the sidecars a repository ships:
//! a `.gguf` in the model's folder whose name holds the drafter's keyword (`dspark-`,
//! `dflash-`, `eagle3-`; `mtp-` for a model without multi-token-prediction blocks of its
//! own), the one whose quantization bits (the first number of the name's
//! last `-` part, split suffix aside: `Q4_K_M` → 4) are nearest the model's, the first by
//! name among equals.

use std::path::{Path, PathBuf};

/// The sidecar keyword of `--spec-type` `spec_type`, for the kinds that have one.
pub fn keyword(spec_type: &str) -> Option<&'static str> {
    match spec_type {
        "draft-dspark" => Some("dspark-"),
        "draft-dflash" => Some("dflash-"),
        "draft-eagle3" => Some("eagle3-"),
        _ => None,
    }
}

/// Whether the model file at `model` holds multi-token-prediction blocks of its own (an
/// unreadable file says no: loading it says why).
pub fn has_nextn(model: &Path) -> bool {
    let Ok(file) = gguf::GgufFile::open(model) else {
        return false;
    };
    let md = &file.header.metadata;
    let arch = md.str("general.architecture").unwrap_or_default();
    let key = format!("{arch}.nextn_predict_layers");
    md.opt_u32(&key).ok().flatten().unwrap_or(0) > 0
}

/// The sidecar named by `keyword` beside `model`, if there is one.
pub fn find(model: &Path, keyword: &str) -> Option<PathBuf> {
    let dir = match model.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let want = quant_bits(&model.file_name()?.to_string_lossy());
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok())
        .filter(|e| e.path().is_file())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".gguf") && n.contains(keyword))
        .collect();
    names.sort();
    let best = names.iter().min_by_key(|n| quant_bits(n).abs_diff(want))?;
    Some(dir.join(best))
}

/// The bits of a file name's quantization tag (0 where it has none).
fn quant_bits(name: &str) -> u32 {
    let mut stem = name.strip_suffix(".gguf").unwrap_or(name);
    // A split's `-00001-of-00003`.
    if let Some(i) = stem.rfind("-of-") {
        if let Some(j) = stem[..i].rfind('-') {
            let (a, b) = (&stem[j + 1..i], &stem[i + 4..]);
            if !a.is_empty() && a.bytes().chain(b.bytes()).all(|c| c.is_ascii_digit()) {
                stem = &stem[..j];
            }
        }
    }
    let tag = stem.rsplit('-').next().unwrap_or("");
    let digits: String = tag
        .chars()
        .skip_while(|c| !c.is_ascii_digit())
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sidecar_nearest_the_model_s_bits_is_found() {
        let dir = tempfile::tempdir().unwrap();
        for name in [
            "Qwen3-8B-Q4_K_M.gguf",
            "dspark-Qwen3-8B-Q8_0.gguf",
            "dspark-Qwen3-8B-Q4_K_M.gguf",
            "dflash-Qwen3-8B-Q4_K_M.gguf",
            "dspark-notes.txt",
        ] {
            std::fs::write(dir.path().join(name), b"").unwrap();
        }
        let model = dir.path().join("Qwen3-8B-Q4_K_M.gguf");
        assert_eq!(
            find(&model, "dspark-"),
            Some(dir.path().join("dspark-Qwen3-8B-Q4_K_M.gguf"))
        );
        assert_eq!(
            find(&model, "dflash-"),
            Some(dir.path().join("dflash-Qwen3-8B-Q4_K_M.gguf"))
        );
        assert_eq!(find(&model, "eagle3-"), None);
        assert_eq!(quant_bits("m-UD-IQ2_XXS-00001-of-00003.gguf"), 2);
        assert_eq!(quant_bits("model.gguf"), 0);
    }

    #[test]
    fn a_model_s_own_nextn_blocks_are_read_from_its_metadata() {
        let dir = tempfile::tempdir().unwrap();
        let file = |name: &str, nextn: Option<u32>| {
            let mut w = gguf::GgufWriter::new();
            w.metadata(
                "general.architecture",
                gguf::Value::String("deepseek4".into()),
            );
            if let Some(n) = nextn {
                w.metadata("deepseek4.nextn_predict_layers", gguf::Value::U32(n));
            }
            let path = dir.path().join(name);
            w.write(&path).unwrap();
            path
        };
        assert!(has_nextn(&file("with.gguf", Some(1))));
        assert!(!has_nextn(&file("none.gguf", Some(0))));
        assert!(!has_nextn(&file("absent.gguf", None)));
        assert!(!has_nextn(&dir.path().join("missing.gguf")));
    }
}
