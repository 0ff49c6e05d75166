//! Race prompts: passages of a corpus, each behind a tag unique to its request so that no
//! prefix cache can help, sized in the target's own tokens.

use std::str::FromStr;

use serde::Serialize;
use serde_json::json;

use super::client::authorized;

/// A prompt size: its label as given (`short`, `4k`, `1000`) and its length in tokens.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PromptSize {
    pub label: String,
    pub tokens: usize,
}

/// Tokens of a `short` prompt.
pub const SHORT_TOKENS: usize = 64;

impl FromStr for PromptSize {
    type Err = String;

    /// `short`, a count (`1000`), or thousands with `k` (`4k`, `16K` = 16384).
    fn from_str(s: &str) -> Result<PromptSize, String> {
        let label = s.trim().to_string();
        let lower = label.to_ascii_lowercase();
        let tokens = if lower == "short" {
            Some(SHORT_TOKENS)
        } else if let Some(k) = lower.strip_suffix('k') {
            k.parse::<usize>().ok().map(|k| k * 1024)
        } else {
            lower.parse::<usize>().ok()
        };
        match tokens {
            Some(tokens) if tokens > 0 => Ok(PromptSize { label, tokens }),
            _ => Err(format!(
                "prompt size {label:?}: `short`, a token count, or thousands of tokens like `4k`"
            )),
        }
    }
}

/// Text prompts are cut from, read cyclically.
#[derive(Debug, Clone)]
pub struct Corpus {
    pub name: String,
    text: String,
}

const BUILT_IN: [&str; 2] = [
    include_str!("../../../../tests/data/eval-prose.txt"),
    include_str!("../../../../tests/data/eval-code.txt"),
];

impl Corpus {
    /// The built-in corpus: the GPL v3 (prose) and CPython's argparse.py (code), their
    /// paragraphs interleaved so that any passage mixes the two.
    pub fn built_in() -> Corpus {
        let blocks = |t: &'static str| -> Vec<&'static str> {
            t.split("\n\n").filter(|b| !b.trim().is_empty()).collect()
        };
        let (prose, code) = (blocks(BUILT_IN[0]), blocks(BUILT_IN[1]));
        let mut text = String::new();
        for i in 0..prose.len().max(code.len()) {
            for side in [&prose, &code] {
                if let Some(b) = side.get(i) {
                    text += b;
                    text += "\n\n";
                }
            }
        }
        Corpus {
            name: "built-in (GPL v3 and argparse.py, interleaved)".into(),
            text,
        }
    }

    pub fn from_text(name: &str, text: String) -> Result<Corpus, String> {
        if text.trim().is_empty() {
            return Err(format!("corpus {name} is empty"));
        }
        Ok(Corpus {
            name: name.into(),
            text,
        })
    }

    /// `len` bytes (down to a character boundary) from the line start at or after `seed`
    /// modulo the corpus length, wrapping around the end.
    fn passage(&self, seed: u64, len: usize) -> String {
        let t = &self.text;
        let mut start = (seed % t.len() as u64) as usize;
        start = t[..]
            .char_indices()
            .skip_while(|(i, _)| *i < start)
            .find(|(i, c)| *c == '\n' && *i + 1 < t.len())
            .map_or(0, |(i, _)| i + 1);
        let mut out = String::with_capacity(len + 4);
        let mut at = start;
        while out.len() < len {
            let rest = &t[at..];
            let want = len - out.len();
            if rest.len() <= want {
                out += rest;
                at = 0;
            } else {
                let mut end = want;
                while !rest.is_char_boundary(end) {
                    end -= 1;
                }
                out += &rest[..end];
                break;
            }
        }
        out
    }
}

/// The instruction after a chat prompt's passage.
pub const CHAT_INSTRUCTION: &str = "Explain the text above in detail.";

/// FNV-1a of `s`.
pub fn fnv(s: &str) -> u64 {
    s.bytes().fold(0xcbf29ce484222325, |h, b| {
        (h ^ b as u64).wrapping_mul(0x100000001b3)
    })
}

