//! The edge: raw JSON bodies become valid requests, or a 400 that names the field.

use axum::body::Bytes;
use engine::{DraftLimits, GenRequest, SamplerConfig};
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::{Map, Value};

use crate::chat::{render_chat, Ending, RawMessage};
use crate::constrain::{self, RawChain};
use crate::error::ApiError;
use crate::prompts::{checked_prompt, OnePrompt, Prompt};
use crate::reasoning::{think_budget, BudgetAsked};
use crate::state::Ready;
use crate::tools::{self, ToolSpec};

/// Parses a JSON body into `T`; a type error names the field's path (`messages[0].role`).
pub fn parse<T: DeserializeOwned>(body: &Bytes) -> Result<T, ApiError> {
    let first = body.iter().find(|b| !b.is_ascii_whitespace());
    if first.is_some_and(|&b| b != b'{') {
        return Err(ApiError::bad_request(
            "the request body must be a JSON object",
        ));
    }
    let de = &mut serde_json::Deserializer::from_slice(body);
    let value = serde_path_to_error::deserialize(&mut *de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        if inner.is_syntax() || inner.is_eof() {
            ApiError::bad_request(format!("invalid JSON: {inner}"))
        } else if path == "." {
            ApiError::bad_request(format!("invalid request: {inner}"))
        } else {
            ApiError::invalid(path.clone(), format!("{path}: {inner}"))
        }
    })?;
    de.end()
        .map_err(|e| ApiError::bad_request(format!("trailing bytes after the JSON body: {e}")))?;
    Ok(value)
}

/// `stop`: one string or a list.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum Stop {
    One(String),
    Many(Vec<String>),
}

/// `logprobs`: a bool (chat) or a count (completions).
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum Logprobs {
    Flag(bool),
    Count(i64),
}

#[derive(Debug, Deserialize, Default)]
pub struct StreamOptions {
    #[serde(default)]
    pub include_usage: bool,
}

