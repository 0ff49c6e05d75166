//! A stage's tensors, each named once, by the recipe that loads it: the recipe asks a
//! [`TensorLoader`] for a tensor by its GGUF name and shape and keeps the id it gets; the
//! loader checks name, shape and type against the file and records the tensor in a
//! [`TensorTable`]. Everything that handles weights in bulk (the memory plan, the upload,
//! `tandem info`, the bench's bytes per token) reads that table, so a new tensor is written
//! in exactly one place: the line of the recipe that loads it.
//!
//! ```text
//! recipe:   let q = t.matrix("blk.3.attn_q.weight", q_dim, n_embd)?;   // MatId(7)
//! upload:   table.matrices ──Device::upload_matrices──▶ DeviceTensors { mats[7] = Mat(…) }
//! forward:  dev.matmul(&[cx.t[q]], …)
//! ```

use std::collections::BTreeMap;
use std::ops::{Index, Range};
use std::sync::Arc;

use device::{Buf, Bytes, Device, Mat, MatrixSource, Progress, Role};
use gguf::{GgmlType, GgufFile, Metadata};

use crate::{Error, Result};

/// A 2-D weight in the mapped file: `n_rows` rows of `n_cols` elements (GGUF dims
/// `[n_cols, n_rows]`).
#[derive(Debug, Clone)]
pub struct Weight {
    pub name: String,
    pub ty: GgmlType,
    /// Absolute byte range in the file.
    pub range: Range<usize>,
    pub n_rows: usize,
    pub n_cols: usize,
    /// In the file of the model a drafter drafts for, not its own (its embeddings or
    /// output head: [`TensorLoader::with_fallback`]).
    pub borrowed: bool,
}

impl Weight {
    /// Row `i` of the weight in `file` (the bytes it is mapped from), as f32 into `out`
    /// (`[n_cols]`).
    pub fn host_row(&self, file: &[u8], i: usize, out: &mut [f32]) {
        let rb = self.range.len() / self.n_rows;
        let at = self.range.start + i * rb;
        device::formats::dequantize_row(self.ty, &file[at..at + rb], out)
            .expect("a type checked at load");
    }

    /// The weight as a device uploads it, for `role`.
    pub fn source(&self, file: &Arc<GgufFile>, role: Role) -> MatrixSource {
        MatrixSource {
            name: self.name.clone(),
            ty: self.ty,
            bytes: Bytes::Mapped {
                file: file.clone(),
                range: self.range.clone(),
            },
            n_rows: self.n_rows,
            n_cols: self.n_cols,
            role,
        }
    }
}

/// A matrix of the table ([`TensorTable::matrices`]`[id.0]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MatId(usize);

/// Consecutive matrices of the table: the experts of one kind of a mixture.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MatSpan(Range<usize>);

/// A vector of the table ([`TensorTable::vectors`]`[id.0]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VecId(usize);

/// How much of a matrix one row's decode step reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reads {
    /// All of it (also the embedding table, of which it reads one row; see
    /// [`TensorTable::decode_bytes`]).
    Whole,
    /// One expert of a mixture in block `layer`, which `used` of its `n_expert` experts
    /// share per row.
    Expert {
        layer: usize,
        used: usize,
        n_expert: usize,
    },
}

/// A matrix as the stage uses it.
#[derive(Debug, Clone)]
pub struct Matrix {
    pub weight: Weight,
    pub role: Role,
    pub reads: Reads,
}

/// A vector (norm, bias, gate) copied out of the map at load, as f32.
#[derive(Debug, Clone)]
pub struct Vector {
    pub name: String,
    pub data: Vec<f32>,
}

/// Every tensor a stage loaded, in the order its recipe asked for them.
#[derive(Debug, Clone, Default)]
pub struct TensorTable {
    pub matrices: Vec<Matrix>,
    pub vectors: Vec<Vector>,
}

/// Which tables (matrices only read by rows: token embeddings) stay in the file and are
/// read as their rows are needed, never held resident (llama.cpp's `--lazy-mode`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum LazyMode {
    /// Every table.
    On,
    /// Tables over [`LazyMode::AUTO_MIN_BYTES`].
    #[default]
    Auto,
    /// None.
    Off,
}

impl LazyMode {
    /// The size above which `auto` leaves a table in the file (llama.cpp's 4 GiB).
    pub const AUTO_MIN_BYTES: u64 = 4 << 30;

