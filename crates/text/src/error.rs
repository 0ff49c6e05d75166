use thiserror::Error;

/// Errors of the `text` crate. Every message names the GGUF key, token or template feature at fault.
#[derive(Debug, Error)]
pub enum Error {
    /// A tokenizer key is missing or has the wrong type; the message names the key.
    #[error("model metadata: {0}")]
    Metadata(#[from] gguf::Error),

    #[error("tokenizer.ggml.model '{0}' is not supported (supported: gpt2, i.e. byte-level BPE, and llama, i.e. SentencePiece)")]
    UnsupportedModel(String),

    #[error("tokenizer.ggml.pre '{name}' is not supported (supported: {supported})")]
    UnsupportedPreTokenizer {
        name: String,
        supported: &'static str,
    },

    #[error("tokenizer.ggml.{key} has {found} entries but tokenizer.ggml.tokens has {expected}")]
    LengthMismatch {
        key: &'static str,
        found: usize,
        expected: usize,
    },

    #[error(
        "tokenizer.ggml.merges entry {index} ({merge:?}) is not two tokens separated by a space"
    )]
    BadMerge { index: usize, merge: String },

    #[error("{key} = {id} is outside the vocabulary of {n_vocab} tokens")]
    SpecialTokenOutOfRange {
        key: &'static str,
        id: u32,
        n_vocab: usize,
    },

    #[error("tokenizer.ggml.{flag} is true but tokenizer.ggml.{id_key} is missing")]
    MissingSpecialToken {
        flag: &'static str,
        id_key: &'static str,
    },

    /// The `tokenizers` crate refused the vocabulary or failed on an input.
    #[error("tokenizer: {0}")]
    Tokenizer(String),

    #[error("the model has no chat template (tokenizer.chat_template is missing and its architecture has no built-in one); supply a template explicitly")]
    NoChatTemplate,

    /// The chat template failed to compile or to render (this includes the template calling
    /// `raise_exception`); the message carries the template's own words and the line.
    #[error("chat template: {0}")]
    Template(#[from] minijinja::Error),

    #[error("chat template context: {0}")]
    TemplateContext(String),
}

pub type Result<T> = std::result::Result<T, Error>;
