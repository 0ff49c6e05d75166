//! Ollama's model routes over the model this server serves: `/api/tags` (the models here),
//! `/api/show` (its details, GGUF metadata, template and capabilities), `/api/ps` (loaded,
//! unless the engine sleeps, with when it will), `/api/pull` (a model tandem knows, fetched
//! into the cache as `tandem pull` does) and `/api/version`.
//!
//! A model is named as Ollama names them: the served id with `:latest` when it has no tag.

use std::time::{Duration, SystemTime};

use serde::Deserialize;
use serde_json::{json, Map, Value};

use super::reply::rfc3339;
use crate::error::ApiError;
use crate::state::{AppState, Ready};

/// The Ollama API version this server answers as: the release whose routes and fields it
/// follows, which clients check before using newer ones.
pub const OLLAMA_VERSION: &str = "0.13.0";

/// A model tandem knows by name, fetched into its cache (`/api/pull`).
#[derive(Debug, Clone)]
pub struct Pulled {
    pub size: u64,
    /// Its sha256, hex.
    pub sha256: String,
}

/// Fetches a model tandem knows (`tandem pull`): `Ok(None)` when `name` is not one, with
/// the names it knows in the `Err` of a failed fetch.
pub type Puller = fn(&str) -> Result<Option<Pulled>, String>;

/// The served model's name as Ollama lists it.
pub fn listed_name(ready: &Ready) -> String {
    match ready.model_id.contains(':') {
        true => ready.model_id.clone(),
        false => format!("{}:latest", ready.model_id),
    }
}

/// Whether `asked` names the served model (by any alias, with or without `:latest`).
pub fn names_served(ready: &Ready, asked: &str) -> bool {
    let bare = asked.strip_suffix(":latest").unwrap_or(asked);
    ready.aliases.iter().any(|a| a == asked || a == bare)
}

/// `model` checked against the served model: 400 when missing, 404 as Ollama words it when
/// it is another.
pub fn check_model(ready: &Ready, model: Option<&str>) -> Result<(), ApiError> {
    match model.filter(|m| !m.is_empty()) {
        None => Err(ApiError::invalid("model", "model is required")),
        Some(m) if names_served(ready, m) => Ok(()),
        Some(m) => Err(ApiError::not_found(format!(
            "model \"{m}\" not found, try pulling it first (this server serves \"{}\")",
            listed_name(ready)
        ))),
    }
}

/// A parameter count as Ollama writes it: `134.52M`, `1.5B`, `8B`.
pub fn human_count(n: u64) -> String {
    let x = n as f64;
    let (v, unit, frac) = match n {
        1_000_000_000.. => (x / 1e9, "B", 1),
        1_000_000.. => (x / 1e6, "M", 2),
        1_000.. => (x / 1e3, "K", 1),
        _ => return n.to_string(),
    };
    match v.fract() == 0.0 {
        true => format!("{v:.0}{unit}"),
        false => format!("{v:.frac$}{unit}"),
    }
}

/// llama.cpp's `llama_ftype` names, by `general.file_type`.
const FILE_TYPES: &[(u32, &str)] = &[
    (0, "F32"),
    (1, "F16"),
    (2, "Q4_0"),
    (3, "Q4_1"),
    (7, "Q8_0"),
    (8, "Q5_0"),
    (9, "Q5_1"),
    (10, "Q2_K"),
    (11, "Q3_K_S"),
    (12, "Q3_K_M"),
    (13, "Q3_K_L"),
    (14, "Q4_K_S"),
    (15, "Q4_K_M"),
    (16, "Q5_K_S"),
    (17, "Q5_K_M"),
    (18, "Q6_K"),
    (19, "IQ2_XXS"),
    (20, "IQ2_XS"),
    (21, "Q2_K_S"),
    (22, "IQ3_XS"),
    (23, "IQ3_XXS"),
    (24, "IQ1_S"),
    (25, "IQ4_NL"),
    (26, "IQ3_S"),
    (27, "IQ3_M"),
    (28, "IQ2_S"),
    (29, "IQ2_M"),
    (30, "IQ4_XS"),
    (31, "IQ1_M"),
    (32, "BF16"),
    (36, "TQ1_0"),
    (37, "TQ2_0"),
    (38, "MXFP4_MOE"),
];

/// What Ollama shows of a model file: its details and metadata, read from its GGUF header.
#[derive(Debug, Clone)]
pub struct Card {
    pub details: Value,
    pub model_info: Map<String, Value>,
    pub modified_at: String,
}

/// Arrays longer than this are shown as `null` in `model_info` (the vocabulary, merges),
/// as Ollama shows them unless asked for verbose output.
const SHORT_ARRAY: usize = 64;

fn shown(v: &gguf::Value, verbose: bool) -> Value {
    use gguf::Value as G;
    match v {
        G::String(s) => json!(s),
        G::Bool(b) => json!(b),
        G::F32(x) => json!(x),
        G::F64(x) => json!(x),
        G::Array(_, items) if items.len() > SHORT_ARRAY && !verbose => Value::Null,
        G::Array(_, items) => Value::Array(items.iter().map(|v| shown(v, verbose)).collect()),
        other => other.as_integer().map_or(Value::Null, |i| json!(i as i64)),
    }
}

