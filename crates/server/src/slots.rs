//! llama-server's `POST /slots/{id}?action=save|restore|erase`: a slot's cached prompt
//! ([`engine::SlotOp`]) saved to a file under `--slot-save-path`, restored from one into
//! the prefix cache, or erased from it — within the caller's key's namespace.
//!
//! File (little-endian): magic `TDKV`, version (u32), the model's hash (u64), the KV
//! layout (layers, KV heads, head size, element type, window: u32 each, the window 0 where
//! every layer keeps every position; then a block's bytes and a windowed companion's: u64
//! each), the token count (u64), the tokens (u32 each), then the prefix's bytes
//! ([`SavedPrefix`]).

use std::path::{Path, PathBuf};
use std::time::Instant;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path as UrlPath, Query, State};
use axum::{Extension, Json};
use engine::{SavedPrefix, SlotDone, SlotOp};
use gguf::GgmlType;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::error::ApiError;
use crate::state::Shared;
use crate::validate::parse;
use crate::{body, namespace_of, ready, KeyNamespace};

const MAGIC: &[u8; 4] = b"TDKV";
/// 2: a quantized pool's blocks are stored rotated (`kv::Rotation`). 3: the window and the
/// bytes of a block and of a companion (a windowed pool's file carries its last window).
const VERSION: u32 = 3;

/// What of a pool's shape a file records: layers, KV heads, head size, element type, window
/// (0: none), a block's bytes, a companion's bytes.
fn shape(kv: &kv::KvConfig) -> (usize, usize, usize, GgmlType, usize, usize, usize) {
    let window = kv.window.map_or(0, |w| w.size);
    let bytes = (kv.full_block_bytes(), kv.windowed_block_bytes());
    (
        kv.n_layer,
        kv.n_head_kv,
        kv.head_dim,
        kv.ty,
        window,
        bytes.0,
        bytes.1,
    )
}