/// Every field the generation routes read; each route uses its own subset.
#[derive(Debug, Deserialize, Default)]
#[serde(default)]
pub struct RawRequest {
    pub model: Option<String>,
    pub messages: Option<Vec<RawMessage>>,
    pub prompt: Option<Prompt>,
    pub max_tokens: Option<i64>,
    pub max_completion_tokens: Option<i64>,
    pub n_predict: Option<i64>,
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    pub top_k: Option<i64>,
    pub min_p: Option<f64>,
    pub seed: Option<i64>,
    pub stop: Option<Stop>,
    pub stream: Option<bool>,
    pub stream_options: Option<StreamOptions>,
    pub logprobs: Option<Logprobs>,
    pub top_logprobs: Option<i64>,
    pub n_probs: Option<i64>,
    pub n: Option<i64>,
    pub ignore_eos: Option<bool>,
    pub cache_prompt: Option<bool>,
    /// vLLM's: prompts are cached apart for each salt.
    pub cache_salt: Option<String>,
    pub echo: Option<bool>,
    pub tools: Option<Value>,
    pub tool_choice: Option<Value>,
    pub parallel_tool_calls: Option<Value>,
    pub chat_template_kwargs: Option<Map<String, Value>>,
    /// vLLM's: continue the final assistant message (default: when the last message is the
    /// assistant's, as llama-server does).
    pub continue_final_message: Option<bool>,
    /// vLLM's: open the assistant's turn after the messages (default: unless continuing).
    pub add_generation_prompt: Option<bool>,
    /// llama-server's flat keys for per-request draft bounds.
    #[serde(rename = "speculative.n_max")]
    pub speculative_n_max: Option<i64>,
    #[serde(rename = "speculative.n_min")]
    pub speculative_n_min: Option<i64>,
    /// The same bounds as an object: `{"n_max": .., "n_min": ..}`.
    pub speculative: Option<RawSpeculative>,
    /// llama-server's: `none` leaves reasoning in the content; `auto` and `deepseek` split
    /// it out (the server's default, `--reasoning-format`, otherwise).
    pub reasoning_format: Option<String>,
    /// llama-server's: `false` leaves tool calls as text in the answer.
    pub parse_tool_calls: Option<bool>,
    /// llama-server's: `n_probs` reports probabilities after the sampling chain.
    pub post_sampling_probs: Option<bool>,
    /// llama-server's: a stream reports the prompt's reading (`prompt_progress` chunks).
    pub return_progress: Option<bool>,
    /// llama-server's: every streamed chunk carries the timings so far.
    pub timings_per_token: Option<bool>,
    /// llama-server's: the answer carries `__verbose` (the prompt and the native answer).
    pub verbose: Option<bool>,
    /// llama-server's: run in this slot (-1: any).
    pub id_slot: Option<i64>,
    /// llama-server's: reasoning tokens before the end of reasoning is forced (-1: the
    /// server's `--reasoning-budget`); `thinking_budget_tokens` is its other name.
    pub reasoning_budget_tokens: Option<i64>,
    pub thinking_budget_tokens: Option<i64>,
    pub reasoning_budget_message: Option<String>,
    /// llama-server's: stop at the first token past this many ms of generation once the
    /// answer has a newline (0: no limit).
    pub t_max_predict_ms: Option<i64>,
    /// llama-server's: prompt tokens (past BOS; -1: all) kept when the context shifts, and
    /// how many after them are dropped (0: half of the rest). Without `--context-shift`
    /// only their defaults (and `n_keep` -1) are taken: nothing is ever dropped.
    pub n_keep: Option<i64>,
    pub n_discard: Option<i64>,
    /// llama-server's: the LoRA adapters' scales for this request (`[{id, scale}]`).
    pub lora: Option<Value>,
    /// Penalties, typical-p, the stage order, logit_bias and the structured-output fields.
    #[serde(flatten)]
    pub chain: RawChain,
    /// Set by the Messages route, never read from a body: no messages render as the opening
    /// of the assistant's turn.
    #[serde(skip)]
    pub empty_messages: bool,
    /// The fields read by none of the above ([`crate::fields::check`]).
    #[serde(flatten)]
    pub rest: Map<String, Value>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
pub struct RawSpeculative {
    pub n_max: Option<i64>,
    pub n_min: Option<i64>,
}

/// Most stop strings a request may give, and their bytes in all: matching costs time
/// proportional to the new text whatever they are, but the automaton is built per request.
const MAX_STOPS: usize = 16;
const MAX_STOP_BYTES: usize = 16 << 10;

/// Most choices a request may ask for (its prompts times `n`).
const MAX_CHOICES: usize = 16;

/// Largest per-request draft bound accepted.
const MAX_DRAFT: i64 = 256;

fn draft_bound(name: &str, v: Option<i64>) -> Result<Option<usize>, ApiError> {
    match v {
        None => Ok(None),
        Some(n) if (0..=MAX_DRAFT).contains(&n) => Ok(Some(n as usize)),
        Some(n) => Err(ApiError::invalid(
            name,
            format!("{name} must be between 0 and {MAX_DRAFT}, got {n}"),
        )),
    }
}

/// Which route a request came through: it decides defaults and field names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    Chat,
    Completions,
    Native,
}

/// How token log-probabilities are reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogprobsSpec {
    pub n_top: usize,
}

/// A generation request that passed validation: what the engine runs (a request per
/// choice: `n` for each prompt, in OpenAI's order of choices), and how the answer is given.
#[derive(Debug)]
pub struct ValidGen {
    pub choices: Vec<GenRequest>,
    pub answer: AnswerSpec,
}

/// How an answer is given back.
#[derive(Debug, Clone)]
pub struct AnswerSpec {
    /// Choices per prompt.
    pub n: usize,
    pub stream: bool,
    pub include_usage: bool,
    pub logprobs: Option<LogprobsSpec>,
    /// The prompt text as rendered (chat) or given, for `/completion`'s `prompt` field.
    pub prompt_text: String,
    /// The tools the answer may call, when it may call any: its text is parsed for calls.
    pub tools: Option<ToolSpec>,
    /// Whether reasoning is split out of the content (`None`: the server's setting).
    pub reasoning: Option<bool>,
    /// llama-server's `generation_settings`: what the request runs with.
    pub settings: Value,
    /// Streamed: `prompt_progress` chunks as the prompt is read.
    pub progress: bool,
    /// Streamed: the timings so far in every chunk.
    pub timings_per_token: bool,
    /// `__verbose` in the answer.
    pub verbose: bool,
}

