use std::collections::HashMap;

use crate::{Error, Result};

/// GGUF metadata value type ids.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValueType {
    U8,
    I8,
    U16,
    I16,
    U32,
    I32,
    F32,
    Bool,
    String,
    Array,
    U64,
    I64,
    F64,
}

impl ValueType {
    pub fn from_id(id: u32) -> Option<Self> {
        use ValueType::*;
        Some(match id {
            0 => U8,
            1 => I8,
            2 => U16,
            3 => I16,
            4 => U32,
            5 => I32,
            6 => F32,
            7 => Bool,
            8 => String,
            9 => Array,
            10 => U64,
            11 => I64,
            12 => F64,
            _ => return None,
        })
    }

    pub fn id(self) -> u32 {
        self as u32
    }

    /// The fewest bytes one value of this type occupies in a file.
    pub(crate) fn min_encoded_size(self) -> u64 {
        use ValueType::*;
        match self {
            U8 | I8 | Bool => 1,
            U16 | I16 => 2,
            U32 | I32 | F32 => 4,
            U64 | I64 | F64 | String => 8,
            Array => 12,
        }
    }
}

/// One metadata value. Arrays keep their declared element type so that an empty array
/// still round-trips.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    F32(f32),
    Bool(bool),
    String(String),
    Array(ValueType, Vec<Value>),
    U64(u64),
    I64(i64),
    F64(f64),
}

impl Value {
    pub fn value_type(&self) -> ValueType {
        match self {
            Value::U8(_) => ValueType::U8,
            Value::I8(_) => ValueType::I8,
            Value::U16(_) => ValueType::U16,
            Value::I16(_) => ValueType::I16,
            Value::U32(_) => ValueType::U32,
            Value::I32(_) => ValueType::I32,
            Value::F32(_) => ValueType::F32,
            Value::Bool(_) => ValueType::Bool,
            Value::String(_) => ValueType::String,
            Value::Array(..) => ValueType::Array,
            Value::U64(_) => ValueType::U64,
            Value::I64(_) => ValueType::I64,
            Value::F64(_) => ValueType::F64,
        }
    }

    /// Any integer value as i128, so that width conversions can be range-checked.
    pub fn as_integer(&self) -> Option<i128> {
        Some(match *self {
            Value::U8(v) => v.into(),
            Value::I8(v) => v.into(),
            Value::U16(v) => v.into(),
            Value::I16(v) => v.into(),
            Value::U32(v) => v.into(),
            Value::I32(v) => v.into(),
            Value::U64(v) => v.into(),
            Value::I64(v) => v.into(),
            _ => return None,
        })
    }

    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            Value::F32(v) => Some(v.into()),
            Value::F64(v) => Some(v),
            _ => self.as_integer().map(|v| v as f64),
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) => Some(s),
            _ => None,
        }
    }

    /// A short description for error messages: `u32`, `array of string`.
    pub fn type_name(&self) -> String {
        match self {
            Value::Array(t, _) => format!("array of {t:?}").to_lowercase(),
            v => format!("{:?}", v.value_type()).to_lowercase(),
        }
    }
}

/// Metadata key/value pairs in file order, with lookup by key and typed accessors whose
/// errors name the key.
#[derive(Debug, Clone, Default)]
pub struct Metadata {
    entries: Vec<(String, Value)>,
    index: HashMap<String, usize>,
}

