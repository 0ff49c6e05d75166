//! llama-server's `/infill`: fill-in-the-middle with the model's FIM tokens. The prompt is
//! built as llama-server builds it (the repo-level pattern of Qwen2.5-Coder's report):
//!
//! ```text
//! [FIM_REP]myproject\n [FIM_SEP]{filename}\n{text} ... [FIM_SEP]filename\n
//! [BOS][FIM_PRE]{input_prefix}{prompt}[FIM_SUF]{input_suffix}[FIM_MID]
//! ```
//!
//! the extra chunks (`input_extra`) kept from their end to fill the context left after a
//! batch and twice `n_predict`, the prefix cut to its last ¾ of a batch and the suffix to
//! what is left of the last ¼. Without FIM_REP/FIM_SEP the chunks are joined by a snippet
//! marker. With `--spm-infill` the suffix part comes before the prefix part. Every other
//! field is `/completion`'s, and so is the answer.

use axum::body::Bytes;
use serde::Deserialize;

use crate::error::ApiError;
use crate::prompts::Prompt;
use crate::state::Ready;
use crate::validate::{parse, RawRequest, Route, ValidGen};

/// One of `input_extra`'s files: `text` is required, `filename` optional (llama-server's
/// rule).
#[derive(Debug, Deserialize)]
struct Chunk {
    text: String,
    #[serde(default = "default_filename")]
    filename: String,
}

fn default_filename() -> String {
    "tmp".into()
}

#[derive(Debug, Deserialize, Default)]
#[serde(default)]
struct RawInfill {
    input_prefix: Option<String>,
    input_suffix: Option<String>,
    input_extra: Option<Vec<Chunk>>,
    #[serde(flatten)]
    rest: RawRequest,
}

/// Validates an `/infill` body into the `/completion` request of its FIM prompt.
pub fn prepare(bytes: &Bytes, ready: &Ready) -> Result<ValidGen, ApiError> {
    let fim = ready.tok.fim().ok_or_else(|| {
        ApiError::bad_request("this model has no fill-in-the-middle tokens (FIM prefix, suffix and middle); /infill needs a code model that has them")
    })?;
    let raw: RawInfill = parse(bytes)?;
    let mut rest = raw.rest;
    let text = |name: &str, t: &str| {
        ready
            .tok
            .encode(t, false, false)
            .map_err(|e| ApiError::invalid(name, format!("cannot tokenize {name}: {e}")))
    };
    let prompt = match rest.prompt.take() {
        None => Vec::new(),
        Some(Prompt::Text(t)) => text("prompt", &t)?,
        Some(Prompt::Tokens(ids)) => ids,
        Some(_) => {
            return Err(ApiError::invalid(
                "prompt",
                "prompt must be one text or one list of token ids",
            ))
        }
    };
    let mut prefix = text("input_prefix", raw.input_prefix.as_deref().unwrap_or(""))?;
    let mut suffix = text("input_suffix", raw.input_suffix.as_deref().unwrap_or(""))?;

    let mut extra = Vec::new();
    if let Some(rep) = fim.rep {
        extra.push(rep);
        extra.extend(text("input_extra", "myproject\n")?);
    }
    for (i, chunk) in raw.input_extra.unwrap_or_default().iter().enumerate() {
        let name = format!("input_extra[{i}]");
        match fim.sep {
            Some(sep) => {
                extra.push(sep);
                extra.extend(text(&name, &format!("{}\n", chunk.filename))?);
            }
            None => extra.extend(text(&name, "\n\n--- snippet ---\n\n")?),
        }
        extra.extend(text(&name, &chunk.text)?);
    }
    if let Some(sep) = fim.sep {
        extra.push(sep);
        extra.extend(text("input_extra", "filename\n")?);
    }

    let cfg = ready.engine.config();
    let (n_batch, n_ctx) = (cfg.n_batch, cfg.slot_ctx());
    let n_predict = rest.n_predict.or(rest.max_tokens).unwrap_or(-1).max(0) as usize;
    let n_prefix = prefix.len().min(3 * (n_batch / 4));
    let n_suffix = suffix
        .len()
        .min((n_batch / 4).saturating_sub(2 + prompt.len()));
    let n_extra = extra
        .len()
        .min(n_ctx.saturating_sub(n_batch + 2 * n_predict));
    prefix.drain(..prefix.len() - n_prefix);
    suffix.truncate(n_suffix);

    let mut ids = extra.split_off(extra.len() - n_extra);
    if ready.tok.add_bos() {
        ids.extend(ready.tok.bos());
    }
    let mut prefix_part = vec![fim.pre];
    prefix_part.extend(prefix);
    prefix_part.extend(prompt);
    let mut suffix_part = vec![fim.suf];
    suffix_part.extend(suffix);
    match ready.spm_infill {
        false => ids.extend(prefix_part.into_iter().chain(suffix_part)),
        true => ids.extend(suffix_part.into_iter().chain(prefix_part)),
    }
    ids.push(fim.mid);
    rest.prompt = Some(Prompt::Tokens(ids));
    rest.validate(Route::Native, ready)
}
