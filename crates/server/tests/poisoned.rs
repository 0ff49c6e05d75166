//! Poisoned numbers: a synthetic model (SmolLM2's tokenizer, tiny random llama weights)
//! whose embedding of one token is NaN. A request containing that token fails with a 500
//! that says so, streamed or not; the server keeps serving the others, and frees the slot.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use axum::body::{to_bytes, Body};
use axum::http::{Request, StatusCode};
use engine::EngineConfig;
use gguf::{GgmlType, GgufFile, GgufWriter, Value};
use serde_json::{json, Value as Json};
use server::{AppState, ServerConfig};
use tower::ServiceExt;

const N_EMBD: usize = 64;
const N_FF: usize = 128;
const N_HEAD: usize = 4;
const N_HEAD_KV: usize = 2;
const N_LAYER: usize = 2;

fn smollm2() -> PathBuf {
    let dir = std::env::var_os("TANDEM_MODELS")
        .map(PathBuf::from)
        .unwrap_or_else(|| dirs::cache_dir().unwrap().join("tandem").join("models"));
    let p = dir.join("SmolLM2-135M-Instruct.Q4_1.gguf");
    assert!(
        p.is_file(),
        "{} missing: run `tandem pull smollm2-135m`",
        p.display()
    );
    p
}

/// Deterministic values in [-scale, scale), as f32 bytes.
fn random(n: usize, scale: f32, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E3779B97F4A7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * scale
        })
        .collect()
}

fn bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// Writes the model to `path`; the embedding row of `poison` is NaN.
fn write_model(path: &Path, poison: u32) {
    let src = GgufFile::open(smollm2()).unwrap();
    let md = &src.header.metadata;
    let n_vocab = match md.get("tokenizer.ggml.tokens") {
        Some(Value::Array(_, t)) => t.len(),
        _ => panic!("SmolLM2 has a token list"),
    };
    let mut w = GgufWriter::new();
    w.metadata("general.architecture", Value::String("llama".into()));
    for (k, v) in md.iter().filter(|(k, _)| k.starts_with("tokenizer.")) {
        w.metadata(k, v.clone());
    }
    for (k, v) in [
        ("embedding_length", N_EMBD),
        ("feed_forward_length", N_FF),
        ("block_count", N_LAYER),
        ("attention.head_count", N_HEAD),
        ("attention.head_count_kv", N_HEAD_KV),
        ("context_length", 2048),
    ] {
        w.metadata(&format!("llama.{k}"), Value::U32(v as u32));
    }
    w.metadata("llama.attention.layer_norm_rms_epsilon", Value::F32(1e-5));
    let (e, kv) = (N_EMBD as u64, (N_EMBD / N_HEAD * N_HEAD_KV) as u64);
    let mut seed = 1;
    let mut matrix = |w: &mut GgufWriter, name: &str, cols: u64, rows: u64| {
        seed += 1;
        let data = random((cols * rows) as usize, (3.0 / cols as f32).sqrt(), seed);
        w.tensor(name, &[cols, rows], GgmlType::F32, bytes(&data));
    };
    let mut embd = random(n_vocab * N_EMBD, 1.0, 7);
    embd[poison as usize * N_EMBD..(poison as usize + 1) * N_EMBD].fill(f32::NAN);
    w.tensor(
        "token_embd.weight",
        &[e, n_vocab as u64],
        GgmlType::F32,
        bytes(&embd),
    );
    w.tensor(
        "output_norm.weight",
        &[e],
        GgmlType::F32,
        bytes(&vec![1.0; N_EMBD]),
    );
    matrix(&mut w, "output.weight", e, n_vocab as u64);
    for i in 0..N_LAYER {
        let n = |s: &str| format!("blk.{i}.{s}.weight");
        for norm in ["attn_norm", "ffn_norm"] {
            w.tensor(&n(norm), &[e], GgmlType::F32, bytes(&vec![1.0; N_EMBD]));
        }
        matrix(&mut w, &n("attn_q"), e, e);
        matrix(&mut w, &n("attn_k"), e, kv);
        matrix(&mut w, &n("attn_v"), e, kv);
        matrix(&mut w, &n("attn_output"), e, e);
        matrix(&mut w, &n("ffn_gate"), e, N_FF as u64);
        matrix(&mut w, &n("ffn_up"), e, N_FF as u64);
        matrix(&mut w, &n("ffn_down"), N_FF as u64, e);
    }
    w.write(path).unwrap();
}

