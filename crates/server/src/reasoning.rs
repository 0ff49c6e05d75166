//! Reasoning split out of the answer: text in a leading `<think>…</think>` block becomes
//! `reasoning_content`, the rest `content`. Tags split across deltas are held back.
//!
//! ```text
//! push("<thi")              -> ("", "")          holding "<thi"
//! push("nk>plan</think>Hi") -> ("plan", "Hi")
//! ```
//!
//! A prompt that opened the block itself (DeepSeek-V4 thinking: its generation prompt ends
//! with `<think>`) starts the answer inside it; one that closed it (DeepSeek-V4 not thinking:
//! `</think>`) starts it in content, unless the model opens a new block first. Reasoning is
//! never content: text before `</think>` (or before a call block that ends reasoning, see
//! [`Splitter::for_prompt`]) is reasoning, and so is an answer cut off inside it. A chat
//! answer's reasoning budget ([`think_budget`]) is read here too.

use engine::sampling::ThinkBudget;

use crate::error::ApiError;
use crate::state::Ready;
use crate::tools::ToolFormat;
use crate::validate::Route;

const OPEN: &str = "<think>";
const CLOSE: &str = "</think>";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Before any content: a `<think>` may still open.
    Start,
    Reasoning,
    /// After `</think>`: whitespace is dropped until the content starts.
    Gap,
    Content,
}

/// Splits a stream of text deltas into (reasoning, content) deltas.
#[derive(Debug)]
pub struct Splitter {
    phase: Phase,
    held: String,
    /// A marker that ends reasoning and stays at the start of the content.
    marker: Option<&'static str>,
}

impl Splitter {
    /// `in_reasoning`: the prompt already opened the block (it ends with `<think>`).
    pub fn new(in_reasoning: bool) -> Self {
        Splitter {
            phase: if in_reasoning {
                Phase::Reasoning
            } else {
                Phase::Start
            },
            held: String::new(),
            marker: None,
        }
    }

    /// The splitter for an answer to `prompt`: inside reasoning when the prompt ends by
    /// opening it (`<think>`); with `calls` (the answer's tool calls are parsed), ended also
    /// by a call block that `format` opens straight from reasoning.
    pub fn for_prompt(prompt: &str, format: ToolFormat, calls: bool) -> Self {
        let s = Splitter::new(prompt.trim_end().ends_with(OPEN));
        match format.ends_reasoning().filter(|_| calls) {
            Some(marker) => s.ending_at(marker),
            None => s,
        }
    }

    /// Reasoning also ends where `marker` (a tool-call block's opening) starts: the marker
    /// and what follows are content.
    fn ending_at(mut self, marker: &'static str) -> Self {
        self.marker = Some(marker);
        self
    }

    /// The (reasoning, content) text that `text` completes.
    pub fn push(&mut self, text: &str) -> (String, String) {
        self.held.push_str(text);
        let (mut reasoning, mut content) = (String::new(), String::new());
        loop {
            match self.phase {
                Phase::Content => {
                    content.push_str(&std::mem::take(&mut self.held));
                    break;
                }
                Phase::Gap => {
                    let lead = self.held.len() - self.held.trim_start().len();
                    self.held.drain(..lead);
                    if self.held.is_empty() {
                        break;
                    }
                    self.phase = Phase::Content;
                }
                Phase::Start => {
                    let t = self.held.trim_start();
                    if let Some(rest) = t.strip_prefix(OPEN) {
                        self.held = rest.to_string();
                        self.phase = Phase::Reasoning;
                    } else if OPEN.starts_with(t) {
                        break;
                    } else {
                        self.phase = Phase::Content;
                    }
                }
                Phase::Reasoning => {
                    let close = self.held.find(CLOSE);
                    let marked = self.marker.and_then(|m| self.held.find(m));
                    let marked = marked.filter(|&m| close.is_none_or(|c| m < c));
                    match (close, marked) {
                        (_, Some(at)) => {
                            reasoning.push_str(&self.held[..at]);
                            self.held.drain(..at);
                            self.phase = Phase::Content;
                        }
                        (Some(at), None) => {
                            reasoning.push_str(&self.held[..at]);
                            self.held.drain(..at + CLOSE.len());
                            self.phase = Phase::Gap;
                        }
                        (None, None) => {
                            let keep = self
                                .marker
                                .map_or(0, |m| text::partial_suffix(&self.held, m));
                            let keep = keep.max(text::partial_suffix(&self.held, CLOSE));
                            let rest = self.held.split_off(self.held.len() - keep);
                            reasoning.push_str(&std::mem::replace(&mut self.held, rest));
                            break;
                        }
                    }
                }
            }
        }
        (reasoning, content)
    }

    /// What is held back, at the end of the answer.
    pub fn finish(&mut self) -> (String, String) {
        let rest = std::mem::take(&mut self.held);
        match self.phase {
            Phase::Reasoning => (rest, String::new()),
            Phase::Start | Phase::Gap | Phase::Content => (String::new(), rest),
        }
    }
}

