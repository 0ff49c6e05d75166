use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::Path;

use crate::metadata::{Value, ValueType};
use crate::{GgmlType, DEFAULT_ALIGNMENT, GGUF_MAGIC};

/// Builds GGUF v3 files: test fixtures and synthetic models.
///
/// Tensor bytes are written as given; the caller encodes them in `ggml_type`'s layout.
#[derive(Debug, Default)]
pub struct GgufWriter {
    metadata: Vec<(String, Value)>,
    tensors: Vec<(String, Vec<u64>, GgmlType, Vec<u8>)>,
}

impl GgufWriter {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn metadata(&mut self, key: &str, value: Value) -> &mut Self {
        self.metadata.push((key.to_string(), value));
        self
    }

    pub fn tensor(
        &mut self,
        name: &str,
        dims: &[u64],
        ggml_type: GgmlType,
        data: Vec<u8>,
    ) -> &mut Self {
        self.tensors
            .push((name.to_string(), dims.to_vec(), ggml_type, data));
        self
    }

    /// The file as bytes, tensors laid out in insertion order at the default alignment
    /// (or `general.alignment` when given as a u32 value).
    pub fn to_bytes(&self) -> Vec<u8> {
        let entries: Vec<TensorEntry> = self
            .tensors
            .iter()
            .map(|(name, dims, ty, data)| TensorEntry {
                name,
                dims,
                ty: *ty,
                size: data.len() as u64,
            })
            .collect();
        let layout = Layout::new(&self.metadata, &entries);
        let mut out = layout.header;
        for ((_, _, _, data), off) in self.tensors.iter().zip(layout.offsets) {
            out.resize((layout.data_start + off) as usize, 0);
            out.extend_from_slice(data);
        }
        out
    }

    pub fn write(&self, path: impl AsRef<Path>) -> std::io::Result<()> {
        std::fs::write(path, self.to_bytes())
    }
}

/// Writes a GGUF v3 file tensor by tensor, so that a model need not be held in memory:
/// the header (the metadata, every tensor's name, shape and type) first, then the bytes
/// of each tensor in the declared order, in as many pieces as the caller likes
/// ([`GgufStreamWriter::data`]), each tensor padded to `general.alignment` (a u32 value)
/// or the default alignment.
pub struct GgufStreamWriter<W: Write> {
    out: W,
    /// Each declared tensor's name and size in bytes.
    tensors: Vec<(String, u64)>,
    alignment: u64,
    /// The tensor being written and the bytes it has so far.
    current: usize,
    written: u64,
}

impl GgufStreamWriter<BufWriter<File>> {
    /// Creates `path` and writes the header of `metadata` and `tensors`
    /// (`(name, dims, type)`, `dims[0]` the row length).
    pub fn create(
        path: impl AsRef<Path>,
        metadata: &[(String, Value)],
        tensors: &[(String, Vec<u64>, GgmlType)],
    ) -> io::Result<Self> {
        Self::new(BufWriter::new(File::create(path)?), metadata, tensors)
    }
}

impl<W: Write> GgufStreamWriter<W> {
    /// Writes the header to `out`. Errors (InvalidInput) name a tensor whose row length
    /// is not a whole number of its type's blocks.
    pub fn new(
        mut out: W,
        metadata: &[(String, Value)],
        tensors: &[(String, Vec<u64>, GgmlType)],
    ) -> io::Result<Self> {
        let entries = tensors
            .iter()
            .map(|(name, dims, ty)| {
                let size = dims
                    .first()
                    .and_then(|&row| ty.row_bytes(row))
                    .and_then(|row| dims[1..].iter().try_fold(row, |n, &d| n.checked_mul(d)))
                    .ok_or_else(|| {
                        invalid(format!(
                            "tensor '{name}': shape {dims:?} is not whole blocks of {ty}"
                        ))
                    })?;
                Ok(TensorEntry {
                    name,
                    dims,
                    ty: *ty,
                    size,
                })
            })
            .collect::<io::Result<Vec<_>>>()?;
        let layout = Layout::new(metadata, &entries);
        out.write_all(&layout.header)?;
        let mut w = GgufStreamWriter {
            out,
            tensors: entries
                .iter()
                .map(|e| (e.name.to_string(), e.size))
                .collect(),
            alignment: layout.alignment,
            current: 0,
            written: 0,
        };
        w.skip_empty();
        Ok(w)
    }

