//! Constrained decoding: grammars compiled by `llguidance` against the model's vocabulary,
//! and the per-request [`Constraint`] that masks the logits of every token it forbids.
//!
//! A [`Grammars`] is built once per tokenizer (a token trie over every token's bytes, with
//! control tokens marked special so that text never spells them) and compiles a
//! [`GrammarSpec`] into a fresh [`Constraint`] per request. The constraint advances only on
//! tokens that are emitted, so a rejected draft token never enters it: there is nothing to
//! roll back, and a draft the constraint forbids has probability 0 and is always rejected.
//!
//! ```text
//! spec = Regex("a{5}")           mask: only tokens spelling a prefix of the rest of "aaaaa"
//! commit("aa"), commit("aaa")    is_finished() → true: only end-of-generation is allowed
//! ```

use std::fmt;
use std::sync::Arc;

use llguidance::api::TopLevelGrammar;
use llguidance::toktrie::{InferenceCapabilities, TokEnv, TokRxInfo, TokTrie, TokenizerEnv};
use llguidance::{Matcher, ParserFactory};

use crate::special::TokenKind;
use crate::Tokenizer;

/// What a request constrains its answer to.
#[derive(Debug, Clone, PartialEq)]
pub enum GrammarSpec {
    /// Any JSON object (`response_format: {type: json_object}`).
    JsonObject,
    /// A JSON document valid under this schema.
    JsonSchema(serde_json::Value),
    /// llguidance's Lark dialect (which embeds JSON schemas with `%json { ... }`).
    Lark(String),
    /// A regular expression the whole answer matches.
    Regex(String),
    /// llama.cpp's GBNF, converted to Lark by [`crate::gbnf::to_lark`].
    Gbnf(String),
}

/// A grammar that does not compile: the library's message, meant for the client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GrammarError(pub String);

impl fmt::Display for GrammarError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for GrammarError {}

/// The vocabulary as llguidance sees it: each token's bytes (control tokens prefixed with
/// the trie's special marker), tokenized by our own tokenizer.
struct Env {
    trie: TokTrie,
    tok: Arc<Tokenizer>,
}

impl TokenizerEnv for Env {
    fn tok_trie(&self) -> &TokTrie {
        &self.trie
    }

    fn tokenize_bytes(&self, s: &[u8]) -> Vec<u32> {
        match std::str::from_utf8(s) {
            Ok(text) => self
                .tok
                .encode(text, false, false)
                .unwrap_or_else(|_| self.trie.greedy_tokenize(s)),
            Err(_) => self.trie.greedy_tokenize(s),
        }
    }
}

/// Compiles grammars for one vocabulary. Built once per model (it walks every token);
/// compiling a grammar then takes from microseconds (a regex) to milliseconds (a schema).
pub struct Grammars {
    factory: ParserFactory,
    n_vocab: usize,
}

impl fmt::Debug for Grammars {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Grammars")
            .field("n_vocab", &self.n_vocab)
            .finish_non_exhaustive()
    }
}

impl Grammars {
    /// The compiler for `tok`'s vocabulary. End of generation is every id of
    /// [`Tokenizer::eog_ids`]: a grammar that is complete allows exactly those.
    pub fn new(tok: Arc<Tokenizer>) -> Result<Self, GrammarError> {
        let n_vocab = tok.n_vocab();
        let words: Vec<Vec<u8>> = (0..n_vocab as u32)
            .map(|id| match tok.token_kind(id) {
                Some(TokenKind::Control) => {
                    let mut w = vec![TokTrie::SPECIAL_TOKEN_MARKER];
                    w.extend_from_slice(tok.token_to_piece(id));
                    w
                }
                Some(TokenKind::Normal | TokenKind::UserDefined) => tok.token_to_piece(id).to_vec(),
                _ => Vec::new(),
            })
            .collect();
        let eos = tok
            .eog_ids()
            .first()
            .copied()
            .or(tok.eos())
            .ok_or_else(|| GrammarError("the vocabulary has no end-of-generation token".into()))?;
        let mut info = TokRxInfo::new(n_vocab as u32, eos);
        info.tok_bos = tok.bos();
        let trie = TokTrie::from(&info, &words).with_eos_tokens(tok.eog_ids());
        let env: TokEnv = Arc::new(Env { trie, tok });
        let mut factory = ParserFactory::new(
            &env,
            InferenceCapabilities::default(),
            &llguidance::earley::SlicedBiasComputer::general_slices(),
        )
        .map_err(|e| GrammarError(e.to_string()))?;
        factory.quiet();
        Ok(Grammars { factory, n_vocab })
    }