    /// `on`, `auto` or `off`.
    pub fn parse(s: &str) -> std::result::Result<LazyMode, String> {
        match s {
            "on" => Ok(LazyMode::On),
            "auto" => Ok(LazyMode::Auto),
            "off" => Ok(LazyMode::Off),
            _ => Err(format!("'{s}' is not a lazy mode (on, auto or off)")),
        }
    }
}

impl TensorTable {
    /// Makes the tables `mode` leaves in the file [`Role::LazyRows`] (and the others
    /// [`Role::Rows`]).
    pub fn set_lazy(&mut self, mode: LazyMode) {
        for m in &mut self.matrices {
            if matches!(m.role, Role::Rows | Role::LazyRows) {
                let lazy = match mode {
                    LazyMode::On => true,
                    LazyMode::Auto => m.weight.range.len() as u64 > LazyMode::AUTO_MIN_BYTES,
                    LazyMode::Off => false,
                };
                m.role = if lazy { Role::LazyRows } else { Role::Rows };
            }
        }
    }

    pub fn matrix(&self, id: MatId) -> &Matrix {
        &self.matrices[id.0]
    }

    /// Floats of the vectors, all copied at load.
    pub fn vector_len(&self) -> usize {
        self.vectors.iter().map(|v| v.data.len()).sum()
    }

    /// The matrices with their ids.
    pub fn iter(&self) -> impl Iterator<Item = (MatId, &Matrix)> {
        self.matrices.iter().enumerate().map(|(i, m)| (MatId(i), m))
    }

    /// Bytes of weights one decode step of one row streams, with `bytes(id)` the bytes a
    /// device keeps of matrix `id`: every matrix once, but of a block's experts the `used`
    /// of `n_expert` a row picks (counted per block, rounding down), and of the embedding
    /// table one row as the file stores it.
    pub fn decode_bytes(&self, bytes: &dyn Fn(MatId) -> u64) -> u64 {
        let mut experts: BTreeMap<usize, (u64, u64, u64)> = BTreeMap::new();
        let mut total = 0;
        for (id, m) in self.iter() {
            match (m.role, m.reads) {
                (Role::Rows | Role::LazyRows, _) => {
                    total += (m.weight.range.len() / m.weight.n_rows.max(1)) as u64
                }
                (Role::Multiply, Reads::Whole) => total += bytes(id),
                (
                    Role::Multiply,
                    Reads::Expert {
                        layer,
                        used,
                        n_expert,
                    },
                ) => {
                    let e = experts
                        .entry(layer)
                        .or_insert((0, used as u64, n_expert as u64));
                    e.0 += bytes(id);
                }
            }
        }
        total
            + experts
                .values()
                .map(|&(b, k, n)| b * k / n.max(1))
                .sum::<u64>()
    }
}

/// Reads a stage's tensors out of a file into a [`TensorTable`], checking each one's name,
/// shape and type; the ids it returns index that table (and, after upload, the
/// [`DeviceTensors`]).
pub struct TensorLoader<'a> {
    file: &'a GgufFile,
    /// Where tensors the file lacks are taken from ([`TensorLoader::with_fallback`]).
    fallback: Option<&'a GgufFile>,
    table: TensorTable,
}

impl<'a> TensorLoader<'a> {
    pub fn new(file: &'a GgufFile) -> TensorLoader<'a> {
        TensorLoader {
            file,
            fallback: None,
            table: TensorTable::default(),
        }
    }

    /// A loader that takes the matrices and host values `file` lacks from `fallback` (a
    /// drafter's embeddings and output head, an MTP file's merge of the streams, from the
    /// model it drafts for), the matrices marked [`Weight::borrowed`].
    pub fn with_fallback(file: &'a GgufFile, fallback: &'a GgufFile) -> TensorLoader<'a> {
        TensorLoader {
            fallback: Some(fallback),
            ..TensorLoader::new(file)
        }
    }

    pub fn metadata(&self) -> &Metadata {
        &self.file.header.metadata
    }

    /// Whether the file itself has a tensor named `name`.
    pub fn has_own(&self, name: &str) -> bool {
        self.file.header.tensor(name).is_some()
    }

    /// Whether the file (or the fallback) has a tensor named `name`.
    pub fn has(&self, name: &str) -> bool {
        let has = |f: &GgufFile| f.header.tensor(name).is_some();
        has(self.file) || self.fallback.is_some_and(has)
    }

