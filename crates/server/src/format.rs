//! Response bodies: OpenAI's chat and completion objects and chunks, llama.cpp's
//! `/completion` objects, usage, timings and log-probabilities.

use std::sync::Arc;

use engine::{FinishReason, Summary, TokenLogprob};
use serde_json::{json, Value};
use text::Tokenizer;

use crate::reasoning::Splitter;
use crate::state::Ready;
use crate::telemetry::Telemetry;
use crate::tools::{CallParser, ToolCall};
use crate::transform::{Chain, Out};
use crate::validate::{AnswerSpec, Route};

/// llama.cpp's `timings`. `prompt_n` counts the prompt tokens computed, not those reused; the
/// generation rate is over the decode steps, one fewer than the tokens (the first token comes
/// from the prompt's last forward).
pub fn timings(s: &Summary) -> Value {
    let steps = s.predicted_n.saturating_sub(1);
    let computed = s.prompt_n - s.cache_n;
    let per_s = |n: usize, ms: f64| if ms > 0.0 { n as f64 * 1e3 / ms } else { 0.0 };
    let per_tok = |n: usize, ms: f64| if n > 0 { ms / n as f64 } else { 0.0 };
    json!({
        "cache_n": s.cache_n,
        "prompt_n": computed,
        "prompt_ms": s.prompt_ms,
        "prompt_per_token_ms": per_tok(computed, s.prompt_ms),
        "prompt_per_second": per_s(computed, s.prompt_ms),
        "predicted_n": s.predicted_n,
        "predicted_ms": s.predicted_ms,
        "predicted_per_token_ms": per_tok(steps, s.predicted_ms),
        "predicted_per_second": per_s(steps, s.predicted_ms),
        "draft_n": s.draft_n,
        "draft_n_accepted": s.draft_n_accepted,
        "grammar_ms": s.grammar_ms,
    })
}

pub fn usage(s: &Summary) -> Value {
    json!({
        "prompt_tokens": s.prompt_n,
        "completion_tokens": s.predicted_n,
        "total_tokens": s.prompt_n + s.predicted_n,
        "prompt_tokens_details": {"cached_tokens": s.cache_n},
    })
}

/// The transforms of a chat answer: the reasoning split when the model reasons or the
/// request asks for it (already thinking when the prompt ends in `<think>`; ended also by a
/// call block that the tool format opens straight from reasoning), and the tool calls.
pub fn chat_chain(ready: &Ready, answer: &AnswerSpec, calls: Option<CallParser>) -> Chain {
    let splitter = answer
        .reasoning
        .unwrap_or(ready.reasoning)
        .then(|| Splitter::for_prompt(&answer.prompt_text, ready.tool_format, calls.is_some()));
    Chain::new(splitter, calls)
}

/// Builds the bodies of one request's answer, streamed or whole.
pub struct Reply {
    pub route: Route,
    pub task: u64,
    pub created: u64,
    pub model: String,
    pub include_usage: bool,
    pub tok: Arc<Tokenizer>,
    /// `/completion` echoes the prompt text.
    pub prompt_text: String,
    /// Bytes of text sent so far (completions' `text_offset`).
    offset: usize,
    /// The choice's place among the request's choices.
    pub index: usize,
    /// Tokens of the prompt (`tokens_evaluated` in `/completion` chunks).
    pub n_prompt: usize,
    /// Tokens generated so far.
    n_predicted: usize,
    /// llama-server's `generation_settings` (in `/completion`'s last answer).
    settings: Value,
    /// `/completion`'s probabilities are after the sampling chain.
    post_sampling: bool,
    /// Reasoning split and tool calls parsed out of chat answers.
    chain: Chain,
    /// Streamed: `prompt_progress` chunks, and the timings so far in every chunk.
    telemetry: Telemetry,
    /// `__verbose` in the answer.
    verbose: bool,
}

