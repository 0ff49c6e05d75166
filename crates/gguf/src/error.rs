use std::path::PathBuf;

/// Everything that can be wrong with a GGUF file or a lookup in it.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot read {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("not a GGUF file: magic is {found:02x?}, expected \"GGUF\"")]
    BadMagic { found: [u8; 4] },
    #[error("unsupported GGUF version {0} (supported: 2, 3)")]
    UnsupportedVersion(u32),
    #[error("big-endian GGUF files are not supported")]
    BigEndian,
    #[error("truncated GGUF: {what} at byte {offset} needs {needed} bytes, {available} left")]
    Truncated {
        what: String,
        offset: usize,
        needed: u64,
        available: usize,
    },
    #[error(
        "GGUF {what} is {count}, more than the {available} bytes left at byte {offset} could hold"
    )]
    CountTooLarge {
        what: String,
        count: u64,
        offset: usize,
        available: usize,
    },
    #[error("GGUF metadata '{key}': unknown value type id {id}")]
    UnknownValueType { key: String, id: u32 },
    #[error("GGUF metadata '{key}': arrays nested deeper than {max}")]
    NestingTooDeep { key: String, max: usize },
    #[error("GGUF {what} is not valid UTF-8")]
    InvalidUtf8 { what: String },
    #[error("GGUF metadata key '{0}' appears twice")]
    DuplicateKey(String),
    #[error("GGUF tensor '{0}' appears twice")]
    DuplicateTensor(String),
    #[error("tensor '{tensor}': unknown tensor type id {id}")]
    UnknownTensorType { tensor: String, id: u32 },
    #[error("tensor '{tensor}': {problem}")]
    BadTensor { tensor: String, problem: String },
    #[error("truncated GGUF: tensor '{tensor}' needs bytes {start}..{end} of the data section, which has only {data_len}")]
    TensorOutOfBounds {
        tensor: String,
        start: u64,
        end: u64,
        data_len: u64,
    },
    #[error("truncated GGUF: the data section of its {n_tensors} tensor(s) starts at byte {data_offset}, past the end of the file ({file_len} bytes)")]
    DataPastEnd {
        n_tensors: usize,
        data_offset: u64,
        file_len: u64,
    },
    #[error("tensors '{first}' and '{second}' overlap in the data section")]
    TensorOverlap { first: String, second: String },
    #[error("GGUF general.alignment is {0}; it must be a non-zero power of two")]
    BadAlignment(u64),
    #[error("GGUF metadata key '{0}' is missing")]
    MissingKey(String),
    #[error("GGUF metadata '{key}' has type {found}, expected {expected}")]
    WrongType {
        key: String,
        expected: &'static str,
        found: String,
    },
    #[error("GGUF has no tensor named '{0}'")]
    MissingTensor(String),
}

pub type Result<T> = std::result::Result<T, Error>;
