//! The field policy of the generation routes: every request field OpenAI or llama-server
//! documents is honored or refused with a 400 that names it, never accepted and ignored.
//! The fields [`crate::validate::RawRequest`] reads are honored there; the documented
//! fields it does not read are listed here with the values that ask nothing of this server
//! (an opaque id, a default, a hint it follows anyway) — any other value is refused with
//! the reason. Names nobody documents are ignored (SDKs send extras), logged once each and
//! counted for `/metrics`.

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use serde_json::{Map, Value};

use crate::error::ApiError;

/// A documented field this server does not act on: the values it takes as they are, and
/// why others are refused.
struct Inert {
    name: &'static str,
    takes: fn(&Value) -> bool,
    why: &'static str,
}

fn any(_: &Value) -> bool {
    true
}

fn null(v: &Value) -> bool {
    v.is_null()
}

fn null_or_false(v: &Value) -> bool {
    matches!(v, Value::Null | Value::Bool(false))
}

fn null_or_empty(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
        Value::String(s) => s.is_empty(),
        _ => false,
    }
}

fn null_or_zero(v: &Value) -> bool {
    v.is_null() || v.as_f64() == Some(0.0)
}

fn null_or_one(v: &Value) -> bool {
    v.is_null() || v.as_i64() == Some(1)
}

fn tier(v: &Value) -> bool {
    v.is_null() || matches!(v.as_str(), Some("auto" | "default"))
}

fn text_only(v: &Value) -> bool {
    v.is_null() || *v == serde_json::json!(["text"])
}

#[rustfmt::skip]
const INERT: &[Inert] = &[
    // OpenAI's.
    Inert { name: "user", takes: any, why: "" },
    Inert { name: "safety_identifier", takes: any, why: "" },
    Inert { name: "prompt_cache_key", takes: any, why: "" },
    Inert { name: "metadata", takes: any, why: "" },
    Inert { name: "store", takes: null_or_false, why: "completions are not stored here" },
    Inert { name: "service_tier", takes: tier, why: "one service tier here: auto or default" },
    Inert { name: "modalities", takes: text_only, why: "this server answers text only" },
    Inert { name: "audio", takes: null, why: "this server answers text only" },
    Inert { name: "prediction", takes: null, why: "predicted outputs are not supported; speculative decoding is the server's (-md)" },
    Inert { name: "reasoning_effort", takes: null, why: "reasoning effort is not supported: the model thinks as its template says" },
    Inert { name: "verbosity", takes: null, why: "verbosity is not supported" },
    Inert { name: "web_search_options", takes: null, why: "web search is not available here" },
    Inert { name: "functions", takes: null, why: "functions is deprecated: use tools" },
    Inert { name: "function_call", takes: null, why: "function_call is deprecated: use tool_choice" },
    Inert { name: "best_of", takes: null_or_one, why: "best_of above 1 is not supported" },
    Inert { name: "suffix", takes: null_or_empty, why: "suffix is not supported here: use /infill" },
    // llama-server's.
    Inert { name: "return_tokens", takes: any, why: "" },
    Inert { name: "n_indent", takes: null_or_zero, why: "n_indent is not supported" },
    Inert { name: "min_keep", takes: null_or_zero, why: "min_keep is not supported" },
    Inert { name: "n_cache_reuse", takes: null_or_zero, why: "KV reuse by shifting is not supported (the prefix cache reuses whole blocks)" },
    Inert { name: "response_fields", takes: null_or_empty, why: "response_fields is not supported" },
    Inert { name: "multimodal_data", takes: null_or_empty, why: "images are read in a prompt object's multimodal_data or in chat messages" },
    Inert { name: "image_data", takes: null_or_empty, why: "images are read in a prompt object's multimodal_data or in chat messages" },
    Inert { name: "thinking_forced_open", takes: null_or_false, why: "thinking_forced_open is not supported" },
    // Only meaningful with a sampler refused unless off.
    Inert { name: "xtc_threshold", takes: any, why: "" },
    Inert { name: "mirostat_tau", takes: any, why: "" },
    Inert { name: "mirostat_eta", takes: any, why: "" },
    Inert { name: "dynatemp_exponent", takes: any, why: "" },
];

static UNKNOWN_TOTAL: AtomicU64 = AtomicU64::new(0);
static SEEN: Mutex<Option<HashSet<String>>> = Mutex::new(None);

/// Request fields nobody documents, seen so far (each counted per request).
pub fn unknown_total() -> u64 {
    UNKNOWN_TOTAL.load(Ordering::Relaxed)
}

/// Checks the fields of a body that the request's own fields did not read: a documented
/// one with a value this server cannot honor is a 400 naming it; an undocumented one is
/// counted (and logged the first time its name is seen).
pub fn check(rest: &Map<String, Value>) -> Result<(), ApiError> {
    for (name, value) in rest {
        match INERT.iter().find(|f| f.name == name) {
            Some(f) if (f.takes)(value) => {}
            Some(f) => {
                return Err(ApiError::invalid(
                    name.as_str(),
                    format!("{name}: {}", f.why),
                ))
            }
            None => {
                UNKNOWN_TOTAL.fetch_add(1, Ordering::Relaxed);
                let mut seen = SEEN.lock().unwrap_or_else(|e| e.into_inner());
                if seen.get_or_insert_with(HashSet::new).insert(name.clone()) {
                    eprintln!("request field '{name}' is not one this server knows; ignored");
                }
            }
        }
    }
    Ok(())
}