    /// The GGUF dims of the file's own tensor `name`, when it has one.
    pub fn dims(&self, name: &str) -> Option<&[u64]> {
        self.file.header.tensor(name).map(|i| i.dims.as_slice())
    }

    pub fn finish(self) -> TensorTable {
        self.table
    }

    fn info(&self, name: &str, dims: &[u64]) -> Result<&'a gguf::TensorInfo> {
        let info = self
            .file
            .header
            .tensor(name)
            .ok_or_else(|| Error::MissingTensor(name.to_string()))?;
        let mut got = info.dims.clone();
        while got.len() > dims.len() && got.last() == Some(&1) {
            got.pop();
        }
        if got != dims {
            return Err(Error::TensorShape {
                tensor: name.to_string(),
                expected: dims.to_vec(),
                got: info.dims.clone(),
            });
        }
        Ok(info)
    }

    fn weight(
        &self,
        name: &str,
        info: &gguf::TensorInfo,
        n_rows: usize,
        n_cols: usize,
    ) -> Result<Weight> {
        if !device::formats::is_supported(info.ggml_type) {
            return Err(Error::UnsupportedType {
                tensor: name.to_string(),
                ty: info.ggml_type,
            });
        }
        let start = (self.file.header.data_offset + info.offset) as usize;
        Ok(Weight {
            name: name.to_string(),
            ty: info.ggml_type,
            range: start..start + info.n_bytes as usize,
            n_rows,
            n_cols,
            borrowed: false,
        })
    }

    /// A table of `n_rows` rows of `n_cols` read for the host a row at a time from the
    /// mapped file ([`Weight::host_row`]), never uploaded.
    pub fn host_rows(&mut self, name: &str, n_rows: usize, n_cols: usize) -> Result<Weight> {
        let info = self.info(name, &[n_cols as u64, n_rows as u64])?;
        self.weight(name, info, n_rows, n_cols)
    }

    fn push(&mut self, weight: Weight, role: Role, reads: Reads) -> MatId {
        self.table.matrices.push(Matrix {
            weight,
            role,
            reads,
        });
        MatId(self.table.matrices.len() - 1)
    }

    /// A matrix of `n_rows` rows of `n_cols`, multiplied with activations.
    pub fn matrix(&mut self, name: &str, n_rows: usize, n_cols: usize) -> Result<MatId> {
        self.matrix_for(name, n_rows, n_cols, Role::Multiply)
    }

    /// [`TensorLoader::matrix`] for `role` (the embedding table: [`Role::Rows`]).
    pub fn matrix_for(
        &mut self,
        name: &str,
        n_rows: usize,
        n_cols: usize,
        role: Role,
    ) -> Result<MatId> {
        let dims = [n_cols as u64, n_rows as u64];
        let w = match self.fallback {
            Some(other) if self.file.header.tensor(name).is_none() => {
                let own = TensorLoader::new(other);
                let info = own.info(name, &dims)?;
                Weight {
                    borrowed: true,
                    ..own.weight(name, info, n_rows, n_cols)?
                }
            }
            _ => {
                let info = self.info(name, &dims)?;
                self.weight(name, info, n_rows, n_cols)?
            }
        };
        Ok(self.push(w, role, Reads::Whole))
    }

    /// A tensor of GGUF dims `dims` as a matrix of rows of `dims[..last]` flattened
    /// (a convolution's kernels: `[kw, kh, channels_in, channels_out]`, a row per output
    /// channel).
    pub fn matrix_dims(&mut self, name: &str, dims: &[usize]) -> Result<MatId> {
        let dims64: Vec<u64> = dims.iter().map(|&d| d as u64).collect();
        let info = self.info(name, &dims64)?;
        let (n_rows, n_cols) = (
            dims[dims.len() - 1],
            dims[..dims.len() - 1].iter().product(),
        );
        let w = self.weight(name, info, n_rows, n_cols)?;
        Ok(self.push(w, Role::Multiply, Reads::Whole))
    }

    /// A matrix of `parts.iter().sum()` rows of `n_cols`, as consecutive matrices of
    /// `parts[i]` rows each (named `name[i]`): a fused `attn_qkv`, say.
    pub fn row_parts(&mut self, name: &str, parts: &[usize], n_cols: usize) -> Result<Vec<MatId>> {
        let n_rows = parts.iter().sum();
        let info = self.info(name, &[n_cols as u64, n_rows as u64])?;
        let all = self.weight(name, info, n_rows, n_cols)?;
        Ok(self.push_parts(&all, parts))
    }

    /// `all` as consecutive matrices of `parts[i]` rows, each multiplied on its own.
    fn push_parts(&mut self, all: &Weight, parts: &[usize]) -> Vec<MatId> {
        split_rows(all, parts)
            .into_iter()
            .map(|w| self.push(w, Role::Multiply, Reads::Whole))
            .collect()
    }

    /// The `n_expert` slabs of `n_rows` rows of `n_cols` of the 3-D expert tensor `name` of
    /// block `layer`, each a matrix of its own (named `name[e]`), of which a row uses
    /// `used`.
    pub fn experts(
        &mut self,
        name: &str,
        layer: usize,
        [n_expert, used]: [usize; 2],
        n_rows: usize,
        n_cols: usize,
    ) -> Result<MatSpan> {
        let info = self.info(name, &[n_cols as u64, n_rows as u64, n_expert as u64])?;
        let all = self.weight(name, info, n_expert * n_rows, n_cols)?;
        let reads = Reads::Expert {
            layer,
            used,
            n_expert,
        };
        let start = self.table.matrices.len();
        for w in split_rows(&all, &vec![n_rows; n_expert]) {
            self.push(w, Role::Multiply, reads);
        }
        Ok(MatSpan(start..self.table.matrices.len()))
    }

    /// The `groups` matrices of `n_rows` rows of `n_cols` of tensor `name`, stored as one
    /// matrix of `groups · n_rows` rows (`[n_cols, groups · n_rows]`) or as a 3-D tensor
    /// `[n_cols, n_rows, groups]` (a grouped projection: DeepSeek-V4's output LoRA).
    pub fn grouped(
        &mut self,
        name: &str,
        groups: usize,
        n_rows: usize,
        n_cols: usize,
    ) -> Result<Vec<MatId>> {
        let three = [n_cols as u64, n_rows as u64, groups as u64];
        let info = match self.info(name, &three) {
            Ok(info) => info,
            Err(_) => self.info(name, &[n_cols as u64, (groups * n_rows) as u64])?,
        };
        let all = self.weight(name, info, groups * n_rows, n_cols)?;
        Ok(self.push_parts(&all, &vec![n_rows; groups]))
    }

    /// A small tensor of GGUF dims `dims` read for the host alone (constants a block
    /// computes with), converted to f32.
    pub fn values(&mut self, name: &str, dims: &[usize]) -> Result<Vec<f32>> {
        let dims64: Vec<u64> = dims.iter().map(|&d| d as u64).collect();
        let file = match self.fallback {
            Some(other) if self.file.header.tensor(name).is_none() => other,
            _ => self.file,
        };
        let info = TensorLoader::new(file).info(name, &dims64)?;
        let mut data = vec![0f32; dims.iter().product()];
        device::formats::dequantize_row(info.ggml_type, file.tensor_bytes(info), &mut data)
            .map_err(|_| Error::UnsupportedType {
                tensor: name.to_string(),
                ty: info.ggml_type,
            })?;
        Ok(data)
    }

    /// A tensor of 32-bit integers of GGUF dims `dims`, read for the host (a table of
    /// ids).
    pub fn integers(&mut self, name: &str, dims: &[usize]) -> Result<Vec<i32>> {
        let dims64: Vec<u64> = dims.iter().map(|&d| d as u64).collect();
        let info = self.info(name, &dims64)?;
        if info.ggml_type != GgmlType::I32 {
            return Err(Error::UnsupportedType {
                tensor: name.to_string(),
                ty: info.ggml_type,
            });
        }
        let bytes = self.file.tensor_bytes(info);
        Ok(bytes
            .chunks_exact(4)
            .map(|b| i32::from_le_bytes(b.try_into().expect("4 bytes")))
            .collect())
    }

    /// A table of `n` token ids (32- or 64-bit integers, each below `n_vocab`), read for the
    /// host: a drafter's reduced vocabulary (`d2t`: its logit `i` is token `ids[i]`).
    pub fn ids(&mut self, name: &str, n_vocab: usize) -> Result<Vec<u32>> {
        let info = self
            .file
            .header
            .tensor(name)
            .ok_or_else(|| Error::MissingTensor(name.to_string()))?;
        let bytes = self.file.tensor_bytes(info);
        let ids: Vec<i64> = match info.ggml_type {
            GgmlType::I64 => bytes
                .chunks_exact(8)
                .map(|b| i64::from_le_bytes(b.try_into().expect("8 bytes")))
                .collect(),
            GgmlType::I32 => bytes
                .chunks_exact(4)
                .map(|b| i32::from_le_bytes(b.try_into().expect("4 bytes")) as i64)
                .collect(),
            ty => {
                return Err(Error::UnsupportedType {
                    tensor: name.to_string(),
                    ty,
                })
            }
        };
        ids.iter()
            .map(|&id| match u32::try_from(id) {
                Ok(id) if (id as usize) < n_vocab => Ok(id),
                _ => Err(Error::BadTensor {
                    tensor: name.to_string(),
                    problem: format!("token id {id} outside the vocabulary of {n_vocab}"),
                }),
            })
            .collect()
    }

    /// A vector of values not in the file, uploaded like the file's (ones for a norm
    /// without weights), named for errors.
    pub fn constant(&mut self, name: &str, data: Vec<f32>) -> VecId {
        self.table.vectors.push(Vector {
            name: name.to_string(),
            data,
        });
        VecId(self.table.vectors.len() - 1)
    }

    /// A vector of `n` values, converted to f32.
    pub fn vector(&mut self, name: &str, n: usize) -> Result<VecId> {
        self.vector_dims(name, &[n])
    }

    /// A tensor of GGUF dims `dims` read whole as a vector (row by row), converted to f32:
    /// small tensors the ops read as a table (a convolution's taps).
    pub fn vector_dims(&mut self, name: &str, dims: &[usize]) -> Result<VecId> {
        let data = self.values(name, dims)?;
        Ok(self.constant(name, data))
    }
}