/// What a request asks of the reasoning budget.
pub struct BudgetAsked {
    pub reasoning: Option<i64>,
    pub thinking: Option<i64>,
    pub message: Option<String>,
}

/// A chat answer's reasoning budget, when the template marks reasoning with `<think>`:
/// the request's (`reasoning_budget_tokens`, or `thinking_budget_tokens`; -1: the
/// server's `--reasoning-budget`), then the message and `</think>` forced.
pub fn think_budget(
    asked: &BudgetAsked,
    route: Route,
    ready: &Ready,
    prompt: &str,
) -> Result<Option<ThinkBudget>, ApiError> {
    let (name, given) = match (asked.reasoning, asked.thinking) {
        (None, Some(n)) => ("thinking_budget_tokens", Some(n)),
        (n, _) => ("reasoning_budget_tokens", n),
    };
    if route != Route::Chat && (given.is_some() || asked.message.is_some()) {
        let name = if given.is_some() {
            name
        } else {
            "reasoning_budget_message"
        };
        return Err(ApiError::invalid(
            name,
            format!("{name}: only chat answers have a reasoning budget"),
        ));
    }
    let tokens = match given {
        None | Some(-1) => ready.defaults.reasoning_budget,
        Some(n) if n >= 0 => Some(n as usize),
        Some(n) => {
            return Err(ApiError::invalid(
                name,
                format!("{name} must be -1 (the server's budget) or at least 0, got {n}"),
            ))
        }
    };
    let Some(tokens) = tokens.filter(|_| route == Route::Chat && ready.reasoning) else {
        // A model whose template marks no reasoning spends none: any budget holds.
        return Ok(None);
    };
    let encode = |t: &str| {
        ready.tok.encode(t, false, true).map_err(|e| {
            ApiError::invalid("reasoning_budget_message", format!("cannot tokenize: {e}"))
        })
    };
    let end = encode(CLOSE)?;
    let message = asked
        .message
        .as_deref()
        .unwrap_or(&ready.defaults.reasoning_budget_message);
    let mut forced = encode(message)?;
    forced.extend(&end);
    Ok(Some(ThinkBudget {
        tokens,
        start: encode(OPEN)?,
        end,
        forced,
        inside: prompt.trim_end().ends_with(OPEN),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(in_reasoning: bool, deltas: &[&str]) -> (String, String) {
        split(Splitter::new(in_reasoning), deltas)
    }

    fn split(mut s: Splitter, deltas: &[&str]) -> (String, String) {
        let (mut r, mut c) = (String::new(), String::new());
        for d in deltas {
            let (a, b) = s.push(d);
            r += &a;
            c += &b;
        }
        let (a, b) = s.finish();
        (r + &a, c + &b)
    }

    #[test]
    fn tags_split_across_deltas() {
        let want = ("plan it".to_string(), "Hello".to_string());
        assert_eq!(
            run(false, &["<thi", "nk>plan", " it</th", "ink>\n\nHel", "lo"]),
            want
        );
        assert_eq!(run(false, &["<think>plan it</think>Hello"]), want);
        assert_eq!(run(true, &["plan it</think>", "Hello"]), want);
        assert_eq!(run(true, &["plan it</think>", "\n", " \nHello"]), want);
    }

    #[test]
    fn no_block_is_all_content() {
        assert_eq!(
            run(false, &["Hi <think>", " there"]),
            (String::new(), "Hi <think> there".into())
        );
        assert_eq!(run(false, &["<th"]), (String::new(), "<th".into()));
        assert_eq!(
            run(true, &["still thinking"]),
            ("still thinking".into(), String::new())
        );
    }

    /// DeepSeek-V4: a prompt ending in `<think>` (thinking) starts in reasoning, one ending
    /// in `</think>` (not thinking) in content; with tools, a call block ends reasoning too.
    #[test]
    fn prompts_that_open_or_close_reasoning() {
        let on = "<｜User｜>Hi<｜Assistant｜><think>";
        let off = "<｜User｜>Hi<｜Assistant｜></think>";
        let block = "<｜DSML｜tool_calls>\n...";
        let answer = format!("plan\n\n{block}");
        let dsml = ToolFormat::Dsml;
        for at in (0..=answer.len()).filter(|&at| answer.is_char_boundary(at)) {
            let (a, b) = answer.split_at(at);
            assert_eq!(
                split(Splitter::for_prompt(on, dsml, true), &[a, b]),
                ("plan\n\n".into(), block.into()),
                "{at}"
            );
        }
        assert_eq!(
            split(Splitter::for_prompt(on, dsml, false), &[&answer]),
            (answer.clone(), String::new())
        );
        assert_eq!(
            split(Splitter::for_prompt(on, dsml, true), &["a</think>b", block]),
            ("a".into(), format!("b{block}"))
        );
        assert_eq!(
            split(Splitter::for_prompt(off, dsml, true), &["Hello"]),
            (String::new(), "Hello".into())
        );
        assert_eq!(
            split(
                Splitter::for_prompt(on, ToolFormat::Hermes, true),
                &["x<tool_call>"]
            ),
            ("x<tool_call>".into(), String::new())
        );
    }
}
