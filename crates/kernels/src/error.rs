use gguf::GgmlType;

/// Kernel errors: always a caller mistake or a type this build cannot compute with.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("tensor type {0} is not supported")]
    UnsupportedType(GgmlType),
    #[error("{what}: expected {expected} elements or bytes, got {got}")]
    LengthMismatch {
        what: &'static str,
        expected: usize,
        got: usize,
    },
}

pub type Result<T> = std::result::Result<T, Error>;
