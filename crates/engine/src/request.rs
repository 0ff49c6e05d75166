//! What the engine is asked for and what it answers, per request.

use crate::sampling::{Dry, LogitBias, ThinkBudget};
use crate::SamplerConfig;

/// A generation request the edge has validated: the engine trusts every field.
///
/// Contract (checked by the server before submitting): `prompt` is non-empty, every id is
/// below the vocabulary size, and `prompt.len() < slot_ctx`; generation stops at the slot's
/// end whatever `max_tokens` says, unless `context_shift` makes room there.
#[derive(Debug, Clone)]
pub struct GenRequest {
    pub prompt: Vec<u32>,
    pub sampling: SamplerConfig,
    /// DRY's settings, when the request turns it on.
    pub dry: Option<Dry>,
    /// Tokens to generate at most; `None`: until an end token, a stop string or the
    /// slot's context is full.
    pub max_tokens: Option<usize>,
    /// Generation ends where any of these appears in the text; it is not part of the answer.
    pub stop: Vec<String>,
    /// Control tokens whose text stays in the answer (a tool-call marker the server parses);
    /// other control tokens are left out.
    pub shown_tokens: Vec<u32>,
    /// End-of-generation tokens are never sampled.
    pub ignore_eos: bool,
    /// Added to the logits of these tokens before sampling (−∞ bans a token).
    pub logit_bias: LogitBias,
    /// At most so many reasoning tokens, then the end of reasoning forced.
    pub think_budget: Option<ThinkBudget>,
    /// Every token generated keeps the answer within this grammar; the answer ends when
    /// the grammar is complete.
    pub constraint: Option<Box<text::Constraint>>,
    /// Report each token's log-probability and this many top alternatives.
    pub logprobs: Option<usize>,
    /// Report them after the sampling chain (llama-server's `post_sampling_probs`): the
    /// log of each token's probability in the distribution it was drawn from, its
    /// alternatives the most probable survivors; before it otherwise (temperature 1, no
    /// truncation).
    pub post_sampling: bool,
    /// Reuse cached KV blocks of an earlier request with the same prefix.
    pub cache_prompt: bool,
    /// Generation ends (as `MaxTokens`) at the first token after this long since the first
    /// token once the answer holds a newline (llama-server's `t_max_predict_ms`).
    pub max_predict_time: Option<std::time::Duration>,
    /// Run in this slot (llama-server's `id_slot`; below the engine's slot count), waiting
    /// for it to be free; requests behind it that can run elsewhere are not held up.
    pub slot: Option<usize>,
    /// Send [`Event::Progress`] as the prompt is read: once when the prefix cache has been
    /// looked up, then after each forward that computed some of its rows.
    pub progress: bool,
    /// The prefix-cache namespace this request's blocks are cached in and taken from
    /// (`kv::SHARED`, or one per API key and `cache_salt`): no other namespace sees them.
    pub cache_namespace: u64,
    /// This request's bounds on draft length (llama-server's `speculative.n_max` /
    /// `speculative.n_min`), within the server's.
    pub draft: DraftLimits,
    /// Embed the prompt instead of generating: the prompt's hidden states after the output
    /// norm, pooled so, come back in one [`Event::Embedding`] before `Done` (whose `finish`
    /// is then `Eos` and `predicted_n` 0). Every prompt row is computed (the prefix cache
    /// is not read).
    pub embed: Option<Pooling>,
    /// When the slot's context is full, drop tokens and go on ([`ContextShift`]); `None`:
    /// generation ends there ([`FinishReason::ContextFull`]).
    pub context_shift: Option<ContextShift>,
    /// The scale of each of the model's LoRA adapters, in their order (one left out: 0;
    /// `None`: the adapters' own scales, [`model::lora::Adapter::scale`]). Blocks computed
    /// with adapters are other KV: the engine caches them in a namespace of their scales
    /// ([`GenRequest::resolve_adapters`]).
    pub lora: Option<Vec<f32>>,
    /// Images in the prompt, in order, apart: each one's rows enter as its embeddings in
    /// place of its placeholder tokens' (which name it in the prefix cache only together
    /// with [`GenRequest::cache_namespace`], one of the images' contents).
    pub images: Vec<PromptImage>,
}

/// An image's embeddings in a prompt: rows `at..at + n` enter as `embeddings`
/// (`[n, n_embd]`, a tower's output) instead of their tokens' embeddings, all in one step.
#[derive(Debug, Clone, PartialEq)]
pub struct PromptImage {
    pub at: usize,
    pub n: usize,
    pub embeddings: std::sync::Arc<[f32]>,
    /// Its rows see one another, not only the earlier ones (Gemma 3): the step that
    /// computes them ends with them.
    pub bidirectional: bool,
}

impl PromptImage {
    /// Its positions.
    pub fn span(&self) -> std::ops::Range<usize> {
        self.at..self.at + self.n
    }
}

impl GenRequest {
    /// With adapters whose own scales are `defaults`: `lora` becomes the scales the request
    /// computes with, and where any is not 0 its cache namespace one of its own for them.
    pub(crate) fn resolve_adapters(&mut self, defaults: &[f32]) {
        use std::hash::{Hash, Hasher};
        if defaults.is_empty() {
            return;
        }
        let scales = self.lora.take().unwrap_or_else(|| defaults.to_vec());
        if scales.iter().any(|&s| s != 0.0) {
            let mut h = std::collections::hash_map::DefaultHasher::new();
            ("lora", self.cache_namespace).hash(&mut h);
            scales.iter().for_each(|s| s.to_bits().hash(&mut h));
            self.cache_namespace = h.finish().max(1);
        }
        self.lora = Some(scales);
    }
}

