use gguf::GgmlType;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Gguf(#[from] gguf::Error),
    #[error(
        "unknown architecture '{name}' (supported: {known}; llama covers Mixtral and Mistral)"
    )]
    UnknownArch { name: String, known: String },
    #[error("model hyper-parameter {key}: {problem}")]
    BadHParam { key: String, problem: String },
    #[error("tensor '{0}' is missing from the model file")]
    MissingTensor(String),
    #[error("tensor '{tensor}' has shape {got:?}, expected {expected:?}")]
    TensorShape {
        tensor: String,
        expected: Vec<u64>,
        got: Vec<u64>,
    },
    #[error("tensor '{tensor}': {what} is not supported yet")]
    UnsupportedTensor { tensor: String, what: &'static str },
    #[error("tensor '{tensor}': {problem}")]
    BadTensor { tensor: String, problem: String },
    #[error("tensor '{tensor}' has type {ty}, which tandem cannot compute with yet")]
    UnsupportedType { tensor: String, ty: GgmlType },
    #[error(
        "tensor '{tensor}' ({ty}): block {block} is corrupt (a scale that is NaN, infinite or a reserved code)"
    )]
    CorruptBlock {
        tensor: String,
        ty: GgmlType,
        block: usize,
    },
    #[error("token id {id} is out of range (vocabulary has {n_vocab} tokens)")]
    TokenOutOfRange { id: u32, n_vocab: usize },
    #[error("LoRA adapter {path}: {what}")]
    BadAdapter { path: String, what: String },
    #[error("importance matrix {path}: {what}")]
    BadImatrix { path: String, what: String },
    #[error("quantize: {0}")]
    Quantize(String),
    #[error("synthetic model: {0}")]
    Synthetic(String),
    #[error("stage: {0}")]
    BadStage(String),
    #[error("this stage of the model does not hold {0}")]
    NotInStage(&'static str),
    #[error(transparent)]
    Device(#[from] device::Error),
}

pub type Result<T> = std::result::Result<T, Error>;
