//! One request being served: its tokens, KV blocks, sampler, and the text going back.

use std::time::Instant;

use kv::SeqKv;
use text::{Detokenizer, StopMatcher, Stops, Tokenizer};
use tokio::sync::mpsc::UnboundedSender;

use crate::request::{
    ContextShift, DraftLimits, Event, FinishReason, GenRequest, Pooling, PromptImage, Summary,
    TokenLogprob,
};
use crate::sampling::Mask;
use crate::speculative::Draft;
use crate::Sampler;

/// What became of a step's draft tokens.
#[derive(Debug, Clone, Copy)]
pub(crate) struct StepDrafts {
    pub computed: usize,
    pub verified: usize,
    pub accepted: usize,
}

/// An embedding request's states so far: the running sum (mean), the first (cls), or
/// every one (none, last); positions `0..taken` are in them (a preempted request computes
/// them again, and they are not taken twice).
struct Pooled {
    pooling: Pooling,
    vectors: Vec<Vec<f32>>,
    taken: usize,
}

/// A sequence in a slot. Its tokens are the prompt then the generated tokens; positions
/// `0..kv.len()` are computed, the rest (`pending`) still to run through the model. After
/// the prompt, `pending` is 1: the token sampled last, and `draft` may hold tokens
/// proposed to follow it, computed in the same step and verified row by row.
pub(crate) struct Sequence {
    pub task: u64,
    /// The slot it runs in.
    pub slot: usize,
    pub tokens: Vec<u32>,
    pub n_prompt: usize,
    pub kv: SeqKv,
    /// Prompt positions reused from the prefix cache.
    pub n_cached: usize,
    /// Whether to look the prompt up in the prefix cache when the KV is empty.
    pub cache_prompt: bool,
    /// The prefix-cache namespace of its blocks.
    pub cache_namespace: u64,
    /// Its LoRA adapters' scales ([`GenRequest::lora`]).
    pub lora: Option<Vec<f32>>,
    /// Whether the request asked for [`Event::Progress`], and the prompt rows last reported.
    progress: bool,
    progress_at: Option<usize>,
    pub n_generated: usize,
    pub draft: Draft,
    pub draft_limits: DraftLimits,
    /// Draft tokens verified, and accepted, over the request.
    pub draft_n: usize,
    pub draft_n_accepted: usize,
    /// Whether this step's rows still verify (no rejection, the request goes on).
    verifying: bool,
    /// Draft tokens verified, and accepted, in this step (a draft token after the end of
    /// the request is not verified).
    step_verified: usize,
    /// Draft tokens of the latest step.
    pub draft_depth: usize,
    /// While a step runs: the tokens known when it began (its rows from there on are the
    /// draft's, whatever verification has since made of them).
    step_start: Option<usize>,
    step_accepted: usize,
    /// Accepted draft tokens the latest step's truncation gave back (a recurrent state
    /// goes back to its checkpoint before the drafts), computed again with the next token.
    pub redo: usize,
    max_tokens: Option<usize>,
    /// [`GenRequest::max_predict_time`], and whether the answer has had a newline.
    max_predict_time: Option<std::time::Duration>,
    newline: bool,
    slot_ctx: usize,
    /// What is dropped when the slot is full, and the tokens to drop once the step that
    /// filled it is over ([`Sequence::shift_context`]).
    shift: Option<ContextShift>,
    pub shift_due: Option<std::ops::Range<usize>>,
    truncated: bool,
    /// The request's stop strings, matched as the text streams.
    stops: StopMatcher,
    stop_words: Vec<String>,
    logprobs: Option<usize>,
    post_sampling: bool,
    mask: Mask,
    sampler: Sampler,
    detok: Detokenizer,
    /// Text not yet sent: it may be the start of a stop string.
    held: String,
    out_tokens: Vec<u32>,
    out_logprobs: Vec<TokenLogprob>,
    out: UnboundedSender<Event>,
    t_start: Instant,
    t_first: Option<Instant>,
    /// An embedding request's pooling and states.
    pooled: Option<Pooled>,
    /// The prompt's images ([`GenRequest::images`]).
    pub images: Vec<PromptImage>,
}

