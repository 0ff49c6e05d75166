//! Weights: references into the memory-mapped GGUF file, checked by name, shape and type
//! at load. Only norms and biases (small, f32) are copied.

use gguf::{GgmlType, GgufFile};
use kernels::QMatrix;

use crate::hparams::HParams;
use crate::{Error, Result};

/// A 2-D weight in the mapped file: `n_rows` rows of `n_cols` elements (GGUF dims
/// `[n_cols, n_rows]`).
#[derive(Debug, Clone)]
pub struct Weight {
    pub name: String,
    pub ty: GgmlType,
    /// Absolute byte range in the file.
    pub range: std::ops::Range<usize>,
    pub n_rows: usize,
    pub n_cols: usize,
}

impl Weight {
    pub fn view<'a>(&self, file: &'a GgufFile) -> QMatrix<'a> {
        QMatrix::new(
            self.ty,
            &file.bytes()[self.range.clone()],
            self.n_rows,
            self.n_cols,
        )
        .expect("checked at load")
    }
}

/// The weights of one transformer block; names mirror GGUF (`blk.N.<name>.weight`).
#[derive(Debug, Clone)]
pub struct LayerWeights {
    pub attn_norm: Vec<f32>,
    pub attn_q: Weight,
    pub attn_k: Weight,
    pub attn_v: Weight,
    pub attn_q_bias: Option<Vec<f32>>,
    pub attn_k_bias: Option<Vec<f32>>,
    pub attn_v_bias: Option<Vec<f32>>,
    /// `[head_dim]`, qwen3.
    pub attn_q_norm: Option<Vec<f32>>,
    pub attn_k_norm: Option<Vec<f32>>,
    pub attn_output: Weight,
    pub ffn_norm: Vec<f32>,
    pub ffn_gate: Weight,
    pub ffn_up: Weight,
    pub ffn_down: Weight,
}

/// All weights of a model.
#[derive(Debug, Clone)]
pub struct Weights {
    /// `[n_vocab, n_embd]`.
    pub token_embd: Weight,
    pub layers: Vec<LayerWeights>,
    pub output_norm: Vec<f32>,
    /// `[n_vocab, n_embd]`; the embedding matrix when the model ties them.
    pub output: Weight,
}

pub(crate) struct Loader<'a> {
    pub file: &'a GgufFile,
}

impl Loader<'_> {
    fn info(&self, name: &str, dims: &[u64]) -> Result<&gguf::TensorInfo> {
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

    /// A matrix of `n_rows` rows of `n_cols`.
    pub fn matrix(&self, name: &str, n_rows: usize, n_cols: usize) -> Result<Weight> {
        let info = self.info(name, &[n_cols as u64, n_rows as u64])?;
        if !kernels::formats::is_supported(info.ggml_type) {
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
        })
    }

    /// A vector of `n` values, converted to f32.
    pub fn vector(&self, name: &str, n: usize) -> Result<Vec<f32>> {
        let info = self.info(name, &[n as u64])?;
        let mut out = vec![0f32; n];
        kernels::formats::dequantize_row(info.ggml_type, self.file.tensor_bytes(info), &mut out)
            .map_err(|_| Error::UnsupportedType {
                tensor: name.to_string(),
                ty: info.ggml_type,
            })?;
        Ok(out)
    }

    pub fn opt_vector(&self, name: &str, n: usize, present: bool) -> Result<Option<Vec<f32>>> {
        if !present {
            return Ok(None);
        }
        self.vector(name, n).map(Some)
    }

    pub fn load(&self, hp: &HParams) -> Result<Weights> {
        let spec = hp.arch.spec();
        let (e, q, kv, ff) = (hp.n_embd, hp.q_dim(), hp.kv_dim(), hp.n_ff);
        let token_embd = self.matrix("token_embd.weight", hp.n_vocab, e)?;
        let output = match self.file.header.tensor("output.weight") {
            Some(_) => self.matrix("output.weight", hp.n_vocab, e)?,
            None => token_embd.clone(),
        };
        let layers = (0..hp.n_layer)
            .map(|i| {
                let n = |s: &str| format!("blk.{i}.{s}");
                Ok(LayerWeights {
                    attn_norm: self.vector(&n("attn_norm.weight"), e)?,
                    attn_q: self.matrix(&n("attn_q.weight"), q, e)?,
                    attn_k: self.matrix(&n("attn_k.weight"), kv, e)?,
                    attn_v: self.matrix(&n("attn_v.weight"), kv, e)?,
                    attn_q_bias: self.opt_vector(&n("attn_q.bias"), q, spec.qkv_bias)?,
                    attn_k_bias: self.opt_vector(&n("attn_k.bias"), kv, spec.qkv_bias)?,
                    attn_v_bias: self.opt_vector(&n("attn_v.bias"), kv, spec.qkv_bias)?,
                    attn_q_norm: self.opt_vector(
                        &n("attn_q_norm.weight"),
                        hp.head_dim,
                        spec.qk_norm,
                    )?,
                    attn_k_norm: self.opt_vector(
                        &n("attn_k_norm.weight"),
                        hp.head_dim,
                        spec.qk_norm,
                    )?,
                    attn_output: self.matrix(&n("attn_output.weight"), e, q)?,
                    ffn_norm: self.vector(&n("ffn_norm.weight"), e)?,
                    ffn_gate: self.matrix(&n("ffn_gate.weight"), ff, e)?,
                    ffn_up: self.matrix(&n("ffn_up.weight"), ff, e)?,
                    ffn_down: self.matrix(&n("ffn_down.weight"), e, ff)?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Weights {
            token_embd,
            layers,
            output_norm: self.vector("output_norm.weight", e)?,
            output,
        })
    }
}