/// `v` unless it is outside `lo..=hi` (or not finite): then a 400 naming `name`.
pub(crate) fn range(name: &str, v: Option<f64>, lo: f64, hi: f64) -> Result<Option<f64>, ApiError> {
    match v {
        Some(x) if !(x.is_finite() && (lo..=hi).contains(&x)) => Err(ApiError::invalid(
            name,
            format!("{name} must be between {lo} and {hi}, got {x}"),
        )),
        v => Ok(v),
    }
}

impl RawRequest {
    /// `tools`, `tool_choice` and `parallel_tool_calls`, validated.
    pub fn tool_spec(&self) -> Result<ToolSpec, ApiError> {
        ToolSpec::from_request(
            self.tools.as_ref(),
            self.tool_choice.as_ref(),
            self.parallel_tool_calls.as_ref(),
        )
    }

    fn ending(&self) -> Ending {
        Ending {
            continue_final: self.continue_final_message,
            generation_prompt: self.add_generation_prompt,
            empty: self.empty_messages,
        }
    }

    /// The prompt a chat request renders to, tools and `chat_template_kwargs` included:
    /// what `/apply-template` answers.
    pub fn chat_prompt(self, ready: &Ready) -> Result<String, ApiError> {
        let spec = self.tool_spec()?;
        let ending = self.ending();
        let messages = self
            .messages
            .ok_or_else(|| ApiError::invalid("messages", "messages is required"))?;
        render_chat(ready, messages, &spec, self.chat_template_kwargs, ending).map(|(p, _)| p)
    }

    /// The tokens [`RawRequest::chat_prompt`]'s prompt takes: what the token-counting
    /// routes answer.
    pub fn chat_prompt_tokens(self, ready: &Ready) -> Result<usize, ApiError> {
        let prompt = self.chat_prompt(ready)?;
        ready
            .tok
            .encode(&prompt, true, true)
            .map(|t| t.len())
            .map_err(|e| ApiError::invalid("messages", format!("cannot tokenize: {e}")))
    }

