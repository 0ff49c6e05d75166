//! The models a router serves: named files given on the command line, the GGUF files of
//! `--models-dir` (each top-level `NAME.gguf`, and each subdirectory's first GGUF as the
//! subdirectory's name; projector files `mmproj*` and split parts past the first are not
//! models), and `--models-preset` sections. Requests name models; names are looked up here
//! and never read as paths, so no request opens a file outside these.
//!
//! A preset is an INI file (llama-server's `--models-preset`): a `[NAME]` section per model
//! whose `key = value` lines are `tandem serve` flags for it (`ctx-size = 8192` becomes
//! `--ctx-size 8192`; `true` a bare flag, `false` drops it); `model = PATH` adds a model of
//! that name (a relative path is read from the preset's directory), and `[*]` applies to
//! every model.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// One model the router can load.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    pub name: String,
    pub path: PathBuf,
    /// Flags for its server from the preset.
    pub args: Vec<String>,
}

/// Where models come from.
#[derive(Debug, Clone, Default)]
pub struct Sources {
    /// `(name, path)` given on the command line.
    pub given: Vec<(String, PathBuf)>,
    pub dir: Option<PathBuf>,
    pub preset: Option<PathBuf>,
}

fn is_model_file(p: &Path) -> bool {
    let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
    let lower = name.to_ascii_lowercase();
    let first_part = !lower.contains("-of-") || lower.contains("-00001-of-");
    lower.ends_with(".gguf") && !lower.starts_with("mmproj") && first_part && p.is_file()
}

fn sorted_dir(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    v.sort();
    Ok(v)
}

/// The models of `dir`, by name.
fn scan(dir: &Path) -> Result<Vec<(String, PathBuf)>, String> {
    let read = |d: &Path| sorted_dir(d).map_err(|e| format!("reading {}: {e}", d.display()));
    let mut out = Vec::new();
    for p in read(dir)? {
        if p.is_dir() {
            if let Some(first) = read(&p)?.into_iter().find(|f| is_model_file(f)) {
                let name = p
                    .file_name()
                    .and_then(|n| n.to_str())
                    .unwrap_or("")
                    .to_string();
                out.push((name, first));
            }
        } else if is_model_file(&p) {
            let stem = p.file_stem().and_then(|n| n.to_str()).unwrap_or("");
            let name = stem
                .strip_suffix("-00001-of-00001")
                .unwrap_or(stem)
                .to_string();
            out.push((name, p));
        }
    }
    Ok(out)
}

/// A preset's sections: name → `(key, value)` lines in order.
fn parse_ini(text: &str) -> Result<BTreeMap<String, Vec<(String, String)>>, String> {
    let mut sections: BTreeMap<String, Vec<(String, String)>> = BTreeMap::new();
    let mut current: Option<String> = None;
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            current = Some(name.trim().to_string());
            sections.entry(name.trim().to_string()).or_default();
            continue;
        }
        let Some((k, v)) = line.split_once('=') else {
            return Err(format!(
                "line {}: expected key = value, got '{line}'",
                i + 1
            ));
        };
        let Some(section) = &current else {
            return Err(format!("line {}: '{line}' is outside a [section]", i + 1));
        };
        let v = v.trim().trim_matches('"').to_string();
        sections
            .get_mut(section)
            .expect("inserted")
            .push((k.trim().to_string(), v));
    }
    Ok(sections)
}

/// A preset section's lines as flags (`model` excepted).
fn flags(lines: &[(String, String)]) -> Vec<String> {
    let mut out = Vec::new();
    for (k, v) in lines.iter().filter(|(k, _)| k != "model") {
        let flag = format!("--{}", k.trim_start_matches('-'));
        match v.to_ascii_lowercase().as_str() {
            "true" | "on" | "yes" => out.push(flag),
            "false" | "off" | "no" => {}
            _ => out.extend([flag, v.clone()]),
        }
    }
    out
}

/// Every model of `sources`, in the order given, dir, preset; a name seen twice is an error.
pub fn read(sources: &Sources) -> Result<Vec<Entry>, String> {
    let mut found: Vec<(String, PathBuf)> = sources.given.clone();
    if let Some(dir) = &sources.dir {
        found.extend(scan(dir)?);
    }
    let sections = match &sources.preset {
        None => BTreeMap::new(),
        Some(p) => {
            let text = std::fs::read_to_string(p)
                .map_err(|e| format!("reading the preset {}: {e}", p.display()))?;
            parse_ini(&text).map_err(|e| format!("{}: {e}", p.display()))?
        }
    };
    let base = sources
        .preset
        .as_ref()
        .and_then(|p| p.parent())
        .map(Path::to_path_buf)
        .unwrap_or_default();
    for (name, lines) in &sections {
        if let Some((_, path)) = lines.iter().find(|(k, _)| k == "model") {
            let path = base.join(path);
            if !found.iter().any(|(n, _)| n == name) {
                found.push((name.clone(), path));
            }
        }
    }
    let all = sections.get("*").map(|l| flags(l)).unwrap_or_default();
    let mut out: Vec<Entry> = Vec::with_capacity(found.len());
    for (name, path) in found {
        if out.iter().any(|e| e.name == name) {
            return Err(format!("two models are named '{name}'"));
        }
        let mut args = all.clone();
        args.extend(sections.get(&name).map(|l| flags(l)).unwrap_or_default());
        out.push(Entry { name, path, args });
    }
    if out.is_empty() {
        return Err(
            "no models to serve: --models-dir holds no GGUF file and no preset names one".into(),
        );
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dir_and_a_preset_make_the_catalog() {
        let d = tempfile::tempdir().unwrap();
        let w = |p: &str| {
            let p = d.path().join(p);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, b"x").unwrap();
        };
        w("a.gguf");
        w("mmproj-a.gguf");
        w("big-00001-of-00002.gguf");
        w("big-00002-of-00002.gguf");
        w("sub/z.gguf");
        w("notes.txt");
        let preset = d.path().join("p.ini");
        std::fs::write(
            &preset,
            "[*]\nthreads = 1\n\n[a]\nctx-size = 8192\njinja = true\nmlock = false\n\n[extra]\nmodel = a.gguf\n",
        )
        .unwrap();
        let sources = Sources {
            given: vec![],
            dir: Some(d.path().to_path_buf()),
            preset: Some(preset),
        };
        let c = read(&sources).unwrap();
        let names: Vec<&str> = c.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(names, ["a", "big-00001-of-00002", "sub", "extra"]);
        assert_eq!(
            c[0].args,
            ["--threads", "1", "--ctx-size", "8192", "--jinja"]
        );
        assert_eq!(c[2].path, d.path().join("sub/z.gguf"));
        assert_eq!(c[3].path, d.path().join("a.gguf"));
        assert_eq!(c[3].args, ["--threads", "1"]);
        let bad = parse_ini("k = v\n").unwrap_err();
        assert!(bad.contains("outside a [section]"), "{bad}");
    }
}