impl Reply {
    /// The reply to request `task` of `route` on the model `ready` serves; `calls` parses
    /// tool calls out of the answer when the request offered tools.
    pub fn new(
        route: Route,
        task: u64,
        ready: &Ready,
        answer: AnswerSpec,
        calls: Option<CallParser>,
    ) -> Self {
        let chain = match route {
            Route::Chat => chat_chain(ready, &answer, calls),
            _ => Chain::new(None, calls),
        };
        let (include_usage, prompt_text, settings) =
            (answer.include_usage, answer.prompt_text, answer.settings);
        let (progress, timings_per_token, verbose) =
            (answer.progress, answer.timings_per_token, answer.verbose);
        let created = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        Reply {
            route,
            task,
            created,
            model: ready.model_id.clone(),
            include_usage,
            tok: ready.tok.clone(),
            prompt_text,
            offset: 0,
            index: 0,
            n_prompt: 0,
            n_predicted: 0,
            post_sampling: settings["post_sampling_probs"] == json!(true),
            settings,
            chain,
            telemetry: Telemetry::new(progress, timings_per_token),
            verbose,
        }
    }

    /// A report of the prompt's reading: a chunk with `prompt_progress` when the request
    /// asked for them (llama-server's shapes), none otherwise.
    pub fn progress(&mut self, p: &engine::Progress) -> Option<Value> {
        let report = self.telemetry.on_progress(p)?;
        let mut v = match self.route {
            Route::Chat => self.chunk(json!({
                "index": self.index,
                "delta": {"role": "assistant", "content": null},
                "logprobs": null,
                "finish_reason": null,
            })),
            Route::Completions => self.chunk(json!({
                "index": self.index, "text": "", "logprobs": null, "finish_reason": null,
            })),
            Route::Native => json!({
                "index": self.index,
                "content": "",
                "tokens": [],
                "stop": false,
                "tokens_predicted": 0,
                "tokens_evaluated": p.total,
            }),
        };
        v["prompt_progress"] = report;
        if let Some(t) = self.telemetry.timings() {
            v["timings"] = t;
        }
        Some(v)
    }