impl Sequence {
    pub fn new(
        task: u64,
        slot: usize,
        req: GenRequest,
        out: UnboundedSender<Event>,
        slot_ctx: usize,
    ) -> Self {
        Sequence {
            task,
            slot,
            n_prompt: req.prompt.len(),
            tokens: req.prompt,
            kv: SeqKv::default(),
            n_cached: 0,
            cache_prompt: req.cache_prompt && req.embed.is_none(),
            cache_namespace: req.cache_namespace,
            lora: req.lora,
            progress: req.progress,
            progress_at: None,
            n_generated: 0,
            draft: Draft::default(),
            draft_limits: req.draft,
            draft_n: 0,
            draft_n_accepted: 0,
            verifying: false,
            step_verified: 0,
            draft_depth: 0,
            step_start: None,
            step_accepted: 0,
            redo: 0,
            max_tokens: req.max_tokens,
            max_predict_time: req.max_predict_time,
            newline: false,
            slot_ctx,
            shift: req.context_shift,
            shift_due: None,
            truncated: false,
            stops: StopMatcher::new(Stops::new(&req.stop)),
            stop_words: req.stop,
            logprobs: req.logprobs,
            post_sampling: req.post_sampling,
            mask: Mask {
                constraint: req.constraint,
                bias: req.logit_bias,
                ban_eog: req.ignore_eos,
                budget: req.think_budget.map(crate::sampling::Budget::new),
                grammar_time: Default::default(),
            },
            sampler: Sampler::new(req.sampling).with_dry(req.dry),
            detok: Detokenizer::new().showing(req.shown_tokens),
            held: String::new(),
            out_tokens: Vec::new(),
            out_logprobs: Vec::new(),
            out,
            t_start: Instant::now(),
            t_first: None,
            pooled: req.embed.map(|pooling| Pooled {
                pooling,
                vectors: Vec::new(),
                taken: 0,
            }),
            images: req.images,
        }
    }

    /// How many of `n` prompt rows from position `from` to compute in one step with at most
    /// `room` rows, so that no image is cut: rows that start in an image take all of it
    /// (none when it does not fit in `room`), rows that reach into one stop before it, and
    /// rows after a bidirectional image wait for the next step.
    ///
    /// Example: an image at 10..20, `from` 4: `n` 8 gives 6 (up to the image); `n` 30
    /// gives 16 (bidirectional: up to its end), else 30.
    pub fn fit_images(&self, from: usize, n: usize, room: usize) -> usize {
        let mut n = n;
        if let Some(img) = self.images.iter().find(|i| i.span().contains(&from)) {
            let whole = img.span().end - from;
            if whole > room {
                return 0;
            }
            if img.bidirectional {
                return whole;
            }
            n = n.max(whole);
        }
        let n = n.min(room);
        for img in self.images.iter().filter(|i| i.at > from) {
            let (span, end) = (img.span(), from + n);
            if end <= span.start {
                break;
            }
            if end < span.end {
                return span.start - from;
            }
            if img.bidirectional {
                return span.end - from;
            }
        }
        n
    }

    /// Whether this request embeds its prompt instead of generating.
    pub fn embeds(&self) -> bool {
        self.pooled.is_some()
    }

    /// Whether an embedding request takes the normed state of position `pos` (its pooling's
    /// rows, and always the prompt's last, which ends it).
    pub fn wants_state(&self, pos: usize) -> bool {
        let last = pos + 1 == self.n_prompt;
        match self.pooled.as_ref().map(|p| p.pooling) {
            None => false,
            Some(Pooling::None | Pooling::Mean) => pos < self.n_prompt,
            Some(Pooling::Cls) => pos == 0 || last,
            Some(Pooling::Last) => last,
        }
    }

