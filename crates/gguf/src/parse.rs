use std::collections::HashMap;

use crate::metadata::{Metadata, Value, ValueType};
use crate::{Error, GgmlType, Result};

pub const GGUF_MAGIC: [u8; 4] = *b"GGUF";
pub const DEFAULT_ALIGNMENT: u64 = 32;
const MAX_ARRAY_NESTING: usize = 8;
const MAX_DIMS: u32 = 4;

/// Where one tensor lives and what it holds.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorInfo {
    pub name: String,
    /// ggml order: `dims[0]` is the contiguous (row) dimension.
    pub dims: Vec<u64>,
    pub ggml_type: GgmlType,
    /// Byte offset relative to the start of the data section.
    pub offset: u64,
    /// Bytes the tensor occupies.
    pub n_bytes: u64,
}

impl TensorInfo {
    pub fn n_elements(&self) -> u64 {
        self.dims.iter().product()
    }
}

/// A parsed GGUF header: everything but the tensor bytes, which stay in the source
/// buffer starting at `data_offset`.
#[derive(Debug, Clone)]
pub struct Gguf {
    pub version: u32,
    pub metadata: Metadata,
    pub tensors: Vec<TensorInfo>,
    pub alignment: u64,
    /// Absolute offset of the data section in the file.
    pub data_offset: u64,
    tensor_index: HashMap<String, usize>,
}

impl Gguf {
    /// Parses and validates a whole GGUF file held in `bytes`. Every tensor is checked to
    /// lie inside `bytes` and not to overlap another.
    pub fn parse(bytes: &[u8]) -> Result<Self> {
        let mut r = Reader { bytes, pos: 0 };
        let magic: [u8; 4] = r.take(4, "magic")?.try_into().expect("4 bytes");
        if magic != GGUF_MAGIC {
            return Err(Error::BadMagic { found: magic });
        }
        let version = r.u32("version")?;
        if version.swap_bytes() == 2 || version.swap_bytes() == 3 {
            return Err(Error::BigEndian);
        }
        if version != 2 && version != 3 {
            return Err(Error::UnsupportedVersion(version));
        }
        let n_tensors = r.u64("tensor count")?;
        let n_kv = r.u64("metadata count")?;
        r.check_count(n_kv, 13, "metadata count")?;
        r.check_count(n_tensors, 24, "tensor count")?;

        let mut metadata = Metadata::default();
        for _ in 0..n_kv {
            let key = r.string("metadata key")?;
            let type_id = r.u32("metadata value type")?;
            let ty = ValueType::from_id(type_id).ok_or_else(|| Error::UnknownValueType {
                key: key.clone(),
                id: type_id,
            })?;
            let value = r.value(ty, &key, 0)?;
            metadata.insert(key, value)?;
        }

        let alignment = match metadata.opt_u64("general.alignment")? {
            None => DEFAULT_ALIGNMENT,
            Some(a) if a != 0 && a.is_power_of_two() => a,
            Some(a) => return Err(Error::BadAlignment(a)),
        };

        let mut tensors = Vec::new();
        let mut tensor_index = HashMap::new();
        for _ in 0..n_tensors {
            let info = r.tensor_info(alignment)?;
            if tensor_index
                .insert(info.name.clone(), tensors.len())
                .is_some()
            {
                return Err(Error::DuplicateTensor(info.name));
            }
            tensors.push(info);
        }

        let data_offset = (r.pos as u64).div_ceil(alignment) * alignment;
        if !tensors.is_empty() && data_offset > bytes.len() as u64 {
            return Err(Error::DataPastEnd {
                n_tensors: tensors.len(),
                data_offset,
                file_len: bytes.len() as u64,
            });
        }
        let data_len = (bytes.len() as u64).saturating_sub(data_offset);
        check_layout(&tensors, data_len)?;
        Ok(Gguf {
            version,
            metadata,
            tensors,
            alignment,
            data_offset,
            tensor_index,
        })
    }

    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.tensor_index.get(name).map(|&i| &self.tensors[i])
    }

    /// The architecture name (`general.architecture`).
    pub fn architecture(&self) -> Result<&str> {
        self.metadata.str("general.architecture")
    }
}

fn check_layout(tensors: &[TensorInfo], data_len: u64) -> Result<()> {
    for t in tensors {
        let end = t.offset.saturating_add(t.n_bytes);
        if end > data_len {
            return Err(Error::TensorOutOfBounds {
                tensor: t.name.clone(),
                start: t.offset,
                end,
                data_len,
            });
        }
    }
    let mut order: Vec<&TensorInfo> = tensors.iter().filter(|t| t.n_bytes > 0).collect();
    order.sort_by_key(|t| t.offset);
    for pair in order.windows(2) {
        if pair[0].offset + pair[0].n_bytes > pair[1].offset {
            return Err(Error::TensorOverlap {
                first: pair[0].name.clone(),
                second: pair[1].name.clone(),
            });
        }
    }
    Ok(())
}