    /// Validates a request of `route` into a [`ValidGen`].
    pub fn validate(self, route: Route, ready: &Ready) -> Result<ValidGen, ApiError> {
        let asked = BudgetAsked {
            reasoning: self.reasoning_budget_tokens,
            thinking: self.thinking_budget_tokens,
            message: self.reasoning_budget_message.clone(),
        };
        crate::fields::check(&self.rest)?;
        let d = &ready.defaults;
        let reasoning = match self.reasoning_format.as_deref() {
            None => None,
            Some("none") => Some(false),
            Some("auto" | "deepseek") => Some(true),
            Some(other) => {
                return Err(ApiError::invalid(
                    "reasoning_format",
                    format!("reasoning_format must be none, auto or deepseek, got '{other}'"),
                ))
            }
        };
        let n = match self.n {
            None | Some(1) => 1,
            Some(n) if route == Route::Native => {
                return Err(ApiError::invalid(
                    "n",
                    format!(
                        "/completion gives one answer (n=1), got n={n}; /v1/completions takes n"
                    ),
                ))
            }
            Some(n) if (1..=MAX_CHOICES as i64).contains(&n) => n as usize,
            Some(n) => {
                return Err(ApiError::invalid(
                    "n",
                    format!("n must be between 1 and {MAX_CHOICES}, got {n}"),
                ))
            }
        };
        if self.echo == Some(true) {
            return Err(ApiError::invalid("echo", "echo is not supported"));
        }
        let temperature = range("temperature", self.temperature, 0.0, 2.0)?;
        let top_p = range("top_p", self.top_p, 0.0, 1.0)?;
        let min_p = range("min_p", self.min_p, 0.0, 1.0)?;
        let top_k = match self.top_k {
            Some(k) if k < 0 => {
                return Err(ApiError::invalid(
                    "top_k",
                    format!("top_k must be 0 (off) or positive, got {k}"),
                ))
            }
            k => k.map(|k| k as usize),
        };
        let seed = match self.seed.or(d.seed) {
            Some(s) if s >= 0 => s as u64,
            _ => rand_seed(),
        };
        let sampling = self.chain.sampling(SamplerConfig {
            temperature: temperature.map_or(d.sampling.temperature, |t| t as f32),
            top_k: top_k.unwrap_or(d.sampling.top_k),
            top_p: top_p.map_or(d.sampling.top_p, |p| p as f32),
            min_p: min_p.map_or(d.sampling.min_p, |p| p as f32),
            seed,
            ..d.sampling
        })?;
        let logit_bias = self.chain.logit_bias(ready)?;
        let dry = self.chain.dry(ready)?;
        let spec = self.tool_spec()?;
        if route != Route::Chat {
            let chat_only = [
                (
                    "continue_final_message",
                    self.continue_final_message.is_some(),
                ),
                (
                    "add_generation_prompt",
                    self.add_generation_prompt.is_some(),
                ),
            ];
            if let Some((name, _)) = chat_only.iter().find(|(_, given)| *given) {
                return Err(ApiError::invalid(
                    *name,
                    format!("{name} applies to /v1/chat/completions only"),
                ));
            }
        }
        if route != Route::Chat && !spec.tools.is_empty() {
            return Err(ApiError::invalid(
                "tools",
                "tools are offered through /v1/chat/completions only",
            ));
        }
        let ending = self.ending();
        let post_sampling = self.post_sampling_probs == Some(true);
        if post_sampling && route != Route::Native {
            return Err(ApiError::invalid(
                "post_sampling_probs",
                "post_sampling_probs applies to /completion's n_probs",
            ));
        }
        let tool_grammar = tools::lark(ready.tool_format, &spec, &ready.tok);
        let constraint = match (self.chain.grammar_spec()?, tool_grammar) {
            (None, None) => None,
            (Some((field, g)), None) => Some(Box::new(constrain::compile(ready, &field, &g)?)),
            (None, Some(lark)) => Some(Box::new(constrain::compile(
                ready,
                "tools",
                &text::GrammarSpec::Lark(lark),
            )?)),
            (Some((field, _)), Some(_)) => {
                return Err(ApiError::invalid(
                    field.clone(),
                    format!("{field} cannot be combined with tools (use tool_choice: none)"),
                ))
            }
        };

        // llama-server's `n_predict` wins on every route.
        let (max_name, max) = if self.n_predict.is_some() {
            ("n_predict", self.n_predict)
        } else if route != Route::Native && self.max_completion_tokens.is_some() {
            ("max_completion_tokens", self.max_completion_tokens)
        } else {
            ("max_tokens", self.max_tokens)
        };
        let max_tokens = match max {
            None => d.n_predict,
            Some(-1) if max_name == "n_predict" => None,
            Some(n) if n >= 1 => Some(n as usize),
            Some(n) => {
                return Err(ApiError::invalid(
                    max_name,
                    format!("{max_name} must be at least 1, got {n}"),
                ))
            }
        };

        let stop = match self.stop {
            None => vec![],
            Some(Stop::One(s)) => vec![s],
            Some(Stop::Many(v)) => v,
        };
        let stop_bytes: usize = stop.iter().map(String::len).sum();
        if stop.len() > MAX_STOPS
            || stop.iter().any(String::is_empty)
            || stop_bytes > MAX_STOP_BYTES
        {
            return Err(ApiError::invalid(
                "stop",
                format!(
                    "stop takes at most {MAX_STOPS} non-empty strings of {MAX_STOP_BYTES} bytes in all \
                     (got {} strings, {stop_bytes} bytes)",
                    stop.len()
                ),
            ));
        }

        let logprobs = match (route, self.logprobs, self.top_logprobs, self.n_probs) {
            (Route::Native, _, _, Some(n)) => count("n_probs", n)?.filter(|&n| n > 0),
            (Route::Chat, Some(Logprobs::Flag(true)), top, _) => Some(
                top.map_or(Ok(Some(0)), |t| count("top_logprobs", t))?
                    .unwrap_or(0),
            ),
            (Route::Chat, None | Some(Logprobs::Flag(false)), Some(_), _) => {
                return Err(ApiError::invalid(
                    "top_logprobs",
                    "top_logprobs needs logprobs: true",
                ))
            }
            (Route::Chat, Some(Logprobs::Count(_)), _, _) => {
                return Err(ApiError::invalid("logprobs", "logprobs must be a boolean"))
            }
            (Route::Completions, Some(Logprobs::Count(n)), _, _) => count("logprobs", n)?,
            (Route::Completions, Some(Logprobs::Flag(_)), _, _) => {
                return Err(ApiError::invalid("logprobs", "logprobs must be an integer"))
            }
            _ => None,
        }
        .map(|n_top| LogprobsSpec { n_top });

        let mut pictured = None;
        let prompts = match route {
            Route::Chat => {
                let messages = self
                    .messages
                    .ok_or_else(|| ApiError::invalid("messages", "messages is required"))?;
                let (text, pictures) =
                    render_chat(ready, messages, &spec, self.chat_template_kwargs, ending)?;
                let (prompt, pics) = crate::vision::prompt(ready, text, &pictures, "messages")?;
                pictured = pics;
                vec![prompt]
            }
            Route::Completions | Route::Native => match self.prompt.map(Prompt::each) {
                None => return Err(ApiError::invalid("prompt", "prompt is required")),
                Some(v) if v.is_empty() => return Err(ApiError::invalid("prompt", "the prompt list is empty")),
                Some(v) if v.len() * n > MAX_CHOICES => {
                    return Err(ApiError::invalid(
                        "prompt",
                        format!("{} prompts of n={n} choices each exceed the {MAX_CHOICES} choices of a request", v.len()),
                    ))
                }
                Some(mut v) => match v.as_slice() {
                    [OnePrompt::Object(o)] if o.has_media() => {
                        let Some(OnePrompt::Object(o)) = v.pop() else {
                            unreachable!("matched above")
                        };
                        let (text, pictures) = o.with_media("prompt", ready.vision.as_ref())?;
                        let (prompt, pics) = crate::vision::prompt(ready, text, &pictures, "prompt")?;
                        pictured = pics;
                        vec![prompt]
                    }
                    _ => v,
                },
            },
        };
        let many = prompts.len() > 1;
        let prompts = prompts
            .into_iter()
            .enumerate()
            .map(|(i, p)| checked_prompt(ready, route, p, many.then_some(i)))
            .collect::<Result<Vec<_>, _>>()?;
        let think_budget = think_budget(&asked, route, ready, &prompts[0].0)?;
        let nested = self.speculative.unwrap_or_default();
        let draft = DraftLimits {
            n_max: draft_bound("speculative.n_max", self.speculative_n_max.or(nested.n_max))?,
            n_min: draft_bound("speculative.n_min", self.speculative_n_min.or(nested.n_min))?,
        };
        let n_slots = ready.engine.config().n_parallel;
        let slot = match self.id_slot {
            None | Some(-1) => None,
            Some(s) if (0..n_slots as i64).contains(&s) => Some(s as usize),
            Some(s) => {
                return Err(ApiError::invalid(
                    "id_slot",
                    format!("id_slot must be -1 (any) or a slot below {n_slots}, got {s}"),
                ))
            }
        };
        let lora = ready.lora.for_request(self.lora.as_ref())?;
        let mut first = GenRequest {
            prompt: Vec::new(),
            sampling,
            dry,
            max_tokens,
            stop,
            shown_tokens: match spec.active() {
                true => tools::marker_tokens(ready.tool_format, &ready.tok),
                false => Vec::new(),
            },
            ignore_eos: self.ignore_eos.unwrap_or(false),
            logit_bias,
            think_budget,
            constraint,
            logprobs: logprobs.map(|l| l.n_top),
            post_sampling,
            cache_prompt: self.cache_prompt.unwrap_or(true),
            // Reports only a stream shows (a whole answer's timings come with it anyway).
            progress: self.stream == Some(true)
                && (self.return_progress == Some(true) || self.timings_per_token == Some(true)),
            slot,
            max_predict_time: match self.t_max_predict_ms {
                None | Some(0) => None,
                Some(ms) if ms > 0 => Some(std::time::Duration::from_millis(ms as u64)),
                Some(ms) => {
                    return Err(ApiError::invalid(
                        "t_max_predict_ms",
                        format!("t_max_predict_ms must be 0 (no limit) or positive, got {ms}"),
                    ))
                }
            },
            cache_namespace: match &self.cache_salt {
                None => kv::SHARED,
                Some(salt) if salt.is_empty() => {
                    return Err(ApiError::invalid(
                        "cache_salt",
                        "cache_salt must not be empty",
                    ))
                }
                Some(salt) => crate::namespace_of(("cache-salt", salt)),
            },
            lora: Some(lora),
            images: Vec::new(),
            draft,
            embed: None,
            context_shift: None,
        };
        let n_keep = match self.n_keep {
            None => d.n_keep,
            Some(n) if n >= -1 => n,
            Some(n) => {
                return Err(ApiError::invalid(
                    "n_keep",
                    format!("n_keep must be -1 (the whole prompt) or at least 0, got {n}"),
                ))
            }
        };
        let n_discard = match self.n_discard {
            None | Some(0) => None,
            Some(n) if n > 0 => Some(n as usize),
            Some(n) => {
                return Err(ApiError::invalid(
                    "n_discard",
                    format!(
                        "n_discard must be 0 (half of what follows n_keep) or positive, got {n}"
                    ),
                ))
            }
        };
        if !d.context_shift {
            let asked = [
                ("n_keep", self.n_keep.is_some_and(|n| n > 0)),
                ("n_discard", n_discard.is_some()),
            ];
            if let Some((name, _)) = asked.into_iter().find(|a| a.1) {
                return Err(ApiError::invalid(
                    name,
                    format!(
                        "{name}: this server never shifts the context (an answer stops at the \
                         slot's end); start it with --context-shift"
                    ),
                ));
            }
        }
        if let Some(p) = pictured {
            p.attach(&mut first);
        }
        let bos = usize::from(ready.tok.add_bos());
        let shift = |prompt: &[u32]| {
            // A shift would cut an image's rows apart: never for a prompt with images.
            (d.context_shift && first.images.is_empty()).then(|| engine::ContextShift {
                keep: usize::try_from(n_keep).map_or(prompt.len(), |k| k + bos),
                discard: n_discard,
            })
        };
        let prompt_text = prompts[0].0.clone();
        let eog = if first.ignore_eos {
            ready.tok.eog_ids()
        } else {
            &[]
        };
        let mut settings =
            generation_settings(&first, self.stream.unwrap_or(false), &self.chain, eog);
        settings["timings_per_token"] = serde_json::json!(self.timings_per_token == Some(true));
        settings["t_max_predict_ms"] = serde_json::json!(self.t_max_predict_ms.unwrap_or(0));
        settings["n_keep"] = serde_json::json!(n_keep);
        settings["n_discard"] = serde_json::json!(n_discard.unwrap_or(0));
        settings["lora"] = crate::lora::settings(first.lora.as_deref().unwrap_or_default());
        settings["reasoning_budget_tokens"] =
            serde_json::json!(first.think_budget.as_ref().map_or(-1, |b| b.tokens as i64));
        let choices = prompts
            .into_iter()
            .flat_map(|(_, ids)| (0..n).map(move |j| (ids.clone(), j)))
            .map(|(prompt, j)| GenRequest {
                context_shift: shift(&prompt),
                prompt,
                sampling: SamplerConfig {
                    seed: first.sampling.seed.wrapping_add(j as u64),
                    ..first.sampling
                },
                ..first.clone()
            })
            .collect();
        Ok(ValidGen {
            choices,
            answer: AnswerSpec {
                n,
                stream: self.stream.unwrap_or(false),
                include_usage: self.stream_options.is_some_and(|o| o.include_usage),
                logprobs,
                prompt_text,
                tools: (spec.active() && self.parse_tool_calls != Some(false)).then_some(spec),
                reasoning,
                settings,
                progress: self.return_progress == Some(true),
                timings_per_token: self.timings_per_token == Some(true),
                verbose: self.verbose == Some(true),
            },
        })
    }
}

