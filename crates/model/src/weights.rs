//! Weights: references into the memory-mapped GGUF file, checked by name, shape and type
//! at load. Only norms and biases (small, f32) are copied. A device gets them through
//! [`Weight::source`] (`crate::upload`).

use std::sync::Arc;

use device::{Bytes, MatrixSource, Role};
use gguf::{GgmlType, GgufFile};

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
    /// `[n_embd]`: norms of the attention and feed-forward outputs (Gemma).
    pub post_attn_norm: Option<Vec<f32>>,
    pub ffn_norm: Vec<f32>,
    pub ffn: Ffn,
    pub post_ffn_norm: Option<Vec<f32>>,
}

/// A block's feed-forward network.
#[derive(Debug, Clone)]
pub enum Ffn {
    /// `ffn_gate`, `ffn_up`, `ffn_down`.
    Dense(Mlp),
    Moe(MoeWeights),
}

/// A SwiGLU network `down(silu(gate(x)) · up(x))`: GGUF's `ffn_{gate,up,down}` in a dense
/// block, `ffn_{gate,up,down}_shexp` as a shared expert. `gate`, `up`: `[n_ff, n_embd]`;
/// `down`: `[n_embd, n_ff]`.
#[derive(Debug, Clone)]
pub struct Mlp {
    pub gate: Weight,
    pub up: Weight,
    pub down: Weight,
}

/// A mixture of experts. GGUF stores each kind of expert matrix as one tensor
/// `[n_expert, rows, cols]`; here each expert's slab is a [`Weight`] of its own (named
/// `blk.N.ffn_gate_exps.weight[e]`), so that it is packed and multiplied on its own.
#[derive(Debug, Clone)]
pub struct MoeWeights {
    /// `[n_expert, n_embd]`: the router.
    pub ffn_gate_inp: Weight,
    /// `n_expert` × `[n_ff_exp, n_embd]`.
    pub ffn_gate_exps: Vec<Weight>,
    pub ffn_up_exps: Vec<Weight>,
    /// `n_expert` × `[n_embd, n_ff_exp]`.
    pub ffn_down_exps: Vec<Weight>,
    /// `ffn_{gate,up,down}_shexp`.
    pub shared: Option<Mlp>,
    /// `[n_embd]`: the shared expert's gate (qwen2moe).
    pub ffn_gate_inp_shexp: Option<Vec<f32>>,
}

impl LayerWeights {
    /// Floats of the block's vectors (norms, biases, gates), copied out of the map at load.
    pub fn vector_len(&self) -> usize {
        let opt = |v: &Option<Vec<f32>>| v.as_ref().map_or(0, Vec::len);
        let shexp = match &self.ffn {
            Ffn::Moe(m) => opt(&m.ffn_gate_inp_shexp),
            Ffn::Dense(_) => 0,
        };
        self.attn_norm.len()
            + self.ffn_norm.len()
            + opt(&self.attn_q_bias)
            + opt(&self.attn_k_bias)
            + opt(&self.attn_v_bias)
            + opt(&self.attn_q_norm)
            + opt(&self.attn_k_norm)
            + opt(&self.post_attn_norm)
            + opt(&self.post_ffn_norm)
            + shexp
    }
}

impl Ffn {
    /// The matrices the block multiplies with.
    pub fn matrices(&self) -> Vec<&Weight> {
        match self {
            Ffn::Dense(m) => vec![&m.gate, &m.up, &m.down],
            Ffn::Moe(m) => {
                let mut all = vec![&m.ffn_gate_inp];
                all.extend(m.ffn_gate_exps.iter().chain(&m.ffn_up_exps));
                all.extend(&m.ffn_down_exps);
                all.extend(m.shared.iter().flat_map(|s| [&s.gate, &s.up, &s.down]));
                all
            }
        }
    }
}

/// The weights of a [`Stage`] of a model.
#[derive(Debug, Clone)]
pub struct Weights {
    /// `[n_vocab, n_embd]`, when the stage embeds.
    pub token_embd: Option<Weight>,
    /// The blocks of the stage, `layers[i]` being block `stage.layers.start + i`.
    pub layers: Vec<LayerWeights>,
    /// The final norm and output head (`[n_vocab, n_embd]`; the embedding matrix when the
    /// model ties them), when the stage ends with the head.
    pub output_norm: Option<Vec<f32>>,
    pub output: Option<Weight>,
}