/// `all` cut into consecutive slices of `parts[i]` rows (named `all.name[i]`).
fn split_rows(all: &Weight, parts: &[usize]) -> Vec<Weight> {
    let row_bytes = all.range.len() / all.n_rows;
    let mut start = all.range.start;
    parts
        .iter()
        .enumerate()
        .map(|(i, &n_rows)| {
            start += n_rows * row_bytes;
            Weight {
                name: format!("{}[{i}]", all.name),
                range: start - n_rows * row_bytes..start,
                n_rows,
                ..all.clone()
            }
        })
        .collect()
}

/// A stage's tensors on a device, indexed by the ids the loader gave.
pub struct DeviceTensors {
    mats: Vec<Mat>,
    vecs: Vec<Buf>,
}

impl DeviceTensors {
    /// Uploads `table` to `dev`: its matrices from `sources` (one per matrix, in order:
    /// the table's own, or a replacement such as a restricted head), its vectors copied.
    /// A block whose scales no encoder writes (NaN, infinite, a reserved code) is an
    /// error naming its tensor, before anything is uploaded.
    pub fn upload(
        dev: &mut dyn Device,
        table: &TensorTable,
        sources: &[MatrixSource],
        progress: &Progress<'_>,
    ) -> Result<DeviceTensors> {
        debug_assert_eq!(sources.len(), table.matrices.len());
        for s in sources {
            if let Some(block) = device::formats::first_bad_block(s.ty, s.bytes.as_slice()) {
                return Err(Error::CorruptBlock {
                    tensor: s.name.clone(),
                    ty: s.ty,
                    block,
                });
            }
        }
        let mats = dev.upload_matrices(sources, progress)?;
        let vecs = table
            .vectors
            .iter()
            .map(|v| {
                let b = dev.alloc(v.data.len())?;
                dev.upload(b, 0, &v.data);
                Ok(b)
            })
            .collect::<Result<_>>()?;
        Ok(DeviceTensors { mats, vecs })
    }

    /// The vector `id`, when there is one.
    pub fn opt(&self, id: Option<VecId>) -> Option<Buf> {
        id.map(|id| self[id])
    }
}

impl Index<MatId> for DeviceTensors {
    type Output = Mat;
    fn index(&self, id: MatId) -> &Mat {
        &self.mats[id.0]
    }
}

impl Index<&MatSpan> for DeviceTensors {
    type Output = [Mat];
    fn index(&self, span: &MatSpan) -> &[Mat] {
        &self.mats[span.0.clone()]
    }
}

impl Index<VecId> for DeviceTensors {
    type Output = Buf;
    fn index(&self, id: VecId) -> &Buf {
        &self.vecs[id.0]
    }
}