/// llama-server's context shift: when a generating sequence fills its slot, the tokens at
/// `keep..keep + discard` are dropped (`keep` at most `slot_ctx - 4`; `discard` at most
/// what follows `keep` but one; `None`: half of it) and generation goes on from the rest.
/// The rest's KV is what its tokens give at their new positions: what follows `keep` is
/// computed again (the prefix cache gives back the kept prefix's whole blocks), so the
/// continuation is the one a request whose prompt is the shifted tokens would get.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ContextShift {
    pub keep: usize,
    pub discard: Option<usize>,
}

impl ContextShift {
    /// The tokens to drop from a sequence of `len` tokens in a slot of `slot_ctx`
    /// positions: `keep'..keep' + n`, or `None` when nothing can be dropped.
    pub fn dropped(&self, len: usize, slot_ctx: usize) -> Option<std::ops::Range<usize>> {
        let keep = self.keep.min(slot_ctx.saturating_sub(4)).min(len);
        let left = len - keep;
        let n = self.discard.unwrap_or(left / 2).min(left.saturating_sub(1));
        (n > 0).then(|| keep..keep + n)
    }
}

/// How an embedding request pools its prompt's states.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pooling {
    /// One vector per prompt token.
    None,
    /// The mean over the prompt's tokens.
    Mean,
    /// The first token's.
    Cls,
    /// The last token's.
    Last,
}

/// Per-request bounds on speculative drafts; `None`: the server's setting.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DraftLimits {
    /// At most this many draft tokens per step (0: no speculation for this request).
    pub n_max: Option<usize>,
    /// Drafts shorter than this are dropped rather than verified.
    pub n_min: Option<usize>,
}

/// One generated token with its log-probability under the model (temperature 1, no
/// truncation) and the most likely alternatives, best first.
#[derive(Debug, Clone, PartialEq)]
pub struct TokenLogprob {
    pub id: u32,
    pub logprob: f32,
    pub top: Vec<(u32, f32)>,
}

/// Why generation ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FinishReason {
    /// An end-of-generation token.
    Eos,
    /// A stop string, which is not part of the text.
    StopWord(String),
    /// `max_tokens` generated.
    MaxTokens,
    /// The slot's context is full.
    ContextFull,
}

impl FinishReason {
    /// OpenAI's `finish_reason`.
    pub fn openai(&self) -> &'static str {
        match self {
            FinishReason::Eos | FinishReason::StopWord(_) => "stop",
            FinishReason::MaxTokens | FinishReason::ContextFull => "length",
        }
    }
}

/// The end of a request: counts and timings (llama.cpp's `timings` fields).
#[derive(Debug, Clone, PartialEq)]
pub struct Summary {
    /// The slot the request ran in.
    pub slot: usize,
    pub finish: FinishReason,
    /// Prompt tokens.
    pub prompt_n: usize,
    /// Prompt tokens whose KV came from the prefix cache.
    pub cache_n: usize,
    /// Tokens generated.
    pub predicted_n: usize,
    /// From the start of prompt processing to the first token.
    pub prompt_ms: f64,
    /// From the first token to the last.
    pub predicted_ms: f64,
    pub draft_n: usize,
    pub draft_n_accepted: usize,
    /// Time the request's grammar took: masking logits and advancing past tokens.
    pub grammar_ms: f64,
    /// Tokens were dropped to go on past the slot's context ([`ContextShift`]).
    pub truncated: bool,
}

/// A prompt's reading so far (llama-server's `prompt_progress`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Progress {
    /// The prompt's tokens.
    pub total: usize,
    /// Those reused from the prefix cache.
    pub cache: usize,
    /// Those computed or reused so far (`cache..=total`).
    pub processed: usize,
    /// Since the request entered its slot.
    pub time_ms: f64,
}

/// What the engine sends back on a request's channel: deltas, then exactly one `Done`,
/// `Rejected` or `Failed`.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// Text completed since the last delta (whole UTF-8 characters; a possible start of a
    /// stop string is held back), the tokens generated since then, and their
    /// log-probabilities when the request asked for them.
    Delta {
        /// The slot the request runs in.
        slot: usize,
        text: String,
        tokens: Vec<u32>,
        logprobs: Vec<TokenLogprob>,
    },
    Done(Summary),
    /// How far the prompt has been read (only for requests that ask, [`GenRequest::progress`]).
    Progress(Progress),
    /// An embedding request's vectors (`[n_embd]` each): one, or one per prompt token.
    Embedding(Vec<Vec<f32>>),
    /// The request cannot be served as asked (it does not fit a slot, a token is outside the
    /// vocabulary): the client's error.
    Rejected(String),
    /// The computation went wrong (the model's numbers became NaN or infinite): the
    /// server's error. Other requests are unaffected.
    Failed(String),
    /// A part of the model is out of reach (a split model's box is down past its grace
    /// window): retry later.
    Unavailable(String),
}