/// A bounds-checked little-endian cursor.
struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn remaining(&self) -> usize {
        self.bytes.len() - self.pos
    }

    fn take(&mut self, n: u64, what: &str) -> Result<&'a [u8]> {
        if n > self.remaining() as u64 {
            return Err(Error::Truncated {
                what: what.to_string(),
                offset: self.pos,
                needed: n,
                available: self.remaining(),
            });
        }
        let s = &self.bytes[self.pos..self.pos + n as usize];
        self.pos += n as usize;
        Ok(s)
    }

    fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N]> {
        Ok(self.take(N as u64, what)?.try_into().expect("N bytes"))
    }

    fn u32(&mut self, what: &str) -> Result<u32> {
        self.array(what).map(u32::from_le_bytes)
    }

    fn u64(&mut self, what: &str) -> Result<u64> {
        self.array(what).map(u64::from_le_bytes)
    }

    /// Fails unless `count` items of at least `min_size` bytes each could fit in what is left.
    fn check_count(&self, count: u64, min_size: u64, what: &str) -> Result<()> {
        if count.saturating_mul(min_size) > self.remaining() as u64 {
            return Err(Error::CountTooLarge {
                what: what.to_string(),
                count,
                offset: self.pos,
                available: self.remaining(),
            });
        }
        Ok(())
    }

    fn string(&mut self, what: &str) -> Result<String> {
        let len = self.u64(what)?;
        let raw = self.take(len, what)?;
        String::from_utf8(raw.to_vec()).map_err(|_| Error::InvalidUtf8 {
            what: what.to_string(),
        })
    }

    fn value(&mut self, ty: ValueType, key: &str, depth: usize) -> Result<Value> {
        Ok(match ty {
            ValueType::U8 => Value::U8(self.array::<1>(key)?[0]),
            ValueType::I8 => Value::I8(self.array::<1>(key)?[0] as i8),
            ValueType::U16 => Value::U16(u16::from_le_bytes(self.array(key)?)),
            ValueType::I16 => Value::I16(i16::from_le_bytes(self.array(key)?)),
            ValueType::U32 => Value::U32(u32::from_le_bytes(self.array(key)?)),
            ValueType::I32 => Value::I32(i32::from_le_bytes(self.array(key)?)),
            ValueType::F32 => Value::F32(f32::from_le_bytes(self.array(key)?)),
            ValueType::U64 => Value::U64(u64::from_le_bytes(self.array(key)?)),
            ValueType::I64 => Value::I64(i64::from_le_bytes(self.array(key)?)),
            ValueType::F64 => Value::F64(f64::from_le_bytes(self.array(key)?)),
            ValueType::Bool => match self.array::<1>(key)?[0] {
                0 => Value::Bool(false),
                1 => Value::Bool(true),
                b => {
                    return Err(Error::WrongType {
                        key: key.to_string(),
                        expected: "bool (0 or 1)",
                        found: format!("byte {b}"),
                    })
                }
            },
            ValueType::String => Value::String(self.string(&format!("string value of '{key}'"))?),
            ValueType::Array => {
                if depth >= MAX_ARRAY_NESTING {
                    return Err(Error::NestingTooDeep {
                        key: key.to_string(),
                        max: MAX_ARRAY_NESTING,
                    });
                }
                let type_id = self.u32(key)?;
                let elem = ValueType::from_id(type_id).ok_or_else(|| Error::UnknownValueType {
                    key: key.to_string(),
                    id: type_id,
                })?;
                let count = self.u64(key)?;
                self.check_count(
                    count,
                    elem.min_encoded_size(),
                    &format!("array length of '{key}'"),
                )?;
                let mut items = Vec::with_capacity(count as usize);
                for _ in 0..count {
                    items.push(self.value(elem, key, depth + 1)?);
                }
                Value::Array(elem, items)
            }
        })
    }

    fn tensor_info(&mut self, alignment: u64) -> Result<TensorInfo> {
        let name = self.string("tensor name")?;
        let bad = |problem: String| Error::BadTensor {
            tensor: name.clone(),
            problem,
        };
        let n_dims = self.u32("tensor dimension count")?;
        if n_dims == 0 || n_dims > MAX_DIMS {
            return Err(bad(format!(
                "{n_dims} dimensions (1 to {MAX_DIMS} allowed)"
            )));
        }
        let mut dims = Vec::with_capacity(n_dims as usize);
        for _ in 0..n_dims {
            dims.push(self.u64("tensor dimension")?);
        }
        let type_id = self.u32("tensor type")?;
        let ggml_type = GgmlType::from_id(type_id).ok_or_else(|| Error::UnknownTensorType {
            tensor: name.clone(),
            id: type_id,
        })?;
        let offset = self.u64("tensor offset")?;
        if offset % alignment != 0 {
            return Err(bad(format!(
                "offset {offset} is not a multiple of the alignment {alignment}"
            )));
        }
        let n_elements = dims
            .iter()
            .try_fold(1u64, |acc, &d| acc.checked_mul(d))
            .ok_or_else(|| bad(format!("dimensions {dims:?} overflow")))?;
        if dims[0] % ggml_type.block_size() != 0 {
            return Err(bad(format!(
                "row length {} is not a multiple of the {ggml_type} block size {}",
                dims[0],
                ggml_type.block_size()
            )));
        }
        let n_bytes = ggml_type
            .row_bytes(n_elements)
            .ok_or_else(|| bad(format!("dimensions {dims:?} overflow")))?;
        Ok(TensorInfo {
            name,
            dims,
            ggml_type,
            offset,
            n_bytes,
        })
    }
}