    /// OpenAI's `finish_reason`: `tool_calls` when the answer called a tool.
    fn finish_reason(&self, s: &Summary) -> &'static str {
        if self.chain.n_calls > 0 {
            "tool_calls"
        } else {
            s.finish.openai()
        }
    }

    fn id(&self) -> String {
        match self.route {
            Route::Chat => format!("chatcmpl-{}", self.task),
            _ => format!("cmpl-{}", self.task),
        }
    }

    fn piece(&self, id: u32) -> (String, Vec<u8>) {
        let b = self.tok.token_to_piece(id).to_vec();
        (String::from_utf8_lossy(&b).into_owned(), b)
    }

    /// Log-probabilities in the route's shape; `Value::Null` when none were asked.
    fn logprobs(&mut self, lps: &[TokenLogprob], asked: bool) -> Value {
        if !asked {
            return Value::Null;
        }
        match self.route {
            Route::Chat => {
                let content: Vec<Value> = lps
                    .iter()
                    .map(|t| {
                        let (token, bytes) = self.piece(t.id);
                        let top: Vec<Value> = t
                            .top
                            .iter()
                            .map(|&(id, lp)| {
                                let (token, bytes) = self.piece(id);
                                json!({"token": token, "logprob": lp, "bytes": bytes})
                            })
                            .collect();
                        json!({"token": token, "logprob": t.logprob, "bytes": bytes, "top_logprobs": top})
                    })
                    .collect();
                json!({"content": content})
            }
            Route::Completions => {
                let (mut tokens, mut lp, mut top, mut offsets) = (vec![], vec![], vec![], vec![]);
                for t in lps {
                    let (token, _) = self.piece(t.id);
                    offsets.push(self.offset);
                    self.offset += token.len();
                    tokens.push(token);
                    lp.push(t.logprob);
                    let alts: serde_json::Map<String, Value> = t
                        .top
                        .iter()
                        .map(|&(id, l)| (self.piece(id).0, json!(l)))
                        .collect();
                    top.push(Value::Object(alts));
                }
                json!({"tokens": tokens, "token_logprobs": lp, "top_logprobs": top, "text_offset": offsets})
            }
            Route::Native => {
                // After the sampling chain, llama-server gives probabilities, not logs.
                let (key, top_key) = match self.post_sampling {
                    true => ("prob", "top_probs"),
                    false => ("logprob", "top_logprobs"),
                };
                let value = |lp: f32| match self.post_sampling {
                    true => json!(lp.exp()),
                    false => json!(lp),
                };
                let entry = |id: u32, lp: f32| {
                    let (token, bytes) = self.piece(id);
                    let mut v = json!({"id": id, "token": token, "bytes": bytes});
                    v[key] = value(lp);
                    v
                };
                Value::Array(
                    lps.iter()
                        .map(|t| {
                            let mut v = entry(t.id, t.logprob);
                            v[top_key] = t.top.iter().map(|&(id, lp)| entry(id, lp)).collect();
                            v
                        })
                        .collect(),
                )
            }
        }
    }

    fn chunk(&self, choice: Value) -> Value {
        let object = match self.route {
            Route::Chat => "chat.completion.chunk",
            _ => "text_completion",
        };
        let mut c = json!({
            "id": self.id(),
            "object": object,
            "created": self.created,
            "model": self.model,
            "system_fingerprint": fingerprint(),
            "choices": [choice],
        });
        if self.include_usage {
            c["usage"] = Value::Null;
        }
        c
    }

    /// What a stream starts with: the assistant role chunk for chat.
    pub fn opening(&self) -> Vec<Value> {
        match self.route {
            Route::Chat => vec![self.chunk(json!({
                "index": self.index,
                "delta": {"role": "assistant", "content": null},
                "logprobs": null,
                "finish_reason": null,
            }))],
            _ => vec![],
        }
    }

    /// One streamed delta of the request running in `slot`; `None` when it carries
    /// nothing to show.
    pub fn delta(
        &mut self,
        slot: usize,
        text: &str,
        tokens: &[u32],
        lps: &[TokenLogprob],
        asked: bool,
    ) -> Option<Value> {
        self.n_predicted += tokens.len();
        self.telemetry.on_tokens(tokens.len());
        let out = self.chain.push(text);
        if out.is_empty() && (lps.is_empty() || !asked) {
            return None;
        }
        let logprobs = self.logprobs(lps, asked);
        let mut v = match self.route {
            Route::Chat => self.chunk(json!({
                "index": self.index,
                "delta": chat_delta(&out),
                "logprobs": logprobs,
                "finish_reason": null,
            })),
            Route::Completions => self.chunk(json!({
                "index": self.index,
                "text": out.content,
                "logprobs": logprobs,
                "finish_reason": null,
            })),
            Route::Native => {
                let mut v = json!({
                    "index": self.index,
                    "content": out.content,
                    "tokens": tokens,
                    "stop": false,
                    "id_slot": slot,
                    "tokens_predicted": self.n_predicted,
                    "tokens_evaluated": self.n_prompt,
                });
                if asked {
                    v["completion_probabilities"] = logprobs;
                }
                v
            }
        };
        if let Some(t) = self.telemetry.timings() {
            v["timings"] = t;
        }
        Some(v)
    }

    /// The closing bodies of a stream (the `[DONE]` marker is added by the caller).
    pub fn closing(&mut self, s: &Summary) -> Vec<Value> {
        let mut out = Vec::new();
        let rest = self.chain.finish();
        if !rest.is_empty() {
            out.push(self.chunk(json!({
                "index": self.index,
                "delta": chat_delta(&rest),
                "logprobs": null,
                "finish_reason": null,
            })));
        }
        out.extend(self.closing_chunks(s));
        out
    }

    fn closing_chunks(&self, s: &Summary) -> Vec<Value> {
        match self.route {
            Route::Chat | Route::Completions => {
                let choice = match self.route {
                    Route::Chat => json!({
                        "index": self.index, "delta": {}, "logprobs": null,
                        "finish_reason": self.finish_reason(s),
                    }),
                    _ => json!({
                        "index": self.index, "text": "", "logprobs": null,
                        "finish_reason": s.finish.openai(),
                    }),
                };
                let mut last = self.chunk(choice);
                last["timings"] = timings(s);
                let mut out = vec![last];
                if self.include_usage {
                    let mut u = self.usage_chunk(usage(s));
                    u["timings"] = timings(s);
                    out.push(u);
                }
                out
            }
            Route::Native => {
                let mut v = self.native_summary(s);
                v["content"] = json!("");
                vec![v]
            }
        }
    }

    /// The chunk that ends a stream asked `include_usage`: no choices, and `usage`.
    pub fn usage_chunk(&self, usage: Value) -> Value {
        let mut u = self.chunk(Value::Null);
        u["choices"] = json!([]);
        u["usage"] = usage;
        u
    }

    fn native_summary(&self, s: &Summary) -> Value {
        let (stop_type, word) = match &s.finish {
            FinishReason::Eos => ("eos", String::new()),
            FinishReason::StopWord(w) => ("word", w.clone()),
            FinishReason::MaxTokens | FinishReason::ContextFull => ("limit", String::new()),
        };
        json!({
            "index": self.index,
            "id_slot": s.slot,
            "stop": true,
            "model": self.model,
            "tokens_predicted": s.predicted_n,
            "tokens_evaluated": s.prompt_n,
            "tokens_cached": s.cache_n,
            "prompt": self.prompt_text,
            "truncated": s.truncated || s.finish == FinishReason::ContextFull,
            "stop_type": stop_type,
            "stopped_eos": stop_type == "eos",
            "stopped_word": stop_type == "word",
            "stopped_limit": stop_type == "limit",
            "stopping_word": word,
            "timings": timings(s),
            "generation_settings": self.settings,
        })
    }

    /// The whole answer of a request that did not stream.
    pub fn complete(
        &mut self,
        text: String,
        tokens: Vec<u32>,
        lps: &[TokenLogprob],
        asked: bool,
        s: &Summary,
    ) -> Value {
        let logprobs = self.logprobs(lps, asked);
        let verbose = (self.verbose && self.route != Route::Native).then(|| {
            let mut v = self.native_summary(s);
            v["content"] = json!(text);
            v["tokens"] = json!(tokens);
            v
        });
        let out = self.chain.whole(&text);
        let mut message = json!({"role": "assistant", "content": out.content});
        if !out.reasoning.is_empty() {
            message["reasoning_content"] = json!(out.reasoning);
        }
        if !out.calls.is_empty() {
            if out.content.is_empty() {
                message["content"] = Value::Null;
            }
            message["tool_calls"] = tool_calls(&out.calls, false);
        }
        let mut answer = match self.route {
            Route::Chat => json!({
                "id": self.id(),
                "object": "chat.completion",
                "created": self.created,
                "model": self.model,
                "system_fingerprint": fingerprint(),
                "choices": [{
                    "index": self.index,
                    "message": message,
                    "logprobs": logprobs,
                    "finish_reason": self.finish_reason(s),
                }],
                "usage": usage(s),
                "timings": timings(s),
            }),
            Route::Completions => json!({
                "id": self.id(),
                "object": "text_completion",
                "created": self.created,
                "model": self.model,
                "system_fingerprint": fingerprint(),
                "choices": [{
                    "index": self.index,
                    "text": text,
                    "logprobs": logprobs,
                    "finish_reason": s.finish.openai(),
                }],
                "usage": usage(s),
                "timings": timings(s),
            }),
            Route::Native => {
                let mut v = self.native_summary(s);
                v["content"] = json!(text);
                v["tokens"] = json!(tokens);
                if asked {
                    v["completion_probabilities"] = logprobs;
                }
                v
            }
        };
        if let Some(v) = verbose {
            answer["__verbose"] = v;
        }
        answer
    }
}

/// A chat delta with whichever of reasoning, content and tool calls it has.
fn chat_delta(out: &Out) -> Value {
    let mut d = serde_json::Map::new();
    if !out.reasoning.is_empty() {
        d.insert("reasoning_content".into(), json!(out.reasoning));
    }
    if !out.content.is_empty() || (out.reasoning.is_empty() && out.calls.is_empty()) {
        d.insert("content".into(), json!(out.content));
    }
    if !out.calls.is_empty() {
        d.insert("tool_calls".into(), tool_calls(&out.calls, true));
    }
    Value::Object(d)
}

/// OpenAI's `tool_calls`: each call whole, with its `index` in stream deltas.
fn tool_calls(calls: &[ToolCall], streamed: bool) -> Value {
    Value::Array(
        calls
            .iter()
            .map(|c| {
                let mut v = json!({
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.name, "arguments": c.arguments},
                });
                if streamed {
                    v["index"] = json!(c.index);
                }
                v
            })
            .collect(),
    )
}

pub fn fingerprint() -> String {
    format!("tandem-{}", env!("CARGO_PKG_VERSION"))
}
