//! LoRA adapters as llama-server serves them: loaded at start (`--lora`, `--lora-scaled`;
//! `--lora-init-without-apply` at scale 0), listed and scaled for every request without
//! its own by `GET`/`POST /lora-adapters`, and per request by `lora: [{id, scale}]` (the
//! adapters it leaves out at 0). Requests with different scales run in the same steps,
//! each row with its own; the engine caches their prompts apart.

use std::sync::Mutex;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::Json;
use serde_json::{json, Value};

use crate::error::ApiError;
use crate::state::Shared;
use crate::{body, ready};

/// An adapter given on the command line.
#[derive(Debug, Clone, PartialEq)]
pub struct LoraSetting {
    pub path: std::path::PathBuf,
    pub scale: f32,
}

impl LoraSetting {
    /// llama-server's flags: `--lora` paths at scale 1, `--lora-scaled` `FNAME:SCALE`
    /// items, every scale 0 with `--lora-init-without-apply`.
    pub fn from_flags(
        lora: &[std::path::PathBuf],
        scaled: &[String],
        without_apply: bool,
    ) -> Result<Vec<LoraSetting>, String> {
        let mut out: Vec<LoraSetting> = lora
            .iter()
            .map(|p| LoraSetting {
                path: p.clone(),
                scale: 1.0,
            })
            .collect();
        for item in scaled {
            let (path, scale) = item
                .rsplit_once(':')
                .and_then(|(p, s)| Some((p, s.trim().parse::<f32>().ok()?)))
                .filter(|(p, s)| !p.is_empty() && s.is_finite())
                .ok_or_else(|| format!("--lora-scaled: '{item}' is not FNAME:SCALE"))?;
            out.push(LoraSetting {
                path: path.into(),
                scale,
            });
        }
        if without_apply {
            out.iter_mut().for_each(|s| s.scale = 0.0);
        }
        Ok(out)
    }
}

/// The loaded adapters: what `/lora-adapters` lists, and the scales of requests that give
/// none.
#[derive(Debug, Default)]
pub struct Adapters {
    /// Per adapter: path, task name, prompt prefix.
    pub info: Vec<(String, String, String)>,
    pub scales: Mutex<Vec<f32>>,
}

impl Adapters {
    pub fn new(model: &model::Model, settings: &[LoraSetting]) -> Adapters {
        Adapters {
            info: model
                .adapters
                .iter()
                .map(|a| {
                    let path = a.path.display().to_string();
                    (path, a.task_name.clone(), a.prompt_prefix.clone())
                })
                .collect(),
            scales: Mutex::new(settings.iter().map(|s| s.scale).collect()),
        }
    }

    fn current(&self) -> Vec<f32> {
        self.scales
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The scales of a request whose `lora` field is `given`: the server's when it gives
    /// none (absent, null or empty), else its own with the adapters it leaves out at 0.
    /// An entry that is not `{id, scale}` with a loaded adapter's id is a 400 naming it.
    pub fn for_request(&self, given: Option<&Value>) -> Result<Vec<f32>, ApiError> {
        match given {
            None | Some(Value::Null) => Ok(self.current()),
            Some(Value::Array(a)) if a.is_empty() => Ok(self.current()),
            Some(v) => self.parse(v, "lora"),
        }
    }

    /// Scales from `[{id, scale}]`, unlisted adapters at 0 (llama-server's
    /// `construct_lora_list`).
    fn parse(&self, v: &Value, field: &str) -> Result<Vec<f32>, ApiError> {
        let entries = v.as_array().ok_or_else(|| {
            ApiError::invalid(field, format!("{field} must be a list of {{id, scale}}"))
        })?;
        let mut scales = vec![0.0; self.info.len()];
        for (i, e) in entries.iter().enumerate() {
            let name = format!("{field}[{i}]");
            let id = e.get("id").and_then(Value::as_u64);
            let scale = e
                .get("scale")
                .and_then(Value::as_f64)
                .filter(|s| s.is_finite());
            match (id, scale) {
                (Some(id), Some(scale)) if (id as usize) < scales.len() => {
                    scales[id as usize] = scale as f32
                }
                (Some(id), Some(_)) => {
                    return Err(ApiError::invalid(
                        format!("{name}.id"),
                        format!(
                            "{name}.id {id} is not a loaded adapter ({} loaded: --lora)",
                            scales.len()
                        ),
                    ))
                }
                _ => {
                    return Err(ApiError::invalid(
                        name.clone(),
                        format!("{name} must be {{\"id\": integer, \"scale\": number}}"),
                    ))
                }
            }
        }
        Ok(scales)
    }
}

/// `generation_settings.lora`: the adapters a request applies.
pub fn settings(scales: &[f32]) -> Value {
    scales
        .iter()
        .enumerate()
        .filter(|(_, &s)| s != 0.0)
        .map(|(id, &scale)| json!({"id": id, "scale": scale}))
        .collect()
}

pub async fn list(State(s): State<Shared>) -> Result<Json<Value>, ApiError> {
    let r = ready(&s)?;
    let scales = r.lora.current();
    let list = r
        .lora
        .info
        .iter()
        .zip(scales)
        .enumerate()
        .map(|(id, ((path, task, prefix), scale))| {
            json!({"id": id, "path": path, "scale": scale, "task_name": task, "prompt_prefix": prefix})
        })
        .collect();
    Ok(Json(Value::Array(list)))
}

/// Sets the scales of requests without their own (`[{id, scale}]`, the rest at 0).
pub async fn set(
    State(s): State<Shared>,
    b: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, ApiError> {
    let bytes = body(b)?;
    let r = ready(&s)?;
    let v: Value = serde_json::from_slice(&bytes)
        .map_err(|e| ApiError::bad_request(format!("invalid JSON: {e}")))?;
    let scales = r.lora.parse(&v, "body")?;
    *r.lora.scales.lock().unwrap_or_else(|e| e.into_inner()) = scales;
    Ok(Json(json!({"success": true})))
}
