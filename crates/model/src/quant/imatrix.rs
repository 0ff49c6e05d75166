//! Importance matrices as llama.cpp's `llama-imatrix` writes them, in both of its
//! formats, read into what `llama-quantize` hands its quantizers: for each weight matrix,
//! the mean of `x²` of each input column over the calibration tokens.
//!
//! **GGUF** (what `llama-imatrix` writes today): per matrix `NAME`, an F32 tensor
//! `NAME.in_sum2` of shape `[n_per_row, n_mat]` (sums of `x²`, one row per expert) and an
//! F32 tensor `NAME.counts` of shape `[1, n_mat]` (tokens each expert saw); metadata
//! `imatrix.datasets` (array of strings), `imatrix.chunk_count` and `imatrix.chunk_size`
//! (u32), all three required as `llama-quantize` requires them. Value: `in_sum2 / count`,
//! or 1 where the count is 0.
//!
//! **Legacy `.dat`** (`save_imatrix_legacy`), little-endian: i32 `n_entries`; per entry
//! i32 `len`, `len` bytes of name, i32 `ncall`, i32 `nval`, `nval` f32 (each the mean
//! times `ncall`); then optionally i32 `chunk_count`, i32 `len` and `len` bytes of the
//! dataset's name. Value: `stored / ncall`, or as stored where `ncall` is 0.
//!
//! [`ImatrixSums`] writes the GGUF format, as `llama-imatrix` does: entries in name order,
//! each `NAME.in_sum2` then `NAME.counts`, `general.type = "imatrix"` and the three keys.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use gguf::{GgmlType, Gguf, GgufWriter, Value};

use crate::{Error, Result};

/// The format an importance matrix was read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImatrixFormat {
    Gguf,
    Legacy,
}

/// An importance matrix: per weight matrix, `n_mat * n_per_row` values (expert-major for
/// a 3-D tensor of `n_mat` experts), each the mean `x²` of an input column.
#[derive(Debug, Clone)]
pub struct Imatrix {
    pub format: ImatrixFormat,
    /// Weight matrix name → its values.
    pub entries: HashMap<String, Vec<f32>>,
    /// The calibration files it was computed on.
    pub datasets: Vec<String>,
    /// Chunks of calibration text it was computed on (0 where the file does not say).
    pub chunk_count: u32,
}

impl Imatrix {
    /// Reads `path` in either format (GGUF where it starts with the GGUF magic). Errors
    /// name the file and the key, tensor or entry that is malformed.
    pub fn load(path: &Path) -> Result<Imatrix> {
        let bad = |what: String| Error::BadImatrix {
            path: path.display().to_string(),
            what,
        };
        let bytes = std::fs::read(path).map_err(|e| bad(e.to_string()))?;
        Imatrix::parse(&bytes).map_err(bad)
    }

    /// Parses a file's bytes; the error says what is malformed.
    pub fn parse(bytes: &[u8]) -> std::result::Result<Imatrix, String> {
        let m = if bytes.starts_with(&gguf::GGUF_MAGIC) {
            from_gguf(bytes)?
        } else {
            from_legacy(bytes)?
        };
        for (name, values) in &m.entries {
            if let Some(i) = values.iter().position(|v| !v.is_finite()) {
                return Err(format!("'{name}': value {i} is {}", values[i]));
            }
        }
        Ok(m)
    }

    /// The values for the weight matrix `tensor`, if it has an entry.
    pub fn get(&self, tensor: &str) -> Option<&[f32]> {
        self.entries.get(tensor).map(Vec::as_slice)
    }
}

/// One weight matrix's sums as a forward collects them: per matrix (`counts.len()`: 1, or
/// a 3-D tensor's experts) `n_cols` sums of `x²` over the input rows it multiplied, and
/// how many rows that was.
#[derive(Debug, Clone, PartialEq)]
pub struct Sums {
    pub n_cols: usize,
    /// `[counts.len(), n_cols]`, matrix-major.
    pub in_sum2: Vec<f32>,
    pub counts: Vec<u64>,
}