    /// Takes the normed state of position `pos` (in ascending order); at the prompt's last,
    /// sends the embedding and ends the request with its summary.
    pub fn take_state(&mut self, pos: usize, state: &[f32]) -> Option<Summary> {
        let p = self.pooled.as_mut().filter(|p| pos >= p.taken)?;
        p.taken = pos + 1;
        match (p.pooling, p.vectors.first_mut()) {
            (Pooling::Mean, Some(sum)) => sum.iter_mut().zip(state).for_each(|(s, &v)| *s += v),
            (Pooling::Cls, Some(_)) => {}
            (Pooling::Last, _) => p.vectors = vec![state.to_vec()],
            _ => p.vectors.push(state.to_vec()),
        }
        if pos + 1 < self.n_prompt {
            return None;
        }
        let mut vectors = std::mem::take(&mut p.vectors);
        if p.pooling == Pooling::Mean {
            let n = self.n_prompt as f32;
            vectors[0].iter_mut().for_each(|v| *v /= n);
        }
        let _ = self.out.send(Event::Embedding(vectors));
        self.t_first = Some(Instant::now());
        Some(self.finish(FinishReason::Eos))
    }

    /// Sends how far the prompt has been read (its computed rows), when the request asked
    /// and that changed since the last report.
    pub fn report_progress(&mut self) {
        self.report_read(self.kv.len());
    }

    /// [`Sequence::report_progress`] with `processed` rows read: called also while the KV
    /// is out for a forward, before the token the prompt's last row gives is sampled.
    pub fn report_read(&mut self, processed: usize) {
        let processed = processed.min(self.n_prompt);
        if !self.progress || self.progress_at.is_some_and(|p| p >= processed) {
            return;
        }
        self.progress_at = Some(processed);
        let _ = self.out.send(Event::Progress(crate::Progress {
            total: self.n_prompt,
            cache: self.n_cached,
            processed,
            time_ms: self.t_start.elapsed().as_secs_f64() * 1e3,
        }));
    }

    /// Sends the first report (the prefix cache looked up, no row computed), once.
    pub fn report_start(&mut self) {
        if self.progress_at.is_none() {
            self.report_progress();
        }
    }

    /// Tokens not yet computed.
    pub fn pending(&self) -> usize {
        self.tokens.len() - self.kv.len()
    }

    /// The client went away.
    pub fn is_cancelled(&self) -> bool {
        self.out.is_closed()
    }

    pub fn sampling(&self) -> crate::SamplerConfig {
        self.sampler.config
    }

    /// Whether generation goes on with every token computed but the last one and the
    /// accepted drafts given back ([`Sequence::redo`]).
    pub fn is_decoding(&self) -> bool {
        self.n_generated > 0 && self.pending() <= 1 + self.redo
    }

    /// Tokens the request may still generate, by `max_tokens` and the slot's context.
    pub fn remaining(&self) -> usize {
        let by_tokens = self
            .max_tokens
            .map_or(usize::MAX, |m| m.saturating_sub(self.n_generated));
        by_tokens.min(self.slot_ctx.saturating_sub(self.tokens.len()))
    }

    /// Draft tokens that fit before `max_tokens` or the slot's context ends the request.
    pub fn draft_room(&self) -> usize {
        self.remaining().saturating_sub(1)
    }

    /// The token computed at `pos`: a token of the sequence or, past its end (past the tokens
    /// known when the running step began), a draft token.
    pub fn row_token(&self, pos: usize) -> u32 {
        let n = self.step_start.unwrap_or(self.tokens.len());
        if pos < n {
            self.tokens[pos]
        } else {
            self.draft.tokens[pos - n]
        }
    }

    /// Starts the step's verification of `draft` (possibly empty).
    pub fn begin_step(&mut self) {
        self.verifying = true;
        self.step_start = Some(self.tokens.len());
        self.draft_depth = self.draft.len();
        self.step_verified = 0;
        self.step_accepted = 0;
    }