/// The card of the served model, read from its file; `verbose`: long arrays in full.
pub fn card(s: &AppState, ready: &Ready, verbose: bool) -> Result<Card, ApiError> {
    let path = &s.config.model_path;
    let file = gguf::GgufFile::open(path)
        .map_err(|e| ApiError::internal(format!("reading {}: {e}", path.display())))?;
    let md = &file.header.metadata;
    let arch = md
        .str("general.architecture")
        .unwrap_or("unknown")
        .to_string();
    let quant = md
        .opt_u32("general.file_type")
        .ok()
        .flatten()
        .and_then(|t| FILE_TYPES.iter().find(|f| f.0 == t))
        .map_or("unknown", |f| f.1);
    let mut model_info: Map<String, Value> = md
        .iter()
        .filter(|(k, _)| !k.starts_with("tokenizer.chat_template"))
        .map(|(k, v)| (k.to_string(), shown(v, verbose)))
        .collect();
    model_info.insert("general.parameter_count".into(), json!(ready.n_params));
    let modified = std::fs::metadata(path)
        .and_then(|m| m.modified())
        .unwrap_or(SystemTime::UNIX_EPOCH);
    Ok(Card {
        details: json!({
            "parent_model": "",
            "format": "gguf",
            "family": arch,
            "families": [arch],
            "parameter_size": human_count(ready.n_params),
            "quantization_level": quant,
        }),
        model_info,
        modified_at: rfc3339(modified),
    })
}

/// The served model as `/api/tags` lists it.
pub fn tag(ready: &Ready, card: &Card) -> Value {
    let name = listed_name(ready);
    json!({
        "name": name,
        "model": name,
        "modified_at": card.modified_at,
        "size": ready.model_bytes,
        "digest": format!("{:016x}", ready.model_hash),
        "details": card.details,
    })
}

/// What the model can do, as Ollama names it.
pub fn capabilities(ready: &Ready) -> Vec<&'static str> {
    let mut caps = vec!["completion"];
    if ready.tool_support.tools {
        caps.push("tools");
    }
    if ready.tok.fim().is_some() {
        caps.push("insert");
    }
    let thinks = ready
        .template_source
        .as_deref()
        .is_some_and(|t| t.contains("<think>") || t.contains("enable_thinking"));
    if thinks {
        caps.push("thinking");
    }
    if ready.vision.is_some() {
        caps.push("vision");
    }
    if ready.embeddings.is_some() {
        caps.push("embedding");
    }
    caps
}

/// The server's sampling defaults as a Modelfile's `PARAMETER` lines.
pub fn parameters(ready: &Ready) -> String {
    let d = &ready.defaults.sampling;
    let mut p = format!(
        "temperature {}\ntop_k {}\ntop_p {}\nmin_p {}\n",
        d.temperature, d.top_k, d.top_p, d.min_p
    );
    p.push_str(&format!("num_ctx {}\n", ready.engine.config().slot_ctx()));
    p
}

/// `/api/show`'s body for `card`.
pub fn show(s: &AppState, ready: &Ready, card: &Card) -> Value {
    let modelfile = format!(
        "# Modelfile of the model tandem serves\nFROM {}\n",
        s.config.model_path.display()
    );
    json!({
        "modelfile": modelfile,
        "parameters": parameters(ready),
        "template": ready.template_source.clone().unwrap_or_default(),
        "details": card.details,
        "model_info": card.model_info,
        "capabilities": capabilities(ready),
        "modified_at": card.modified_at,
    })
}

/// The served model as `/api/ps` lists it while loaded; `sleeps_in` is the idle time left
/// before the engine sleeps (`None`: never).
/// `size_vram` is the engine's plan when its device is a GPU (all of it with `-ngl` past the
/// model's blocks), else 0.
pub fn running(ready: &Ready, card: &Card, sleeps_in: Option<Duration>) -> Value {
    // Never: as far ahead as Ollama puts it (Go's longest duration, about 292 years).
    let left = sleeps_in.unwrap_or(Duration::from_secs(292 * 365 * 86_400));
    let on_gpu = match ready.engine.config().device {
        engine::DeviceKind::Gpu => ready.plan.total(),
        _ => 0,
    };
    let name = listed_name(ready);
    json!({
        "name": name,
        "model": name,
        "size": ready.plan.total(),
        "digest": format!("{:016x}", ready.model_hash),
        "details": card.details,
        "expires_at": rfc3339(SystemTime::now() + left),
        "size_vram": on_gpu,
        "context_length": ready.engine.config().slot_ctx(),
    })
}

/// `/api/show`'s and `/api/pull`'s body: the model (`name` in older clients).
#[derive(Debug, Deserialize, Default)]
#[serde(default)]
pub struct Named {
    pub model: Option<String>,
    pub name: Option<String>,
    pub stream: Option<bool>,
    pub insecure: Option<bool>,
    pub verbose: Option<bool>,
}

impl Named {
    pub fn model(&self) -> Result<&str, ApiError> {
        self.model
            .as_deref()
            .or(self.name.as_deref())
            .filter(|m| !m.is_empty())
            .ok_or_else(|| ApiError::invalid("model", "model is required"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parameter_counts_read_as_ollamas() {
        assert_eq!(human_count(134_515_008), "134.52M");
        assert_eq!(human_count(1_543_714_304), "1.5B");
        assert_eq!(human_count(8_000_000_000), "8B");
        assert_eq!(human_count(268_098_176), "268.10M");
        assert_eq!(human_count(999), "999");
    }
}
