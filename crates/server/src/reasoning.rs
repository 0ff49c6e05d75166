//! Reasoning split out of the answer: text in a leading `<think>…</think>` block becomes
//! `reasoning_content`, the rest `content`. Tags split across deltas are held back.
//!
//! ```text
//! push("<thi")              -> ("", "")          holding "<thi"
//! push("nk>plan</think>Hi") -> ("plan", "Hi")
//! ```

const OPEN: &str = "<think>";
const CLOSE: &str = "</think>";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Before any content: a `<think>` may still open.
    Start,
    Reasoning,
    Content,
}

/// Splits a stream of text deltas into (reasoning, content) deltas.
#[derive(Debug)]
pub struct Splitter {
    phase: Phase,
    held: String,
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
        }
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
                    if let Some(at) = self.held.find(CLOSE) {
                        reasoning.push_str(&self.held[..at]);
                        self.held = self.held[at + CLOSE.len()..].trim_start().to_string();
                        self.phase = Phase::Content;
                    } else {
                        let keep = text::partial_suffix(&self.held, CLOSE);
                        let rest = self.held.split_off(self.held.len() - keep);
                        reasoning.push_str(&std::mem::replace(&mut self.held, rest));
                        break;
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
            Phase::Start | Phase::Content => (String::new(), rest),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(in_reasoning: bool, deltas: &[&str]) -> (String, String) {
        let mut s = Splitter::new(in_reasoning);
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
}