impl Sums {
    /// Zero sums for `n_mat` matrices of `n_cols` columns.
    pub fn new(n_cols: usize, n_mat: usize) -> Sums {
        Sums {
            n_cols,
            in_sum2: vec![0.0; n_cols * n_mat],
            counts: vec![0; n_mat],
        }
    }

    /// Adds the input rows `x` (`[rows, n_cols]`) of matrix `mat`, in row order, each
    /// square accumulated in f32 (as `llama-imatrix` does).
    pub fn add(&mut self, mat: usize, x: &[f32]) {
        let acc = &mut self.in_sum2[mat * self.n_cols..(mat + 1) * self.n_cols];
        for row in x.chunks_exact(self.n_cols) {
            for (a, &v) in acc.iter_mut().zip(row) {
                *a += v * v;
            }
        }
        self.counts[mat] += (x.len() / self.n_cols) as u64;
    }
}

/// What `llama-imatrix` writes: the sums of each weight matrix (by tensor name) and the
/// calibration they came from.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ImatrixSums {
    pub entries: BTreeMap<String, Sums>,
    /// The calibration files (as named on the command line).
    pub datasets: Vec<String>,
    /// Chunks evaluated.
    pub chunk_count: u32,
    /// Tokens per chunk.
    pub chunk_size: u32,
}

impl ImatrixSums {
    /// The GGUF file (see the module doc); [`Imatrix::parse`] reads it back.
    pub fn to_gguf(&self) -> Vec<u8> {
        let mut w = GgufWriter::new();
        w.metadata("general.type", Value::String("imatrix".into()))
            .metadata("imatrix.datasets", Value::strings(&self.datasets))
            .metadata("imatrix.chunk_count", Value::U32(self.chunk_count))
            .metadata("imatrix.chunk_size", Value::U32(self.chunk_size));
        let bytes = |v: &mut dyn Iterator<Item = f32>| v.flat_map(f32::to_le_bytes).collect();
        for (name, s) in &self.entries {
            let n_mat = s.counts.len() as u64;
            w.tensor(
                &format!("{name}{IN_SUM2}"),
                &[s.n_cols as u64, n_mat],
                GgmlType::F32,
                bytes(&mut s.in_sum2.iter().copied()),
            );
            w.tensor(
                &format!("{name}{COUNTS}"),
                &[1, n_mat],
                GgmlType::F32,
                bytes(&mut s.counts.iter().map(|&c| c as f32)),
            );
        }
        w.to_bytes()
    }
}

const IN_SUM2: &str = ".in_sum2";
const COUNTS: &str = ".counts";

fn from_gguf(bytes: &[u8]) -> std::result::Result<Imatrix, String> {
    let g = Gguf::parse(bytes).map_err(|e| e.to_string())?;
    let md = &g.metadata;
    let datasets = md
        .str_array("imatrix.datasets")
        .map_err(|e| e.to_string())?
        .into_iter()
        .map(str::to_string)
        .collect();
    let chunk_count = md.u32("imatrix.chunk_count").map_err(|e| e.to_string())?;
    md.u32("imatrix.chunk_size").map_err(|e| e.to_string())?;
    let floats = |name: &str| -> std::result::Result<Vec<f32>, String> {
        let t = g
            .tensor(name)
            .ok_or_else(|| format!("tensor '{name}' is missing"))?;
        if t.ggml_type != GgmlType::F32 {
            return Err(format!("tensor '{name}' is {}, not F32", t.ggml_type));
        }
        let start = (g.data_offset + t.offset) as usize;
        Ok(bytes[start..start + t.n_bytes as usize]
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect())
    };
    let mut entries = HashMap::new();
    for t in &g.tensors {
        let Some(name) = t.name.strip_suffix(IN_SUM2) else {
            if let Some(name) = t.name.strip_suffix(COUNTS) {
                if g.tensor(&format!("{name}{IN_SUM2}")).is_none() {
                    return Err(format!("tensor '{}' has no '{name}{IN_SUM2}'", t.name));
                }
            }
            continue;
        };
        let sums = floats(&t.name)?;
        let counts = floats(&format!("{name}{COUNTS}"))?;
        if counts.is_empty() || !sums.len().is_multiple_of(counts.len()) {
            return Err(format!(
                "tensor '{}' has {} values, not a whole row for each of the {} counts of '{name}{COUNTS}'",
                t.name,
                sums.len(),
                counts.len()
            ));
        }
        let n_per_row = sums.len() / counts.len();
        let mut values = sums;
        for (row, &count) in values.chunks_exact_mut(n_per_row).zip(&counts) {
            let count = count.round();
            for v in row {
                *v = if count > 0.0 { *v / count } else { 1.0 };
            }
        }
        entries.insert(name.to_string(), values);
    }
    if entries.is_empty() {
        return Err(format!("no '*{IN_SUM2}' tensors"));
    }
    Ok(Imatrix {
        format: ImatrixFormat::Gguf,
        entries,
        datasets,
        chunk_count,
    })
}

