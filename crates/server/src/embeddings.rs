//! Embeddings: OpenAI's `/v1/embeddings` and llama-server's `/embedding` and `/embeddings`,
//! with `--embeddings`. Each input is one engine request that computes its prompt in the
//! same steps as the generations ([`engine::Pooling`]: the final states after the output
//! norm, pooled as `--pooling` or the GGUF says), then normalized as llama-server does
//! (`embd_normalize`: -1 none, 0 max-abs scaled to int16, 1 taxicab, 2 euclidean (the
//! default), p > 2 the p-norm).

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::{Extension, Json};
use base64::Engine as _;
use engine::{Event, EventStream, GenRequest, Pooling, SamplerConfig};
use serde::Deserialize;
use serde_json::{json, Value};

use crate::error::ApiError;
use crate::prompts::{OnePrompt, Prompt};
use crate::state::{Ready, Shared};
use crate::validate::parse;
use crate::{body, namespace_of, off_runtime, ready, KeyNamespace};

/// Most inputs in one request (OpenAI's limit).
const MAX_INPUTS: usize = 2048;

/// The pooling of a model's GGUF (`{arch}.pooling_type`, llama.cpp's numbering), if it
/// names one this server computes.
pub fn gguf_pooling(md: &gguf::Metadata) -> Option<Pooling> {
    let arch = md.str("general.architecture").ok()?;
    match md.opt_u32(&format!("{arch}.pooling_type")).ok()?? {
        0 => Some(Pooling::None),
        1 => Some(Pooling::Mean),
        2 => Some(Pooling::Cls),
        3 => Some(Pooling::Last),
        _ => None,
    }
}

#[derive(Debug, Deserialize, Default)]
#[serde(default)]
struct RawEmbed {
    input: Option<Prompt>,
    /// llama-server's name for `input`.
    content: Option<Prompt>,
    encoding_format: Option<String>,
    dimensions: Option<i64>,
    embd_normalize: Option<i64>,
}

/// A request that passed validation: the token lists, and how to answer.
struct Asked {
    prompts: Vec<Vec<u32>>,
    base64: bool,
    normalize: i64,
}

/// How an input longer than a slot is taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TooLong {
    Refuse,
    /// Cut to the first tokens that fit a slot (Ollama's `truncate`).
    Truncate,
}