#[derive(Deserialize)]
pub struct SlotAction {
    action: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct FileName {
    filename: Option<String>,
}

/// The file `name` under `dir`: a plain file name, nothing that leaves the directory.
fn file_in(dir: &Path, name: Option<String>) -> Result<(String, PathBuf), ApiError> {
    let name = name.ok_or_else(|| ApiError::invalid("filename", "filename is required"))?;
    let plain = !name.is_empty()
        && !name.starts_with('.')
        && !name.contains(['/', '\\', '\0'])
        && name.len() <= 255;
    if !plain {
        return Err(ApiError::invalid(
            "filename",
            format!("filename '{name}' must be a plain file name (no directories, not starting with a dot)"),
        ));
    }
    let path = dir.join(&name);
    Ok((name, path))
}

fn encode(hash: u64, p: &SavedPrefix) -> Vec<u8> {
    let mut b = Vec::with_capacity(48 + 4 * p.tokens.len() + p.data.len());
    b.extend_from_slice(MAGIC);
    b.extend_from_slice(&VERSION.to_le_bytes());
    b.extend_from_slice(&hash.to_le_bytes());
    let (layers, heads, dim, ty, window, block, companion) = shape(&p.kv);
    for v in [layers, heads, dim] {
        b.extend_from_slice(&(v as u32).to_le_bytes());
    }
    b.extend_from_slice(&ty.id().to_le_bytes());
    b.extend_from_slice(&(window as u32).to_le_bytes());
    for v in [block, companion] {
        b.extend_from_slice(&(v as u64).to_le_bytes());
    }
    b.extend_from_slice(&(p.tokens.len() as u64).to_le_bytes());
    p.tokens
        .iter()
        .for_each(|t| b.extend_from_slice(&t.to_le_bytes()));
    b.extend_from_slice(&p.data);
    b
}

/// The prefix a file holds, for a server whose model hashes to `hash` and whose pool is
/// `kv`.
fn decode(bytes: &[u8], hash: u64, kv: kv::KvConfig) -> Result<SavedPrefix, String> {
    let mut at = 0;
    let mut take = |n: usize| -> Result<&[u8], String> {
        let s = bytes
            .get(at..at + n)
            .ok_or_else(|| "the file ends early".to_string())?;
        at += n;
        Ok(s)
    };
    let u32_at = |b: &[u8]| u32::from_le_bytes(b.try_into().expect("4 bytes"));
    if take(4)? != MAGIC {
        return Err("not a tandem slot file".into());
    }
    let version = u32_at(take(4)?);
    if version != VERSION {
        return Err(format!(
            "slot file version {version}, this server reads {VERSION}"
        ));
    }
    if u64::from_le_bytes(take(8)?.try_into().expect("8 bytes")) != hash {
        return Err("the file was saved from another model".into());
    }
    let (layers, heads, dim) = (u32_at(take(4)?), u32_at(take(4)?), u32_at(take(4)?));
    let ty = GgmlType::from_id(u32_at(take(4)?)).ok_or("an unknown KV type")?;
    let window = u32_at(take(4)?) as usize;
    let u64_at = |b: &[u8]| u64::from_le_bytes(b.try_into().expect("8 bytes")) as usize;
    let (block, companion) = (u64_at(take(8)?), u64_at(take(8)?));
    let file = (layers as usize, heads as usize, dim as usize, ty);
    let file = (file.0, file.1, file.2, file.3, window, block, companion);
    let here = shape(&kv);
    if file != here {
        let keeps = |w: usize| match w {
            0 => "every position".to_string(),
            w => format!("windows of {w}"),
        };
        return Err(format!(
            "the file's KV ({layers} layers, {heads} heads of {dim}, {ty}, keeping {}) is not this server's ({} layers, {} heads of {}, {}, keeping {}): restart with the same -ctk and --swa-full",
            keeps(window),
            kv.n_layer,
            kv.n_head_kv,
            kv.head_dim,
            kv.ty,
            keeps(here.4)
        ));
    }
    let n = u64_at(take(8)?);
    let tokens = take(n.checked_mul(4).ok_or("a bad token count")?)?
        .chunks_exact(4)
        .map(u32_at)
        .collect();
    let data = bytes[at..].to_vec();
    Ok(SavedPrefix { tokens, kv, data })
}

/// `POST /slots/{id}?action=...`.
pub async fn action(
    State(s): State<Shared>,
    key: Option<Extension<KeyNamespace>>,
    UrlPath(id): UrlPath<String>,
    Query(q): Query<SlotAction>,
    b: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, ApiError> {
    if !s.config.slots {
        return Err(ApiError::not_supported(
            "This server does not support slots endpoint (start it without --no-slots)",
        ));
    }
    let r = ready(&s)?;
    let n_slots = r.engine.config().n_parallel;
    let slot = id
        .parse::<usize>()
        .ok()
        .filter(|&i| i < n_slots)
        .ok_or_else(|| {
            ApiError::not_found(format!("no slot '{id}' (slots 0 to {})", n_slots - 1))
        })?;
    let ns = key.map_or(kv::SHARED, |Extension(KeyNamespace(k))| {
        namespace_of((k, kv::SHARED))
    });
    let bytes = body(b)?;
    let dir = || {
        s.config.slot_save_path.clone().ok_or_else(|| {
            ApiError::not_supported(
                "This server does not support slots action. Start it with `--slot-save-path`",
            )
        })
    };
    let file = |bytes: &Bytes| -> Result<(String, PathBuf), ApiError> {
        let f: FileName = if bytes.iter().all(u8::is_ascii_whitespace) {
            FileName::default()
        } else {
            parse(bytes)?
        };
        file_in(&dir()?, f.filename)
    };
    let t0 = Instant::now();
    let done = |op| async move {
        r.engine
            .slot(slot, ns, op)
            .await?
            .map_err(|why| ApiError::invalid("id_slot", why))
    };
    let ms = || t0.elapsed().as_secs_f64() * 1e3;
    match q.action.as_deref() {
        Some("save") => {
            let (name, path) = file(&bytes)?;
            let SlotDone::Saved(saved) = done(SlotOp::Save).await? else {
                return Err(ApiError::internal("the engine answered another operation"));
            };
            let data = encode(r.model_hash, &saved);
            std::fs::write(&path, &data)
                .map_err(|e| ApiError::internal(format!("cannot write {}: {e}", path.display())))?;
            Ok(Json(json!({
                "id_slot": slot, "filename": name, "n_saved": saved.tokens.len(),
                "n_written": data.len(), "timings": {"save_ms": ms()},
            })))
        }
        Some("restore") => {
            let (name, path) = file(&bytes)?;
            let data = std::fs::read(&path)
                .map_err(|e| ApiError::invalid("filename", format!("cannot read {name}: {e}")))?;
            let pool = r.kv_config.clone();
            let saved = decode(&data, r.model_hash, pool)
                .map_err(|why| ApiError::invalid("filename", format!("{name}: {why}")))?;
            let SlotDone::Restored(n) = done(SlotOp::Restore(Box::new(saved))).await? else {
                return Err(ApiError::internal("the engine answered another operation"));
            };
            Ok(Json(json!({
                "id_slot": slot, "filename": name, "n_restored": n, "n_read": data.len(),
                "timings": {"restore_ms": ms()},
            })))
        }
        Some("erase") => {
            let SlotDone::Erased(n) = done(SlotOp::Erase).await? else {
                return Err(ApiError::internal("the engine answered another operation"));
            };
            Ok(Json(json!({"id_slot": slot, "n_erased": n})))
        }
        other => Err(ApiError::invalid(
            "action",
            format!(
                "action must be save, restore or erase, got {}",
                other.unwrap_or("none")
            ),
        )),
    }
}