/// llama-server's `generation_settings` of `req`: the settings tandem has, and the inert
/// values of those it does not (refused unless inert, see [`crate::fields`]). `logit_bias`
/// lists the request's biases and, with `ignore_eos`, the end tokens `eog` at −∞ (JSON's
/// `null`, as llama-server writes it).
fn generation_settings(req: &GenRequest, stream: bool, chain: &RawChain, eog: &[u32]) -> Value {
    let s = &req.sampling;
    let dry = req.dry.as_ref();
    let breakers = chain.dry_sequence_breakers.clone().unwrap_or_else(|| {
        constrain::DRY_BREAKERS
            .iter()
            .map(|b| b.to_string())
            .collect()
    });
    let biases: Vec<Value> = req
        .logit_bias
        .iter()
        .copied()
        .chain(eog.iter().map(|&t| (t, f32::NEG_INFINITY)))
        .map(|(token, bias)| serde_json::json!({"token": token, "bias": bias.is_finite().then_some(bias)}))
        .collect();
    serde_json::json!({
        "n_predict": req.max_tokens.map_or(-1, |n| n as i64),
        "seed": s.seed,
        "temperature": s.temperature,
        "dynatemp_range": 0.0,
        "dynatemp_exponent": 1.0,
        "top_k": s.top_k,
        "top_p": s.top_p,
        "min_p": s.min_p,
        "top_n_sigma": -1.0,
        "xtc_probability": 0.0,
        "xtc_threshold": 0.1,
        "typical_p": s.typical_p,
        "repeat_last_n": s.penalties.last_n,
        "repeat_penalty": s.penalties.repeat,
        "presence_penalty": s.penalties.presence,
        "frequency_penalty": s.penalties.frequency,
        "dry_multiplier": dry.map_or(0.0, |d| d.multiplier),
        "dry_base": dry.map_or(1.75, |d| d.base),
        "dry_allowed_length": dry.map_or(2, |d| d.allowed_length),
        "dry_penalty_last_n": dry.map_or(-1, |d| d.last_n as i64),
        "dry_sequence_breakers": breakers,
        "mirostat": 0,
        "mirostat_tau": 5.0,
        "mirostat_eta": 0.1,
        "stop": req.stop,
        "max_tokens": req.max_tokens.map_or(-1, |n| n as i64),
        "n_keep": 0,
        "n_discard": 0,
        "ignore_eos": req.ignore_eos,
        "stream": stream,
        "n_probs": req.logprobs.unwrap_or(0),
        "min_keep": 0,
        "samplers": s.order.stages().iter().map(|st| st.name()).collect::<Vec<_>>(),
        "speculative.n_max": req.draft.n_max,
        "speculative.n_min": req.draft.n_min,
        "timings_per_token": false,
        "post_sampling_probs": req.post_sampling,
        "logit_bias": biases,
    })
}

fn count(name: &str, n: i64) -> Result<Option<usize>, ApiError> {
    if (0..=20).contains(&n) {
        Ok(Some(n as usize))
    } else {
        Err(ApiError::invalid(
            name,
            format!("{name} must be between 0 and 20, got {n}"),
        ))
    }
}

/// A seed for requests that give none: the clock, mixed.
pub fn rand_seed() -> u64 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    t.wrapping_mul(0x9E3779B97F4A7C15) >> 1
}
