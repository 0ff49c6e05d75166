//! Text in and out of a model: the tokenizer built from GGUF metadata (byte-level BPE on the
//! `tokenizers` crate, or SentencePiece; llama.cpp's ids either way), chat templates rendered
//! with `minijinja`, and an incremental detokenizer that never splits a UTF-8 character.

pub mod builtin_templates;
mod byte_level;
mod detok;
mod error;
#[doc(hidden)]
pub mod fuzz;
pub mod gbnf;
mod grammar;
mod holdback;
mod jinja_fns;
mod pretokenize;
mod special;
mod spm;
mod stops;
mod template;
mod tokenizer;

pub use detok::Detokenizer;
pub use error::{Error, Result};
pub use grammar::{Constraint, GrammarError, GrammarSpec, Grammars};
pub use holdback::partial_suffix;
pub use jinja_fns::strftime;
pub use pretokenize::PreTokenizer;
pub use special::{FimTokens, TokenKind};
pub use stops::{StopFound, StopMatcher, Stops};
pub use template::{ChatMessage, ChatTemplate, RenderOptions, TemplateSource};
pub use tokenizer::{ControlTokens, Tokenizer};