impl Metadata {
    pub(crate) fn insert(&mut self, key: String, value: Value) -> Result<()> {
        if self.index.contains_key(&key) {
            return Err(Error::DuplicateKey(key));
        }
        self.index.insert(key.clone(), self.entries.len());
        self.entries.push((key, value));
        Ok(())
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// A copy with `key` set to `value` (replaced where present): a reading in which a
    /// recipe has resolved a key the shared reading takes otherwise (a per-layer array as
    /// the one value its blocks share).
    pub fn with(&self, key: &str, value: Value) -> Metadata {
        let mut md = self.clone();
        match md.index.get(key) {
            Some(&i) => md.entries[i].1 = value,
            None => md.insert(key.to_string(), value).expect("a new key"),
        }
        md
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Entries in file order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Value)> {
        self.entries.iter().map(|(k, v)| (k.as_str(), v))
    }

    pub fn get(&self, key: &str) -> Option<&Value> {
        self.index.get(key).map(|&i| &self.entries[i].1)
    }

    fn require(&self, key: &str) -> Result<&Value> {
        self.get(key)
            .ok_or_else(|| Error::MissingKey(key.to_string()))
    }

    fn integer<T: TryFrom<i128>>(&self, key: &str, expected: &'static str) -> Result<Option<T>> {
        let Some(v) = self.get(key) else {
            return Ok(None);
        };
        let wrong = || Error::WrongType {
            key: key.to_string(),
            expected,
            found: v.type_name(),
        };
        let i = v.as_integer().ok_or_else(wrong)?;
        T::try_from(i).map(Some).map_err(|_| Error::WrongType {
            key: key.to_string(),
            expected,
            found: format!("{} (value {i} out of range)", v.type_name()),
        })
    }

    /// An integer key that fits in u32, if present; any integer width is accepted.
    pub fn opt_u32(&self, key: &str) -> Result<Option<u32>> {
        self.integer(key, "u32")
    }

    pub fn u32(&self, key: &str) -> Result<u32> {
        self.opt_u32(key)?
            .ok_or_else(|| Error::MissingKey(key.to_string()))
    }

    pub fn opt_u64(&self, key: &str) -> Result<Option<u64>> {
        self.integer(key, "u64")
    }

    pub fn opt_i64(&self, key: &str) -> Result<Option<i64>> {
        self.integer(key, "i64")
    }

    /// A float key (f32 or f64; integers are accepted too), if present.
    pub fn opt_f32(&self, key: &str) -> Result<Option<f32>> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => v
                .as_f64()
                .map(|f| Some(f as f32))
                .ok_or_else(|| Error::WrongType {
                    key: key.to_string(),
                    expected: "f32",
                    found: v.type_name(),
                }),
        }
    }

    pub fn f32(&self, key: &str) -> Result<f32> {
        self.opt_f32(key)?
            .ok_or_else(|| Error::MissingKey(key.to_string()))
    }

    pub fn opt_bool(&self, key: &str) -> Result<Option<bool>> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(v) => Err(Error::WrongType {
                key: key.to_string(),
                expected: "bool",
                found: v.type_name(),
            }),
        }
    }

    pub fn opt_str(&self, key: &str) -> Result<Option<&str>> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(v) => Err(Error::WrongType {
                key: key.to_string(),
                expected: "string",
                found: v.type_name(),
            }),
        }
    }

    pub fn str(&self, key: &str) -> Result<&str> {
        self.opt_str(key)?
            .ok_or_else(|| Error::MissingKey(key.to_string()))
    }

    /// The elements of an array key.
    pub fn array(&self, key: &str) -> Result<&[Value]> {
        match self.require(key)? {
            Value::Array(_, items) => Ok(items),
            v => Err(Error::WrongType {
                key: key.to_string(),
                expected: "array",
                found: v.type_name(),
            }),
        }
    }

    /// An array of strings.
    pub fn str_array(&self, key: &str) -> Result<Vec<&str>> {
        self.array(key)?
            .iter()
            .map(|v| {
                v.as_str().ok_or_else(|| Error::WrongType {
                    key: key.to_string(),
                    expected: "array of string",
                    found: format!("array containing {}", v.type_name()),
                })
            })
            .collect()
    }

    /// An array of integers, each converted to i64.
    pub fn i64_array(&self, key: &str) -> Result<Vec<i64>> {
        self.array(key)?
            .iter()
            .map(|v| {
                v.as_integer()
                    .and_then(|i| i64::try_from(i).ok())
                    .ok_or_else(|| Error::WrongType {
                        key: key.to_string(),
                        expected: "array of integer",
                        found: format!("array containing {}", v.type_name()),
                    })
            })
            .collect()
    }

    /// An array of numbers, each converted to f32.
    pub fn f32_array(&self, key: &str) -> Result<Vec<f32>> {
        self.array(key)?
            .iter()
            .map(|v| {
                v.as_f64()
                    .map(|f| f as f32)
                    .ok_or_else(|| Error::WrongType {
                        key: key.to_string(),
                        expected: "array of number",
                        found: format!("array containing {}", v.type_name()),
                    })
            })
            .collect()
    }
}