/// Counts tokens with a target's `/tokenize` (llama.cpp's `content` or vLLM's `prompt`
/// field), or estimates 4 bytes per token when it has none.
pub struct Sizer {
    base_url: String,
    api_key: Option<String>,
    field: Option<&'static str>,
}

impl Sizer {
    /// Probes `base_url/tokenize`.
    pub fn probe(base_url: &str, api_key: Option<&str>) -> Sizer {
        let mut s = Sizer {
            base_url: base_url.to_string(),
            api_key: api_key.map(str::to_string),
            field: None,
        };
        for field in ["content", "prompt"] {
            s.field = Some(field);
            if s.count("probe").is_some() {
                return s;
            }
        }
        s.field = None;
        s
    }

    /// Whether counts come from the target's tokenizer.
    pub fn exact(&self) -> bool {
        self.field.is_some()
    }

    fn count(&self, text: &str) -> Option<usize> {
        let field = self.field?;
        let request = minreq::post(format!("{}/tokenize", self.base_url))
            .with_header("Content-Type", "application/json")
            .with_body(json!({ field: text, "add_special": false }).to_string())
            .with_timeout(60);
        let r = authorized(request, self.api_key.as_deref())
            .send()
            .ok()
            .filter(|r| r.status_code == 200)?;
        let v: serde_json::Value = serde_json::from_slice(r.as_bytes()).ok()?;
        v["tokens"].as_array().map(Vec::len)
    }

    fn tokens(&self, text: &str) -> usize {
        self.count(text).unwrap_or(text.len().div_ceil(4))
    }

    /// A prompt of about `size` tokens: `tag`, a passage chosen by `seed`, and for chat
    /// the instruction; within 2% (or 2 tokens) when the target can count. Returns the
    /// prompt and its count.
    pub fn prompt(
        &self,
        corpus: &Corpus,
        tag: &str,
        seed: u64,
        size: usize,
        chat: bool,
    ) -> (String, usize) {
        let build = |len: usize| {
            let passage = corpus.passage(seed, len);
            if chat {
                format!("{tag}\n{passage}\n\n{CHAT_INSTRUCTION}")
            } else {
                format!("{tag}\n{passage}")
            }
        };
        let tolerance = (size / 50).max(2);
        let mut len = size * 4;
        let mut best: Option<(String, usize)> = None;
        for _ in 0..8 {
            let p = build(len);
            let n = self.tokens(&p);
            let closer = best
                .as_ref()
                .is_none_or(|(_, b)| n.abs_diff(size) < b.abs_diff(size));
            if closer {
                best = Some((p, n));
            }
            if n.abs_diff(size) <= tolerance || !self.exact() {
                break;
            }
            len = ((len as f64 * size as f64 / n.max(1) as f64) as usize).max(1);
        }
        best.expect("at least one attempt")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse() {
        let p = |s: &str| s.parse::<PromptSize>().map(|p| p.tokens);
        assert_eq!(p("short"), Ok(SHORT_TOKENS));
        assert_eq!(p("4k"), Ok(4096));
        assert_eq!(p("16K"), Ok(16384));
        assert_eq!(p("1000"), Ok(1000));
        assert!(p("big").is_err());
    }

    #[test]
    fn passages_wrap_and_start_at_lines() {
        let c = Corpus::from_text("t", "ab\ncd\né\n".into()).unwrap();
        assert_eq!(c.passage(1, 5), "cd\né");
        assert_eq!(c.passage(4, 9), "é\nab\ncd\n");
        let b = Corpus::built_in();
        assert!(b.passage(12345, 4000).len() <= 4000);
        assert_ne!(b.passage(1, 200), b.passage(20000, 200));
    }

    #[test]
    fn without_a_tokenizer_sizes_are_estimated() {
        let s = Sizer {
            base_url: String::new(),
            api_key: None,
            field: None,
        };
        let (p, n) = s.prompt(&Corpus::built_in(), "[t]", 7, 100, true);
        assert!(p.starts_with("[t]\n") && p.ends_with(CHAT_INSTRUCTION));
        assert_eq!(n, p.len().div_ceil(4));
    }
}
