//! SentencePiece vocabularies (`tokenizer.ggml.model = "llama"`: Gemma, Llama 2, Mistral)
//! tokenized as llama.cpp does: spaces become `▁`, characters merge pairwise by the score of
//! the token they form, highest first, and what forms no token falls back to its bytes.

use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap};

use crate::error::{Error, Result};

/// The whitespace marker SentencePiece spells spaces with.
pub const SPACE: &str = "\u{2581}";

/// A SentencePiece model: every token's text and score, and the byte tokens `<0xXX>`.
pub struct Spm {
    by_text: HashMap<Box<str>, u32>,
    scores: Vec<f32>,
    bytes: [Option<u32>; 256],
    unk: Option<u32>,
}

/// A run of the text: `len` bytes from `start`, linked to its neighbours (`usize::MAX`: none).
#[derive(Clone, Copy)]
struct Symbol {
    start: usize,
    len: usize,
    prev: usize,
    next: usize,
}

const NONE: usize = usize::MAX;

/// Two neighbouring symbols whose text is a token of `score`; `len` is their joint length
/// when the pair was found (a pair whose symbols changed since is stale).
struct Bigram {
    left: usize,
    right: usize,
    score: f32,
    len: usize,
}

impl PartialEq for Bigram {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Bigram {}

impl PartialOrd for Bigram {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Bigram {
    /// The heap's greatest is the highest score, then the leftmost pair.
    fn cmp(&self, other: &Self) -> Ordering {
        self.score
            .total_cmp(&other.score)
            .then(other.left.cmp(&self.left))
    }
}

impl Spm {
    /// The model of `texts` and their `scores` (`tokenizer.ggml.scores`), with `unk` the
    /// unknown token's id.
    pub fn new(texts: &[&str], scores: Vec<f32>, unk: Option<u32>) -> Result<Spm> {
        if scores.len() != texts.len() {
            return Err(Error::LengthMismatch {
                key: "scores",
                found: scores.len(),
                expected: texts.len(),
            });
        }
        let mut by_text = HashMap::with_capacity(texts.len());
        for (id, t) in texts.iter().enumerate() {
            by_text.entry(Box::from(*t)).or_insert(id as u32);
        }
        let mut bytes = [None; 256];
        for (b, slot) in bytes.iter_mut().enumerate() {
            *slot = by_text.get(format!("<0x{b:02X}>").as_str()).copied();
        }
        Ok(Spm {
            by_text,
            scores,
            bytes,
            unk,
        })
    }

    /// The byte `<0xXX>` token `text` stands for, if it is one.
    pub fn byte_of(text: &str) -> Option<u8> {
        let hex = text.strip_prefix("<0x")?.strip_suffix('>')?;
        (hex.len() == 2).then(|| u8::from_str_radix(hex, 16).ok())?
    }

    /// Appends the ids of `text` (spaces already written as [`SPACE`]) to `out`.
    pub fn encode_into(&self, text: &str, out: &mut Vec<u32>) -> Result<()> {
        if text.is_empty() {
            return Ok(());
        }
        let mut symbols: Vec<Symbol> = Vec::with_capacity(text.len());
        for (i, (start, c)) in text.char_indices().enumerate() {
            let end = start + c.len_utf8();
            symbols.push(Symbol {
                start,
                len: c.len_utf8(),
                prev: if i == 0 { NONE } else { i - 1 },
                next: if end == text.len() { NONE } else { i + 1 },
            });
        }
        let mut merge = Merger {
            spm: self,
            text,
            symbols,
            queue: BinaryHeap::new(),
        };
        for i in 1..merge.symbols.len() {
            merge.try_pair(i - 1, i);
        }
        while let Some(b) = merge.queue.pop() {
            let (l, r) = (merge.symbols[b.left], merge.symbols[b.right]);
            if l.len == 0 || r.len == 0 || l.len + r.len != b.len {
                continue;
            }
            merge.symbols[b.left].len += r.len;
            merge.symbols[b.right].len = 0;
            merge.symbols[b.left].next = r.next;
            if r.next != NONE {
                merge.symbols[r.next].prev = b.left;
            }
            merge.try_pair(l.prev, b.left);
            merge.try_pair(b.left, r.next);
        }
        let mut i = 0;
        while i != NONE {
            merge.emit(i, out)?;
            i = merge.symbols[i].next;
        }
        Ok(())
    }
}

/// The state of one [`Spm::encode_into`].
struct Merger<'a> {
    spm: &'a Spm,
    text: &'a str,
    symbols: Vec<Symbol>,
    queue: BinaryHeap<Bigram>,
}

impl<'a> Merger<'a> {
    fn text_of(&self, s: Symbol) -> &'a str {
        &self.text[s.start..s.start + s.len]
    }

    /// Queues the pair `left`, `right` when their joint text is a token.
    fn try_pair(&mut self, left: usize, right: usize) {
        if left == NONE || right == NONE {
            return;
        }
        let (l, r) = (self.symbols[left], self.symbols[right]);
        let joint = &self.text[l.start..l.start + l.len + r.len];
        let Some(&id) = self.spm.by_text.get(joint) else {
            return;
        };
        self.queue.push(Bigram {
            left,
            right,
            score: self.spm.scores[id as usize],
            len: joint.len(),
        });
    }

    /// The ids of symbol `i`: its token, else (a character no token spells; merged symbols
    /// always are tokens) its bytes' tokens, else the unknown token.
    fn emit(&self, i: usize, out: &mut Vec<u32>) -> Result<()> {
        let text = self.text_of(self.symbols[i]);
        if let Some(&id) = self.spm.by_text.get(text) {
            out.push(id);
            return Ok(());
        }
        for &b in text.as_bytes() {
            let id = self.spm.bytes[b as usize].or(self.spm.unk).ok_or_else(|| {
                Error::Tokenizer(format!(
                    "byte 0x{b:02X} has no <0x{b:02X}> token and the vocabulary no unknown token"
                ))
            })?;
            out.push(id);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spm(vocab: &[(&str, f32)]) -> Spm {
        let texts: Vec<&str> = vocab.iter().map(|(t, _)| *t).collect();
        let scores = vocab.iter().map(|(_, s)| *s).collect();
        Spm::new(&texts, scores, Some(0)).unwrap()
    }

    fn ids(spm: &Spm, text: &str) -> Vec<u32> {
        let mut out = Vec::new();
        spm.encode_into(text, &mut out).unwrap();
        out
    }

    /// The best-scoring pair merges first, whatever its place; equal scores merge leftmost
    /// first; a character no token spells becomes its bytes.
    #[test]
    fn merges_by_score_then_leftmost_and_falls_back_to_bytes() {
        let v = spm(&[
            ("<unk>", 0.0),
            ("a", -1.0),
            ("b", -1.0),
            ("ab", -5.0),
            ("ba", -2.0),
            ("<0xC3>", 0.0),
            ("<0xA9>", 0.0),
        ]);
        assert_eq!(ids(&v, "aba"), [1, 4]);
        assert_eq!(ids(&v, "abab"), [1, 4, 2]);
        assert_eq!(ids(&v, "é"), [5, 6]);
        assert_eq!(Spm::byte_of("<0xA9>"), Some(0xA9));
        assert_eq!(Spm::byte_of("<0xZZ>"), None);
        let tie = spm(&[("<unk>", 0.0), ("a", -1.0), ("aa", -1.0)]);
        assert_eq!(ids(&tie, "aaa"), [2, 1]);
    }
}