/// A little-endian reader whose errors say what was being read.
struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl Reader<'_> {
    fn take(&mut self, n: usize, what: &dyn Fn() -> String) -> std::result::Result<&[u8], String> {
        let rest = self.bytes.len() - self.pos;
        if n > rest {
            return Err(format!(
                "{} at byte {} needs {n} bytes, {rest} left",
                what(),
                self.pos
            ));
        }
        self.pos += n;
        Ok(&self.bytes[self.pos - n..self.pos])
    }

    fn i32(&mut self, what: &dyn Fn() -> String) -> std::result::Result<i32, String> {
        let b = self.take(4, what)?;
        Ok(i32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    /// A length: an i32 of at least `min`.
    fn len(&mut self, min: i32, what: &dyn Fn() -> String) -> std::result::Result<usize, String> {
        let n = self.i32(what)?;
        if n < min {
            return Err(format!("{} is {n}", what()));
        }
        Ok(n as usize)
    }
}

fn from_legacy(bytes: &[u8]) -> std::result::Result<Imatrix, String> {
    let mut r = Reader { bytes, pos: 0 };
    let n_entries = r.len(1, &|| "the entry count (legacy format)".to_string())?;
    let mut entries = HashMap::new();
    for i in 0..n_entries {
        let at = |what: &'static str| move || format!("entry {i}: {what}");
        let len = r.len(1, &at("name length"))?;
        let name = std::str::from_utf8(r.take(len, &at("name"))?)
            .map_err(|_| format!("entry {i}: name is not UTF-8"))?
            .to_string();
        let named = |what: &'static str| {
            let name = name.clone();
            move || format!("entry {i} '{name}': {what}")
        };
        let ncall = r.i32(&named("ncall"))?;
        let nval = r.len(1, &named("value count"))?;
        let raw = r.take(nval.saturating_mul(4), &named("values"))?;
        let values = raw
            .chunks_exact(4)
            .map(|b| {
                let v = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
                if ncall > 0 {
                    v / ncall as f32
                } else {
                    v
                }
            })
            .collect();
        if entries.insert(name.clone(), values).is_some() {
            return Err(format!("entry {i}: '{name}' appears twice"));
        }
    }
    let mut chunk_count = 0;
    let mut datasets = Vec::new();
    if r.pos < bytes.len() {
        chunk_count = r.len(0, &|| "the chunk count after the entries".to_string())? as u32;
        if r.pos < bytes.len() {
            let len = r.len(0, &|| "the dataset name length".to_string())?;
            let name = r.take(len, &|| "the dataset name".to_string())?;
            datasets.push(String::from_utf8_lossy(name).into_owned());
        }
    }
    Ok(Imatrix {
        format: ImatrixFormat::Legacy,
        entries,
        datasets,
        chunk_count,
    })
}
