//! The text transforms of an answer on its way out, one chain for streamed and whole
//! answers alike: stop strings first (in the engine, since a stop ends generation), then
//! here the reasoning split (`<think>…</think>` becomes `reasoning_content`) and tool-call
//! parsing of what remains. Each stage holds back text that may still turn into its tag or
//! marker, through [`text::partial_suffix`] (the stop strings through their automaton's
//! depth, [`text::StopMatcher::partial`]).
//!
//! ```text
//! push("<think>look it up</think><tool_ca") -> reasoning "look it up", nothing else yet
//! push("ll>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>")
//!                                             -> calls [f({})]
//! finish()                                    -> nothing left
//! ```

use crate::reasoning::Splitter;
use crate::tools::{CallParser, Piece, ToolCall};

/// What a piece of an answer became.
#[derive(Debug, Default, PartialEq)]
pub struct Out {
    pub reasoning: String,
    pub content: String,
    pub calls: Vec<ToolCall>,
}

impl Out {
    pub fn is_empty(&self) -> bool {
        self.reasoning.is_empty() && self.content.is_empty() && self.calls.is_empty()
    }
}

/// The chain of one answer; a stage that is `None` passes its text through.
pub struct Chain {
    reasoning: Option<Splitter>,
    calls: Option<CallParser>,
    /// Tool calls decided so far.
    pub n_calls: usize,
}

impl Chain {
    pub fn new(reasoning: Option<Splitter>, calls: Option<CallParser>) -> Self {
        Chain {
            reasoning,
            calls,
            n_calls: 0,
        }
    }

    /// What `text`, the next piece of the answer, decides.
    pub fn push(&mut self, text: &str) -> Out {
        self.run(text, false)
    }

    /// Everything still held, at the end of the answer.
    pub fn finish(&mut self) -> Out {
        self.run("", true)
    }

    /// What a whole answer `text` decides: [`Self::push`] then [`Self::finish`], joined.
    pub fn whole(&mut self, text: &str) -> Out {
        let mut out = self.push(text);
        let rest = self.finish();
        out.reasoning.push_str(&rest.reasoning);
        out.content.push_str(&rest.content);
        out.calls.extend(rest.calls);
        out
    }

    fn run(&mut self, text: &str, end: bool) -> Out {
        let (reasoning, content) = match &mut self.reasoning {
            Some(sp) => {
                let (mut r, mut c) = sp.push(text);
                if end {
                    let (r2, c2) = sp.finish();
                    r.push_str(&r2);
                    c.push_str(&c2);
                }
                (r, c)
            }
            None => (String::new(), text.to_string()),
        };
        let Some(parser) = &mut self.calls else {
            return Out {
                reasoning,
                content,
                calls: Vec::new(),
            };
        };
        let mut pieces = parser.push(&content);
        if end {
            pieces.extend(parser.finish());
        }
        let mut out = Out {
            reasoning,
            ..Out::default()
        };
        for piece in pieces {
            match piece {
                Piece::Text(t) => out.content.push_str(&t),
                Piece::Call(c) => out.calls.push(c),
            }
        }
        self.n_calls += out.calls.len();
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::{Tool, ToolFormat};

    /// The module's example.
    #[test]
    fn reasoning_then_calls() {
        let tools = [Tool {
            name: "f".into(),
            description: None,
            parameters: serde_json::json!({"type": "object"}),
        }];
        let mut chain = Chain::new(
            Some(Splitter::new(false)),
            Some(CallParser::new(ToolFormat::Hermes, &tools, 7)),
        );
        let first = chain.push("<think>look it up</think><tool_ca");
        assert_eq!(first.reasoning, "look it up");
        assert!(first.content.is_empty() && first.calls.is_empty());
        let second = chain.push("ll>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>");
        assert_eq!(second.calls.len(), 1);
        assert_eq!(
            (
                second.calls[0].name.as_str(),
                second.calls[0].arguments.as_str()
            ),
            ("f", "{}")
        );
        assert!(chain.finish().is_empty());
        assert_eq!(chain.n_calls, 1);
    }

    #[test]
    fn without_stages_text_passes_through() {
        let mut chain = Chain::new(None, None);
        assert_eq!(chain.push("<think>a").content, "<think>a");
        assert!(chain.finish().is_empty());
    }
}