    /// Appends `bytes` to the tensor being written, and pads and moves to the next
    /// tensor once it is complete. Errors (InvalidInput) when `bytes` run past the
    /// current tensor's size, naming it, or when every tensor is complete.
    pub fn data(&mut self, bytes: &[u8]) -> io::Result<()> {
        let Some((name, size)) = self.tensors.get(self.current) else {
            return Err(invalid(format!(
                "{} bytes past the last tensor",
                bytes.len()
            )));
        };
        if self.written + bytes.len() as u64 > *size {
            return Err(invalid(format!(
                "tensor '{name}' is {size} bytes; {} more after {} written",
                bytes.len(),
                self.written
            )));
        }
        self.out.write_all(bytes)?;
        self.written += bytes.len() as u64;
        if self.written == *size {
            let pad = size.next_multiple_of(self.alignment) - size;
            self.out.write_all(&vec![0u8; pad as usize])?;
            self.current += 1;
            self.written = 0;
            self.skip_empty();
        }
        Ok(())
    }

    /// Flushes and gives back the writer. Errors (InvalidInput) name the first tensor
    /// whose bytes were not all written.
    pub fn finish(mut self) -> io::Result<W> {
        if let Some((name, size)) = self.tensors.get(self.current) {
            return Err(invalid(format!(
                "tensor '{name}' has {} of its {size} bytes",
                self.written
            )));
        }
        self.out.flush()?;
        Ok(self.out)
    }

    /// Moves past tensors of no bytes, which need no data.
    fn skip_empty(&mut self) {
        while self.tensors.get(self.current).is_some_and(|t| t.1 == 0) {
            self.current += 1;
        }
    }
}

fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg)
}

/// One tensor's line in the header.
struct TensorEntry<'a> {
    name: &'a str,
    dims: &'a [u64],
    ty: GgmlType,
    size: u64,
}

/// The header of a file and where its tensors' bytes go.
struct Layout {
    /// Everything before the data section, padded to the alignment.
    header: Vec<u8>,
    alignment: u64,
    /// Absolute offset of the data section.
    data_start: u64,
    /// Each tensor's offset in the data section.
    offsets: Vec<u64>,
}

impl Layout {
    fn new(metadata: &[(String, Value)], tensors: &[TensorEntry]) -> Layout {
        let alignment = metadata
            .iter()
            .find(|(k, _)| k == "general.alignment")
            .and_then(|(_, v)| v.as_integer())
            .map(|a| a as u64)
            .unwrap_or(DEFAULT_ALIGNMENT);
        let mut out = Vec::new();
        out.extend_from_slice(&GGUF_MAGIC);
        out.extend_from_slice(&3u32.to_le_bytes());
        out.extend_from_slice(&(tensors.len() as u64).to_le_bytes());
        out.extend_from_slice(&(metadata.len() as u64).to_le_bytes());
        for (key, value) in metadata {
            write_string(&mut out, key);
            out.extend_from_slice(&value.value_type().id().to_le_bytes());
            write_value(&mut out, value);
        }
        let mut offset = 0u64;
        let mut offsets = Vec::new();
        for t in tensors {
            write_string(&mut out, t.name);
            out.extend_from_slice(&(t.dims.len() as u32).to_le_bytes());
            for d in t.dims {
                out.extend_from_slice(&d.to_le_bytes());
            }
            out.extend_from_slice(&t.ty.id().to_le_bytes());
            out.extend_from_slice(&offset.to_le_bytes());
            offsets.push(offset);
            offset = (offset + t.size).div_ceil(alignment) * alignment;
        }
        let data_start = (out.len() as u64).div_ceil(alignment) * alignment;
        out.resize(data_start as usize, 0);
        Layout {
            header: out,
            alignment,
            data_start,
            offsets,
        }
    }
}

fn write_string(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

fn write_value(out: &mut Vec<u8>, value: &Value) {
    match value {
        Value::U8(v) => out.push(*v),
        Value::I8(v) => out.push(*v as u8),
        Value::U16(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::I16(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::U32(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::I32(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::F32(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::U64(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::I64(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::F64(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::Bool(v) => out.push(*v as u8),
        Value::String(s) => write_string(out, s),
        Value::Array(elem, items) => {
            out.extend_from_slice(&elem.id().to_le_bytes());
            out.extend_from_slice(&(items.len() as u64).to_le_bytes());
            for item in items {
                debug_assert_eq!(item.value_type(), *elem, "array element of the wrong type");
                write_value(out, item);
            }
        }
    }
}

impl Value {
    /// An array of strings.
    pub fn strings<S: AsRef<str>>(items: &[S]) -> Value {
        Value::Array(
            ValueType::String,
            items
                .iter()
                .map(|s| Value::String(s.as_ref().to_string()))
                .collect(),
        )
    }
}