fn config(model_path: PathBuf) -> ServerConfig {
    let engine = EngineConfig {
        n_ctx: 1024,
        n_parallel: 2,
        kv_unified: false,
        n_batch: 256,
        n_ubatch: 256,
        n_threads: 1,
        kv_type: GgmlType::F16,
        queue_limit: 8,
        device: engine::DeviceKind::Cpu,
        step_budget: engine::StepBudget::AUTO,
        swa_full: false,
        ctx_checkpoints: 8,
        cache_ram_mib: 0,
        cache_dir: None,
    };
    ServerConfig {
        metrics: true,
        ..ServerConfig::new(model_path, engine)
    }
}

async fn post(app: &axum::Router, path: &str, body: Json) -> (StatusCode, String) {
    let req = Request::builder()
        .method("POST")
        .uri(path)
        .header("content-type", "application/json")
        .body(Body::from(body.to_string()))
        .unwrap();
    let resp = app.clone().oneshot(req).await.unwrap();
    let status = resp.status();
    let bytes = to_bytes(resp.into_body(), usize::MAX).await.unwrap();
    (status, String::from_utf8_lossy(&bytes).into_owned())
}

async fn get(app: &axum::Router, path: &str) -> String {
    let req = Request::builder().uri(path).body(Body::empty()).unwrap();
    let resp = app.clone().oneshot(req).await.unwrap();
    let bytes = to_bytes(resp.into_body(), usize::MAX).await.unwrap();
    String::from_utf8_lossy(&bytes).into_owned()
}

#[tokio::test]
async fn nan_numbers_fail_their_request_with_a_500_and_spare_the_others() {
    let dir = std::env::temp_dir().join(format!("tandem-poisoned-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("poisoned.gguf");
    let tok =
        text::Tokenizer::from_gguf(&GgufFile::open(smollm2()).unwrap().header.metadata).unwrap();
    let poison = *tok.encode(" poison", false, false).unwrap().last().unwrap();
    let clean = "Hello there, how are you";
    assert!(!tok.encode(clean, false, false).unwrap().contains(&poison));
    write_model(&path, poison);

    let cfg = config(path.clone());
    let ready = server::load(&cfg).unwrap();
    let state = Arc::new(AppState::new(cfg));
    assert!(state.ready.set(ready).is_ok());
    let app = server::router(state);

    let poisoned = json!({"prompt": "Tell me about poison", "max_tokens": 8, "temperature": 0});
    let (status, body) = post(&app, "/v1/completions", poisoned.clone()).await;
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR, "{body}");
    let err: Json = serde_json::from_str(&body).unwrap();
    assert_eq!(err["error"]["type"], "server_error");
    assert!(
        err["error"]["message"].as_str().unwrap().contains("NaN"),
        "{body}"
    );

    let mut streamed = poisoned.clone();
    streamed["stream"] = json!(true);
    let (status, body) = post(&app, "/v1/completions", streamed).await;
    assert_eq!(status, StatusCode::OK);
    assert!(body.contains("\"error\"") && body.contains("NaN"), "{body}");
    assert!(!body.contains("[DONE]"), "{body}");

    for _ in 0..2 {
        let (status, body) = post(
            &app,
            "/v1/completions",
            json!({"prompt": clean, "max_tokens": 8, "temperature": 0}),
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{body}");
        let v: Json = serde_json::from_str(&body).unwrap();
        assert_eq!(v["choices"][0]["finish_reason"], "length");
        assert_eq!(v["usage"]["completion_tokens"], 8);
    }
    let slots: Json = serde_json::from_str(&get(&app, "/slots").await).unwrap();
    assert!(slots
        .as_array()
        .unwrap()
        .iter()
        .all(|s| s["is_processing"] == false));
    let metrics = get(&app, "/metrics").await;
    assert!(
        metrics.contains("tandem:requests_failed_total 2"),
        "{metrics}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