/// The part of a model one process holds: blocks `layers` (a contiguous range), with the
/// embeddings before them (`embed`) and the final norm and output head after them (`head`).
/// Made from a [`Part`] against the file's block count.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stage {
    pub layers: std::ops::Range<usize>,
    pub embed: bool,
    pub head: bool,
}

/// Which part of a model to load. A model split at block `L` is `First(L)` on one machine
/// and `Last(L)` on the other; hidden states cross between them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    Whole,
    /// The embeddings and blocks `0..L`.
    First(usize),
    /// Blocks `L..n_layer` and the output head.
    Last(usize),
}

impl Part {
    /// The stage of a model of `n_layer` blocks; a split must leave blocks on both sides.
    pub fn stage(self, n_layer: usize) -> Result<Stage> {
        let (split, embed) = match self {
            Part::Whole => {
                return Ok(Stage {
                    layers: 0..n_layer,
                    embed: true,
                    head: true,
                })
            }
            Part::First(l) => (l, true),
            Part::Last(l) => (l, false),
        };
        if split > n_layer {
            let asked = if embed {
                format!("0..{split}")
            } else {
                format!("{split}..{n_layer}")
            };
            return Err(Error::BadStage(format!(
                "blocks {asked} of a model of {n_layer} blocks"
            )));
        }
        if split == 0 || split == n_layer {
            let empty = if split == 0 { "box" } else { "head" };
            return Err(Error::BadStage(format!(
                "a split at block {split} of {n_layer} leaves the {empty} no blocks"
            )));
        }
        Ok(Stage {
            layers: if embed { 0..split } else { split..n_layer },
            embed,
            head: !embed,
        })
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
        self.matrix_of(name, info, n_rows, n_cols)
    }