    /// A fresh constraint for `spec`, or the reason it does not compile.
    pub fn compile(&self, spec: &GrammarSpec) -> Result<Constraint, GrammarError> {
        let grammar = match spec {
            GrammarSpec::JsonObject => TopLevelGrammar::from_json_schema(bounded_whitespace(
                serde_json::json!({"type": "object"}),
            )),
            GrammarSpec::JsonSchema(s) => {
                TopLevelGrammar::from_json_schema(bounded_whitespace(s.clone()))
            }
            GrammarSpec::Lark(s) => TopLevelGrammar::from_lark(s.clone()),
            GrammarSpec::Regex(r) => TopLevelGrammar::from_regex(r),
            GrammarSpec::Gbnf(g) => TopLevelGrammar::from_lark(crate::gbnf::to_lark(g)?),
        };
        let parser = self
            .factory
            .create_parser(grammar)
            .map_err(|e| GrammarError(e.to_string()))?;
        let matcher = Matcher::new(Ok(parser));
        if let Some(e) = matcher.get_error() {
            return Err(GrammarError(e));
        }
        Ok(Constraint {
            matcher,
            n_vocab: self.n_vocab,
        })
    }
}

/// Whitespace between JSON tokens, as llama.cpp's schema grammars allow it: one space, or
/// one or two newlines and up to 20 spaces or tabs of indentation. llguidance's default
/// (any run of whitespace) lets a small model pad an answer until `max_tokens`.
const JSON_WHITESPACE: &str = r"(?: |\n{1,2}[ \t]{0,20})";

/// `schema` with [`JSON_WHITESPACE`] unless its top level sets llguidance's own
/// `x-guidance` options.
fn bounded_whitespace(mut schema: serde_json::Value) -> serde_json::Value {
    if let Some(obj) = schema.as_object_mut() {
        obj.entry("x-guidance")
            .or_insert_with(|| serde_json::json!({"whitespace_pattern": JSON_WHITESPACE}));
    }
    schema
}

/// One request's grammar state: which tokens may come next.
#[derive(Clone)]
pub struct Constraint {
    matcher: Matcher,
    n_vocab: usize,
}

impl fmt::Debug for Constraint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Constraint")
            .field("finished", &self.matcher.is_stopped())
            .finish_non_exhaustive()
    }
}

impl Constraint {
    /// Sets to −∞ the logit of every token the grammar forbids next (logits past the
    /// vocabulary included). Once the grammar is complete and can go no further, only
    /// end-of-generation tokens remain.
    pub fn mask(&mut self, logits: &mut [f32]) -> Result<(), GrammarError> {
        let allowed = self
            .matcher
            .compute_mask_or_eos()
            .map_err(|e| GrammarError(e.to_string()))?;
        // A word of the mask per 32 tokens; ids past the vocabulary have no bits.
        let words = allowed.as_slice();
        let n_words = self.n_vocab.div_ceil(32);
        for (w, chunk) in logits.chunks_mut(32).enumerate() {
            let bits = if w < n_words {
                words.get(w).copied().unwrap_or(0)
            } else {
                0
            };
            match bits {
                0 => chunk.fill(f32::NEG_INFINITY),
                u32::MAX if (w + 1) * 32 <= self.n_vocab => {}
                _ => {
                    for (i, l) in chunk.iter_mut().enumerate() {
                        if bits >> i & 1 == 0 || w * 32 + i >= self.n_vocab {
                            *l = f32::NEG_INFINITY;
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// Advances past the emitted token `id`.
    pub fn commit(&mut self, id: u32) -> Result<(), GrammarError> {
        self.matcher
            .consume_token(id)
            .map_err(|e| GrammarError(e.to_string()))
    }

    /// Whether the grammar can go no further (only end of generation is allowed).
    pub fn is_finished(&self) -> bool {
        self.matcher.is_stopped()
    }
}