fn parse_embed(
    bytes: &Bytes,
    ready: &Ready,
    openai: bool,
    too_long: TooLong,
) -> Result<Asked, ApiError> {
    let pooling = ready.embeddings.ok_or_else(|| {
        ApiError::not_supported(
            "this server does not compute embeddings; start it with --embeddings",
        )
    })?;
    if openai && pooling == Pooling::None {
        return Err(ApiError::invalid(
            "input",
            "pooling 'none' gives a vector per token, which /v1/embeddings cannot answer; start with --pooling mean, cls or last, or use /embedding",
        ));
    }
    let raw: RawEmbed = parse(bytes)?;
    let (name, input) = match (raw.input, raw.content) {
        (Some(i), _) => ("input", i),
        (None, Some(c)) if !openai => ("content", c),
        _ => return Err(ApiError::invalid("input", "input is required")),
    };
    let base64 = match raw.encoding_format.as_deref() {
        None | Some("float") => false,
        Some("base64") => true,
        Some(other) => {
            return Err(ApiError::invalid(
                "encoding_format",
                format!("encoding_format must be float or base64, got '{other}'"),
            ))
        }
    };
    let n_embd = ready.n_embd;
    if let Some(d) = raw.dimensions.filter(|&d| d != n_embd as i64) {
        return Err(ApiError::invalid(
            "dimensions",
            format!(
                "this model's embeddings have {n_embd} dimensions and cannot be shortened; got {d}"
            ),
        ));
    }
    let texts: Vec<Result<String, Vec<u32>>> = input
        .each()
        .into_iter()
        .map(|p| match p {
            OnePrompt::Text(t) => Ok(Ok(t)),
            OnePrompt::Tokens(ids) => Ok(Err(ids)),
            OnePrompt::Object(o) => o.text(name).map(Ok),
            OnePrompt::Mixed(_) => Err(ApiError::invalid(
                name,
                format!("{name}: texts and token ids mixed in one input are not supported here"),
            )),
        })
        .collect::<Result<_, _>>()?;
    if texts.is_empty() || texts.len() > MAX_INPUTS {
        return Err(ApiError::invalid(
            name,
            format!("{name} takes 1 to {MAX_INPUTS} inputs, got {}", texts.len()),
        ));
    }
    let slot_ctx = ready.engine.config().slot_ctx();
    let n_vocab = ready.tok.n_vocab();
    let prompts = texts
        .into_iter()
        .enumerate()
        .map(|(i, t)| {
            let ids = match t {
                Ok(text) => ready.tok.encode(&text, true, true).map_err(|e| {
                    ApiError::invalid(
                        format!("{name}[{i}]"),
                        format!("cannot tokenize {name}[{i}]: {e}"),
                    )
                })?,
                Err(ids) => ids,
            };
            if ids.is_empty() {
                return Err(ApiError::invalid(
                    format!("{name}[{i}]"),
                    format!("{name}[{i}] is empty"),
                ));
            }
            if let Some(&bad) = ids.iter().find(|&&t| t as usize >= n_vocab) {
                return Err(ApiError::invalid(
                    format!("{name}[{i}]"),
                    format!("{name}[{i}]: token id {bad} is outside the vocabulary of {n_vocab}"),
                ));
            }
            // The engine keeps a slot's last position free, embeddings too.
            if ids.len() >= slot_ctx && too_long == TooLong::Truncate {
                return Ok(ids[..slot_ctx - 1].to_vec());
            }
            if ids.len() >= slot_ctx {
                return Err(ApiError::exceeds_context(
                    &format!("{name}[{i}]"),
                    ids.len(),
                    slot_ctx,
                ));
            }
            Ok(ids)
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Asked {
        prompts,
        base64,
        normalize: raw.embd_normalize.unwrap_or(2),
    })
}

/// `v` normalized as llama-server's `embd_normalize` says.
fn normalize(v: &mut [f32], how: i64) {
    let scale = match how {
        i64::MIN..=-1 => return,
        0 => v.iter().fold(0f32, |m, x| m.max(x.abs())) / 32760.0,
        2 => v.iter().map(|x| (*x as f64).powi(2)).sum::<f64>().sqrt() as f32,
        p => {
            let p = p as f64;
            v.iter()
                .map(|x| (x.abs() as f64).powf(p))
                .sum::<f64>()
                .powf(1.0 / p) as f32
        }
    };
    let scale = if scale > 0.0 { 1.0 / scale } else { 0.0 };
    v.iter_mut().for_each(|x| *x *= scale);
}

/// The request for one input's embedding.
fn request(prompt: Vec<u32>, pooling: Pooling, namespace: u64) -> GenRequest {
    GenRequest {
        prompt,
        sampling: SamplerConfig::greedy(),
        dry: None,
        max_tokens: None,
        stop: vec![],
        shown_tokens: vec![],
        ignore_eos: false,
        logit_bias: vec![],
        think_budget: None,
        constraint: None,
        logprobs: None,
        post_sampling: false,
        cache_prompt: false,
        progress: false,
        slot: None,
        max_predict_time: None,
        cache_namespace: namespace,
        draft: Default::default(),
        embed: Some(pooling),
        context_shift: None,
        lora: None,
        images: Vec::new(),
    }
}

async fn vectors(mut events: EventStream) -> Result<Vec<Vec<f32>>, ApiError> {
    let mut got = None;
    while let Some(ev) = events.recv().await {
        match ev {
            Event::Embedding(v) => got = Some(v),
            Event::Done(_) => {
                return got.ok_or_else(|| ApiError::internal("the engine sent no embedding"))
            }
            Event::Delta { .. } | Event::Progress(_) => {}
            Event::Rejected(m) => return Err(ApiError::bad_request(m)),
            Event::Failed(m) => return Err(ApiError::internal(m)),
            Event::Unavailable(m) => return Err(ApiError::box_down(m)),
        }
    }
    Err(ApiError::internal("the engine stopped"))
}

/// Each prompt's states pooled as `pooling`, computed in the engine's steps, in the prefix
/// namespace of the request's key.
pub(crate) async fn pooled(
    ready: &Ready,
    key: Option<Extension<KeyNamespace>>,
    prompts: &[Vec<u32>],
    pooling: Pooling,
) -> Result<Vec<Vec<Vec<f32>>>, ApiError> {
    let namespace = key.map_or(kv::SHARED, |Extension(KeyNamespace(k))| {
        namespace_of((k, kv::SHARED))
    });
    let streams = prompts
        .iter()
        .map(|p| {
            ready
                .engine
                .submit(request(p.clone(), pooling, namespace))
                .map(|(_, e)| e)
        })
        .collect::<Result<Vec<_>, _>>()?;
    let mut all = Vec::with_capacity(streams.len());
    for events in streams {
        all.push(vectors(events).await?);
    }
    Ok(all)
}

/// Every input's vectors, normalized, and the prompt tokens in all.
async fn embed(
    s: &Shared,
    key: Option<Extension<KeyNamespace>>,
    b: Result<Bytes, BytesRejection>,
    (openai, too_long): (bool, TooLong),
) -> Result<(Asked, Vec<Vec<Vec<f32>>>), ApiError> {
    let bytes = body(b)?;
    let asked = off_runtime(s, bytes.len(), move |ready| {
        parse_embed(&bytes, ready, openai, too_long)
    })
    .await?;
    let ready = ready(s)?;
    let pooling = ready.embeddings.expect("checked when parsed");
    let mut all = pooled(ready, key, &asked.prompts, pooling).await?;
    for v in all.iter_mut().flatten() {
        normalize(v, asked.normalize);
    }
    Ok((asked, all))
}

/// Each input's vector (pooled, normalized as the body says) of an OpenAI-shaped body, and
/// the prompt tokens in all: Ollama's `/api/embed` and `/api/embeddings`.
pub(crate) async fn pooled_inputs(
    s: &Shared,
    key: Option<Extension<KeyNamespace>>,
    b: Result<Bytes, BytesRejection>,
    too_long: TooLong,
) -> Result<(Vec<Vec<f32>>, usize), ApiError> {
    let (asked, all) = embed(s, key, b, (true, too_long)).await?;
    let n = asked.prompts.iter().map(Vec::len).sum();
    Ok((all.into_iter().map(|mut v| v.swap_remove(0)).collect(), n))
}

/// `/v1/embeddings`.
pub async fn openai(
    State(s): State<Shared>,
    key: Option<Extension<KeyNamespace>>,
    b: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, ApiError> {
    let (asked, all) = embed(&s, key, b, (true, TooLong::Refuse)).await?;
    let data: Vec<Value> = all
        .into_iter()
        .enumerate()
        .map(|(i, mut v)| {
            let v = v.swap_remove(0);
            let embedding = match asked.base64 {
                false => json!(v),
                true => {
                    let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
                    json!(base64::engine::general_purpose::STANDARD.encode(bytes))
                }
            };
            json!({"object": "embedding", "index": i, "embedding": embedding})
        })
        .collect();
    let n: usize = asked.prompts.iter().map(Vec::len).sum();
    Ok(Json(json!({
        "object": "list",
        "data": data,
        "model": ready(&s)?.model_id,
        "usage": {"prompt_tokens": n, "total_tokens": n},
    })))
}

/// llama-server's `/embedding` and `/embeddings`: per input, its vectors (one pooled, or
/// one per token with pooling `none`).
pub async fn native(
    State(s): State<Shared>,
    key: Option<Extension<KeyNamespace>>,
    b: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, ApiError> {
    let (_, all) = embed(&s, key, b, (false, TooLong::Refuse)).await?;
    let data: Vec<Value> = all
        .into_iter()
        .enumerate()
        .map(|(i, v)| json!({"index": i, "embedding": v}))
        .collect();
    Ok(Json(Value::Array(data)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalization_is_llama_servers() {
        let mut v = vec![3.0f32, -4.0];
        normalize(&mut v, 2);
        assert_eq!(v, vec![0.6, -0.8]);
        let mut v = vec![3.0f32, -4.0];
        normalize(&mut v, 1);
        let scale = 1.0f32 / 7.0;
        assert_eq!(v, vec![3.0 * scale, -4.0 * scale]);
        let mut v = vec![1.0f32, -2.0];
        normalize(&mut v, 0);
        let scale = 1.0 / (2.0f32 / 32760.0);
        assert_eq!(v, vec![scale, -2.0 * scale]);
        assert!((v[1] + 32760.0).abs() < 0.01);
        let mut v = vec![1.0f32, -2.0];
        normalize(&mut v, -1);
        assert_eq!(v, vec![1.0, -2.0]);
        let mut v = vec![0.0f32; 3];
        normalize(&mut v, 2);
        assert_eq!(v, vec![0.0; 3]);
    }
}
