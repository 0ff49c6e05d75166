//! Incremental detokenization for streaming: text comes out only in whole UTF-8 characters.

use crate::tokenizer::{ControlTokens, Tokenizer};

/// Turns a stream of token ids into text deltas that never split a UTF-8 character.
///
/// Byte-level tokens can end in the middle of a character: `😀` (F0 9F 98 80) may arrive as
/// one token with `F0 9F` and another with `98 80`. [`Detokenizer::push`] returns the text that
/// is complete so far and holds back an unfinished character (at most 3 bytes) until the next
/// token completes it. Bytes that can never form a character are replaced by U+FFFD as soon as
/// that is certain, so the held-back part stays short.
///
/// ```text
/// push([F0 9F])  -> ""      holding F0 9F
/// push([98 80])  -> "😀"
/// push([E4])     -> ""      holding E4
/// finish()       -> "\u{FFFD}"
/// ```
#[derive(Debug, Clone, Default)]
pub struct Detokenizer {
    control: ControlTokens,
    /// Control tokens whose text is kept whatever `control` says, ascending.
    shown: Vec<u32>,
    pending: Vec<u8>,
}

impl Detokenizer {
    /// A detokenizer that leaves control tokens out.
    pub fn new() -> Self {
        Self::default()
    }

    /// A detokenizer with the given treatment of control tokens.
    pub fn with_control(control: ControlTokens) -> Self {
        Self {
            control,
            shown: Vec::new(),
            pending: Vec::new(),
        }
    }

    /// This detokenizer, keeping the text of the control tokens `ids` (a tool-call marker
    /// such as `[TOOL_CALLS]` that a parser downstream reads).
    pub fn showing(mut self, mut ids: Vec<u32>) -> Self {
        ids.sort_unstable();
        self.shown = ids;
        self
    }

    /// Adds token `id` and returns the text it completes (possibly empty).
    pub fn push(&mut self, tok: &Tokenizer, id: u32) -> String {
        let control = match self.shown.binary_search(&id) {
            Ok(_) => ControlTokens::Render,
            Err(_) => self.control,
        };
        self.pending.extend_from_slice(tok.piece(id, control));
        let mut out = String::new();
        let mut rest: &[u8] = &self.pending;
        loop {
            match std::str::from_utf8(rest) {
                Ok(s) => {
                    out.push_str(s);
                    rest = &[];
                    break;
                }
                Err(e) => {
                    let valid = e.valid_up_to();
                    out.push_str(&String::from_utf8_lossy(&rest[..valid]));
                    match e.error_len() {
                        Some(bad) => {
                            out.push('\u{FFFD}');
                            rest = &rest[valid + bad..];
                        }
                        None => {
                            rest = &rest[valid..];
                            break;
                        }
                    }
                }
            }
        }
        let keep = rest.len();
        let drop = self.pending.len() - keep;
        self.pending.drain(..drop);
        out
    }

    /// Returns whatever is held back, with an unfinished character as U+FFFD, and resets.
    pub fn finish(&mut self) -> String {
        let out = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending.clear();
        out
    }

    /// Number of bytes held back waiting for the rest of a character.
    pub fn pending_len(&self) -> usize {
        self.pending.len()
    }
}
