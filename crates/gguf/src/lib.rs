//! GGUF v2/v3: header, typed metadata, tensor index and memory-mapped tensor data.
//!
//! The parser works on a byte slice ([`Gguf::parse`]) so that it can be fuzzed without a
//! file; [`GgufFile`] adds the memory map. Every length or count read from the file is
//! bounds-checked against the bytes that remain before anything is allocated from it.

mod error;
mod file;
mod metadata;
mod parse;
mod types;
mod writer;

pub use error::{Error, Result};
pub use file::{GgufFile, LoadMode};
pub use metadata::{Metadata, Value, ValueType};
pub use parse::{Gguf, TensorInfo, DEFAULT_ALIGNMENT, GGUF_MAGIC};
pub use types::GgmlType;
pub use writer::{GgufStreamWriter, GgufWriter};