    /// Takes the logits (`[n_vocab]`, masked in place) of the row after the last accepted
    /// token: verifies the next draft token against them, or samples when none is left,
    /// and streams the resulting token. Returns the summary when generation ended, or why
    /// the request must fail (its grammar broke, or it forbids every token).
    pub fn accept(
        &mut self,
        logits: &mut [f32],
        tok: &Tokenizer,
    ) -> Result<Option<Summary>, String> {
        if !self.verifying {
            return Ok(None);
        }
        let i = self.step_accepted;
        self.mask
            .apply(logits, tok.eog_ids())
            .map_err(|e| format!("the grammar failed: {e}"))?;
        let id = if i < self.draft.len() {
            let v =
                self.sampler
                    .verify(logits, &self.tokens, self.draft.tokens[i], self.draft.q(i));
            self.step_verified += 1;
            self.draft_n += 1;
            if v.accepted {
                self.step_accepted += 1;
                self.draft_n_accepted += 1;
            } else {
                self.verifying = false;
            }
            v.token
        } else {
            self.verifying = false;
            self.sampler.sample(logits, &self.tokens)
        };
        if logits
            .get(id as usize)
            .is_none_or(|&l| l == f32::NEG_INFINITY)
        {
            self.verifying = false;
            return Err(
                "no token is allowed next: the grammar, logit_bias and ignore_eos together \
                 exclude every token"
                    .into(),
            );
        }
        self.mask
            .commit(id)
            .map_err(|e| format!("the grammar failed: {e}"))?;
        let summary = self.emit(logits, id, tok);
        if summary.is_some() {
            self.verifying = false;
        }
        Ok(summary)
    }

    /// Ends the step's verification and clears the draft: returns how many draft tokens
    /// were computed, verified and accepted.
    pub fn end_step(&mut self) -> StepDrafts {
        let computed = self.draft.len();
        self.verifying = false;
        self.step_start = None;
        self.draft.clear();
        StepDrafts {
            computed,
            verified: self.step_verified,
            accepted: self.step_accepted,
        }
    }

    /// Records the sampled or accepted token `id` and streams its text.
    fn emit(&mut self, logits: &[f32], id: u32, tok: &Tokenizer) -> Option<Summary> {
        if let Some(n_top) = self.logprobs {
            self.out_logprobs.push(match self.post_sampling {
                true => drawn_logprob(self.sampler.drawn_from(), id, n_top),
                false => token_logprob(logits, id, n_top),
            });
        }
        self.t_first.get_or_insert_with(Instant::now);
        self.n_generated += 1;
        self.out_tokens.push(id);
        if !self.mask.ban_eog && tok.is_eog(id) {
            return Some(self.finish(FinishReason::Eos));
        }
        self.tokens.push(id);
        let piece = self.detok.push(tok, id);
        self.held.push_str(&piece);
        if let Some(f) = self.stops.feed(&piece) {
            // The stop string ends in this piece and began in the held text.
            let end = self.held.len() - piece.len() + f.end;
            self.held.truncate(end - f.len);
            let word = self.stop_words[f.index].clone();
            return Some(self.finish(FinishReason::StopWord(word)));
        }
        self.newline |= piece.contains('\n');
        let out_of_time = self.newline
            && self
                .max_predict_time
                .zip(self.t_first)
                .is_some_and(|(limit, t)| t.elapsed() >= limit);
        if out_of_time || self.max_tokens.is_some_and(|m| self.n_generated >= m) {
            return Some(self.finish(FinishReason::MaxTokens));
        }
        if self.tokens.len() >= self.slot_ctx {
            self.shift_due = self
                .shift
                .and_then(|s| s.dropped(self.tokens.len(), self.slot_ctx));
            if self.shift_due.is_none() {
                return Some(self.finish(FinishReason::ContextFull));
            }
        }
        if self.mask.is_finished() {
            return Some(self.finish(FinishReason::Eos));
        }
        let keep = self.stops.partial().min(self.held.len());
        let text = self.held.split_off(self.held.len() - keep);
        let text = std::mem::replace(&mut self.held, text);
        self.send_delta(text);
        None
    }

    /// Drops the tokens [`Sequence::shift_due`] names, once the sequence's KV was given up
    /// (it is computed again from the shifted tokens).
    pub fn shift_context(&mut self) {
        let Some(dropped) = self.shift_due.take() else {
            return;
        };
        debug_assert!(self.kv.is_empty() && self.draft.is_empty());
        self.tokens.drain(dropped);
        self.redo = 0;
        self.truncated = true;
    }

