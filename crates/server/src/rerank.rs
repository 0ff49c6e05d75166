//! llama-server's `/rerank` (Jina's format, or TEI's when the body has `texts`), with
//! `--reranking`. Each document is one engine request over the prompt llama-server builds
//! (the GGUF's `rerank` template with `{query}` and `{document}`, else `[BOS] query [EOS]
//! [SEP] document [EOS]` as the vocabulary adds them); its score is the first component of
//! the last token's final state (llama.cpp's rank pooling of a causal model with no
//! classification head). A model with a classification head (`cls.*` tensors) is refused at
//! start: its scores would need the head.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::{Extension, Json};
use engine::Pooling;
use serde_json::{json, Value};

use crate::error::ApiError;
use crate::state::{Ready, Shared};
use crate::{body, off_runtime, ready, KeyNamespace};

/// How a model's rerank prompts are built, read from its GGUF at start.
#[derive(Debug, Clone)]
pub struct Reranker {
    /// `tokenizer.chat_template.rerank`, with `{query}` and `{document}`.
    template: Option<String>,
    /// The separator token, when the vocabulary adds one.
    sep: Option<u32>,
}

impl Reranker {
    /// The reranker of a model, or why it cannot rerank.
    pub fn of(md: &gguf::Metadata, tensors: &[gguf::TensorInfo]) -> Result<Reranker, String> {
        if let Some(t) = tensors.iter().find(|t| t.name.starts_with("cls.")) {
            return Err(format!(
                "--reranking: this model has a classification head ({}), which tandem does not compute yet",
                t.name
            ));
        }
        let template = md
            .opt_str("tokenizer.chat_template.rerank")
            .ok()
            .flatten()
            .map(str::to_string);
        let add_sep = md
            .opt_bool("tokenizer.ggml.add_sep_token")
            .ok()
            .flatten()
            .unwrap_or(false);
        let sep = md
            .opt_u32("tokenizer.ggml.seperator_token_id")
            .ok()
            .flatten()
            .filter(|_| add_sep);
        Ok(Reranker { template, sep })
    }

    /// The tokens of the prompt that scores `doc` against `query`.
    fn prompt(&self, ready: &Ready, query: &str, doc: &str) -> Result<Vec<u32>, ApiError> {
        let bad = |e: text::Error| ApiError::invalid("documents", format!("cannot tokenize: {e}"));
        let tok = &ready.tok;
        if let Some(t) = &self.template {
            let text = t.replace("{query}", query).replace("{document}", doc);
            return tok.encode(&text, false, true).map_err(bad);
        }
        let eos = tok.eos().or(self.sep).filter(|_| tok.add_eos());
        let mut ids: Vec<u32> = tok.bos().filter(|_| tok.add_bos()).into_iter().collect();
        ids.extend(tok.encode(query, false, false).map_err(bad)?);
        ids.extend(eos);
        ids.extend(self.sep);
        ids.extend(tok.encode(doc, false, false).map_err(bad)?);
        ids.extend(eos);
        Ok(ids)
    }
}

/// A checked request: the prompts, and how to answer.
struct Asked {
    prompts: Vec<Vec<u32>>,
    documents: Vec<String>,
    top_n: usize,
    tei: bool,
    return_text: bool,
    model: Option<String>,
}

fn parse(bytes: &Bytes, ready: &Ready) -> Result<Asked, ApiError> {
    let reranker = ready.reranker.as_ref().ok_or_else(|| {
        ApiError::not_supported(
            "This server does not support reranking. Start it with `--reranking`",
        )
    })?;
    let body: Value = crate::validate::parse(bytes)?;
    let tei = body.get("texts").is_some();
    let field = if tei { "texts" } else { "documents" };
    let query = match body.get("query") {
        Some(Value::String(q)) => q.clone(),
        Some(_) => return Err(ApiError::invalid("query", "\"query\" must be a string")),
        None => return Err(ApiError::invalid("query", "\"query\" must be provided")),
    };
    let documents: Vec<String> = match body.get(field) {
        Some(Value::Array(items)) if !items.is_empty() => items
            .iter()
            .map(|d| d.as_str().map(str::to_string))
            .collect::<Option<_>>()
            .ok_or_else(|| {
                ApiError::invalid(
                    field,
                    format!("\"{field}\" must be a non-empty string array"),
                )
            })?,
        _ => {
            return Err(ApiError::invalid(
                field,
                format!("\"{field}\" must be a non-empty string array"),
            ))
        }
    };
    let top_n = match body.get("top_n") {
        None | Some(Value::Null) => documents.len(),
        Some(v) => v
            .as_u64()
            .map(|n| n as usize)
            .ok_or_else(|| ApiError::invalid("top_n", "top_n must be a positive integer"))?,
    };
    let slot_ctx = ready.engine.config().slot_ctx();
    let prompts = documents
        .iter()
        .enumerate()
        .map(|(i, d)| {
            let ids = reranker.prompt(ready, &query, d)?;
            match ids.len() {
                0 => Err(ApiError::invalid(
                    format!("{field}[{i}]"),
                    "the prompt is empty",
                )),
                n if n > slot_ctx => Err(ApiError::exceeds_context(
                    &format!("{field}[{i}]"),
                    n,
                    slot_ctx,
                )),
                _ => Ok(ids),
            }
        })
        .collect::<Result<_, _>>()?;
    Ok(Asked {
        prompts,
        documents,
        top_n,
        tei,
        return_text: tei && body.get("return_text").and_then(Value::as_bool) == Some(true),
        model: body
            .get("model")
            .and_then(Value::as_str)
            .map(str::to_string),
    })
}

/// `/rerank`, `/reranking`, `/v1/rerank`, `/v1/reranking`: the documents by score, highest
/// first, at most `top_n`.
pub async fn rerank(
    State(s): State<Shared>,
    key: Option<Extension<KeyNamespace>>,
    b: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, ApiError> {
    let bytes = body(b)?;
    let mut asked = off_runtime(&s, bytes.len(), move |ready| parse(&bytes, ready)).await?;
    let ready = ready(&s)?;
    let all = crate::embeddings::pooled(ready, key, &asked.prompts, Pooling::Last).await?;
    let label = if asked.tei {
        "score"
    } else {
        "relevance_score"
    };
    let mut results = Vec::with_capacity(all.len());
    for (i, v) in all.iter().enumerate() {
        let score = v.first().and_then(|v| v.first()).copied().unwrap_or(0.0);
        let mut r = json!({"index": i, label: score});
        if asked.return_text {
            r["text"] = json!(std::mem::take(&mut asked.documents[i]));
        }
        results.push((score, r));
    }
    results.sort_by(|a, b| b.0.total_cmp(&a.0));
    results.truncate(asked.top_n);
    let results: Vec<Value> = results.into_iter().map(|(_, r)| r).collect();
    if asked.tei {
        return Ok(Json(Value::Array(results)));
    }
    let n: usize = asked.prompts.iter().map(Vec::len).sum();
    Ok(Json(json!({
        "model": asked.model.unwrap_or_else(|| ready.model_id.clone()),
        "object": "list",
        "usage": {"prompt_tokens": n, "total_tokens": n},
        "results": results,
    })))
}