    fn matrix_of(
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
        })
    }

    /// The `n_expert` slabs of `n_rows` rows of `n_cols` of a 3-D expert tensor.
    pub fn experts(
        &self,
        name: &str,
        n_expert: usize,
        n_rows: usize,
        n_cols: usize,
    ) -> Result<Vec<Weight>> {
        let info = self.info(name, &[n_cols as u64, n_rows as u64, n_expert as u64])?;
        let all = self.matrix_of(name, info, n_expert * n_rows, n_cols)?;
        Ok(split_rows(&all, &vec![n_rows; n_expert]))
    }

    /// A matrix of `parts.iter().sum()` rows of `n_cols`, as consecutive slices of
    /// `parts[i]` rows each (named `name[i]`).
    fn row_parts(&self, name: &str, parts: &[usize], n_cols: usize) -> Result<Vec<Weight>> {
        let all = self.matrix(name, parts.iter().sum(), n_cols)?;
        Ok(split_rows(&all, parts))
    }

    /// Block `il`'s query, key and value matrices: `attn_{q,k,v}`, or the rows of one
    /// `attn_qkv` where the file has it (as llama.cpp accepts for any architecture).
    fn qkv(&self, il: usize, q: usize, kv: usize, e: usize) -> Result<[Weight; 3]> {
        let n = |s: &str| format!("blk.{il}.attn_{s}.weight");
        if self.file.header.tensor(&n("qkv")).is_some() {
            let parts = self.row_parts(&n("qkv"), &[q, kv, kv], e)?;
            return Ok(parts.try_into().expect("three parts"));
        }
        Ok([
            self.matrix(&n("q"), q, e)?,
            self.matrix(&n("k"), kv, e)?,
            self.matrix(&n("v"), kv, e)?,
        ])
    }

    /// A SwiGLU network of width `n_ff` from `ffn_{gate,up,down}{suffix}` of block `il`;
    /// `fused`: the gate is the first `n_ff` rows of `ffn_up{suffix}`, the up the rest.
    fn mlp(&self, il: usize, suffix: &str, e: usize, n_ff: usize, fused: bool) -> Result<Mlp> {
        let n = |s: &str| format!("blk.{il}.ffn_{s}{suffix}.weight");
        let [gate, up] = match fused {
            true => {
                let parts = self.row_parts(&n("up"), &[n_ff, n_ff], e)?;
                parts.try_into().expect("two parts")
            }
            false => [
                self.matrix(&n("gate"), n_ff, e)?,
                self.matrix(&n("up"), n_ff, e)?,
            ],
        };
        Ok(Mlp {
            gate,
            up,
            down: self.matrix(&n("down"), e, n_ff)?,
        })
    }

    fn ffn(&self, hp: &HParams, il: usize) -> Result<Ffn> {
        let e = hp.n_embd;
        let moe = match &hp.moe {
            Some(moe) if hp.is_moe_layer(il) => moe,
            _ => {
                let fused = hp.arch.spec().fused_gate_up;
                return Ok(Ffn::Dense(self.mlp(il, "", e, hp.n_ff, fused)?));
            }
        };
        let n = |s: &str| format!("blk.{il}.{s}.weight");
        let (ne, ff) = (moe.n_expert, moe.n_ff_exp);
        let shared = moe
            .shared
            .map(|sh| self.mlp(il, "_shexp", e, sh.n_ff, false))
            .transpose()?;
        let gated = moe.shared.is_some_and(|sh| sh.gated);
        Ok(Ffn::Moe(MoeWeights {
            ffn_gate_inp: self.matrix(&n("ffn_gate_inp"), ne, e)?,
            ffn_gate_exps: self.experts(&n("ffn_gate_exps"), ne, ff, e)?,
            ffn_up_exps: self.experts(&n("ffn_up_exps"), ne, ff, e)?,
            ffn_down_exps: self.experts(&n("ffn_down_exps"), ne, e, ff)?,
            shared,
            ffn_gate_inp_shexp: self.opt_vector(&n("ffn_gate_inp_shexp"), e, gated)?,
        }))
    }

    /// A vector of `n` values, converted to f32.
    pub fn vector(&self, name: &str, n: usize) -> Result<Vec<f32>> {
        let info = self.info(name, &[n as u64])?;
        let mut out = vec![0f32; n];
        device::formats::dequantize_row(info.ggml_type, self.file.tensor_bytes(info), &mut out)
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

    /// The weights of `stage` (made by [`Part::stage`]); nothing else is read.
    pub fn load(&self, hp: &HParams, stage: &Stage) -> Result<Weights> {
        let spec = hp.arch.spec();
        let (e, q, kv) = (hp.n_embd, hp.q_dim(), hp.kv_dim());
        for t in ["rope_factors_long.weight", "rope_factors_short.weight"] {
            if self.file.header.tensor(t).is_some() {
                return Err(Error::UnsupportedTensor {
                    tensor: t.to_string(),
                    what: "LongRoPE's frequency factors",
                });
            }
        }
        let embd = || self.matrix("token_embd.weight", hp.n_vocab, e);
        let token_embd = stage.embed.then(embd).transpose()?;
        let output = match (stage.head, self.file.header.tensor("output.weight")) {
            (false, _) => None,
            (true, Some(_)) => Some(self.matrix("output.weight", hp.n_vocab, e)?),
            (true, None) => Some(embd()?),
        };
        let layers = stage
            .layers
            .clone()
            .map(|i| {
                let n = |s: &str| format!("blk.{i}.{s}");
                let [attn_q, attn_k, attn_v] = self.qkv(i, q, kv, e)?;
                Ok(LayerWeights {
                    attn_norm: self.vector(&n("attn_norm.weight"), e)?,
                    attn_q,
                    attn_k,
                    attn_v,
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
                    post_attn_norm: self.opt_vector(
                        &n("post_attention_norm.weight"),
                        e,
                        spec.post_norms,
                    )?,
                    ffn_norm: self.vector(&n("ffn_norm.weight"), e)?,
                    ffn: self.ffn(hp, i)?,
                    post_ffn_norm: self.opt_vector(
                        &n("post_ffw_norm.weight"),
                        e,
                        spec.post_norms,
                    )?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Weights {
            token_embd,
            layers,
            output_norm: stage
                .head
                .then(|| self.vector("output_norm.weight", e))
                .transpose()?,
            output,
        })
    }
}