    /// Ends the request with [`Event::Unavailable`].
    pub fn unavailable(&self, message: String) {
        let _ = self.out.send(Event::Unavailable(message));
    }

    /// Ends the request with [`Event::Failed`].
    pub fn fail(&self, message: String) {
        let _ = self.out.send(Event::Failed(message));
    }

    /// Ends the request: sends what is held back and the summary.
    fn finish(&mut self, finish: FinishReason) -> Summary {
        let mut text = std::mem::take(&mut self.held);
        if !matches!(finish, FinishReason::StopWord(_)) {
            text.push_str(&self.detok.finish());
        }
        self.send_delta(text);
        let now = Instant::now();
        let t_first = self.t_first.unwrap_or(now);
        let summary = Summary {
            slot: self.slot,
            finish,
            prompt_n: self.n_prompt,
            cache_n: self.n_cached,
            predicted_n: self.n_generated,
            prompt_ms: (t_first - self.t_start).as_secs_f64() * 1e3,
            predicted_ms: (now - t_first).as_secs_f64() * 1e3,
            draft_n: self.draft_n,
            draft_n_accepted: self.draft_n_accepted,
            grammar_ms: self.mask.grammar_time.as_secs_f64() * 1e3,
            truncated: self.truncated,
        };
        let _ = self.out.send(Event::Done(summary.clone()));
        summary
    }

    fn send_delta(&mut self, text: String) {
        if text.is_empty() && self.out_tokens.is_empty() {
            return;
        }
        let _ = self.out.send(Event::Delta {
            slot: self.slot,
            text,
            tokens: std::mem::take(&mut self.out_tokens),
            logprobs: std::mem::take(&mut self.out_logprobs),
        });
    }
}

/// The log-probability of `id` in the distribution `dist` it was drawn from (sorted by
/// decreasing probability; −∞ when it is not there) and the `n_top` first of `dist`.
fn drawn_logprob(dist: &[(u32, f32)], id: u32, n_top: usize) -> TokenLogprob {
    let ln = |p: f32| p.ln();
    TokenLogprob {
        id,
        logprob: dist
            .iter()
            .find(|c| c.0 == id)
            .map_or(f32::NEG_INFINITY, |c| ln(c.1)),
        top: dist.iter().take(n_top).map(|&(t, p)| (t, ln(p))).collect(),
    }
}

/// The log-probability of `id` under `softmax(logits)` and the `n_top` most likely tokens.
/// Masked logits (−∞) get −∞.
fn token_logprob(logits: &[f32], id: u32, n_top: usize) -> TokenLogprob {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let sum: f64 = logits.iter().map(|&l| ((l - max) as f64).exp()).sum();
    let lse = max as f64 + sum.ln();
    let lp = |l: f32| (l as f64 - lse) as f32;
    let mut top: Vec<(u32, f32)> = Vec::with_capacity(n_top + 1);
    for (i, &l) in logits.iter().enumerate() {
        if top.len() < n_top || top.last().is_some_and(|&(_, w)| l > w) {
            let at = top.partition_point(|&(_, w)| w >= l);
            top.insert(at, (i as u32, l));
            top.truncate(n_top);
        }
    }
    TokenLogprob {
        id,
        logprob: lp(logits[id as usize]),
        top: top.into_iter().map(|(t, l)| (t, lp(l))).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logprobs_are_normalized_and_sorted() {
        let logits = [1.0f32, 3.0, 2.0, 3.0];
        let t = token_logprob(&logits, 2, 3);
        assert_eq!(t.top.iter().map(|x| x.0).collect::<Vec<_>>(), vec![1, 3, 2]);
        let total: f32 = logits
            .iter()
            .map(|&l| token_logprob(&logits, 0, 0).logprob - logits[0] + l)
            .map(f32::exp)
            .sum();
        assert!((total - 1.0).abs() < 1e-5);
        assert!((t.logprob - t.top[2].1).abs() < 1e-7);
    }
}
