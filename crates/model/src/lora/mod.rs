//! LoRA adapters in llama.cpp's GGUF form (`convert_lora_to_gguf.py`): `general.type`
//! `adapter`, `adapter.type` `lora`, `adapter.lora.alpha`, and for each adapted weight `W`
//! (`[n_out, n_in]`, GGUF dims `[n_in, n_out]`) a pair `W.lora_a` (`[r, n_in]`, dims
//! `[n_in, r]`) and `W.lora_b` (`[n_out, r]`, dims `[r, n_out]`). A row `x` then gets
//! `W·x + f · B·(A·x)` with `f = scale · alpha / r` (`scale` when alpha is 0), `scale` the
//! user's (per request, or the server's): llama.cpp's `build_lora_mm`. [`LoraDevice`]
//! computes it around the device's products, each row with its own sequence's scales.
//!
//! Adapted here: the weight matrices of the blocks, multiplied whole (`blk.N.attn_q`,
//! `ffn_down`, ...). A pair for anything else (the embedding table, the output head, a
//! mixture's experts, a matrix the recipe loads in parts) is a load error naming it;
//! activated LoRA (`adapter.alora.invocation_tokens`) is refused too. Norm vectors in the
//! file (`*_norm.weight`) are skipped, as llama.cpp skips them.

mod device;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use gguf::GgufFile;

pub use self::device::{LoraDevice, SharedScales};
use crate::{Error, Model, Result, Weight};

/// One adapted weight: the base matrix's name and the adapter's two factors.
#[derive(Debug, Clone)]
pub struct Pair {
    pub target: String,
    pub rank: usize,
    /// `[rank, n_in]`.
    pub a: Weight,
    /// `[n_out, rank]`.
    pub b: Weight,
}

/// A loaded adapter, checked against the model it adapts.
pub struct Adapter {
    pub path: PathBuf,
    /// The user's scale for sequences that give none ([`super::Model::add_adapter`]).
    pub scale: f32,
    pub alpha: f32,
    /// `adapter.lora.task_name` and `adapter.lora.prompt_prefix` (empty when absent).
    pub task_name: String,
    pub prompt_prefix: String,
    pub file: Arc<GgufFile>,
    pub pairs: Vec<Pair>,
}

impl Adapter {
    /// Reads the adapter at `path` and checks each pair against `model`'s matrices.
    pub fn load(path: &Path, scale: f32, model: &Model) -> Result<Adapter> {
        let bad = |what: String| Error::BadAdapter {
            path: path.display().to_string(),
            what,
        };
        let file = GgufFile::open(path)?;
        let md = &file.header.metadata;
        let text = |key: &str| md.opt_str(key).map(|v| v.unwrap_or_default().to_string());
        if text("general.type")? != "adapter" || text("adapter.type")? != "lora" {
            return Err(bad(
                "not a LoRA adapter (general.type 'adapter', adapter.type 'lora')".into(),
            ));
        }
        let arch = text("general.architecture")?;
        if arch != model.arch.name() {
            return Err(bad(format!(
                "an adapter for '{arch}', not for this {} model",
                model.arch.name()
            )));
        }
        if md.get("adapter.alora.invocation_tokens").is_some() {
            return Err(bad("activated LoRA (aLoRA) is not supported".into()));
        }
        let mut pairs: Vec<Pair> = Vec::new();
        for info in &file.header.tensors {
            let name = info.name.as_str();
            let Some((target, half)) = name
                .strip_suffix(".lora_a")
                .map(|t| (t, 0))
                .or_else(|| name.strip_suffix(".lora_b").map(|t| (t, 1)))
            else {
                if name.ends_with("_norm.weight") {
                    continue;
                }
                return Err(bad(format!(
                    "tensor '{name}' is neither a .lora_a nor a .lora_b"
                )));
            };
            let base = model
                .tensors
                .iter()
                .map(|(_, m)| m)
                .find(|m| m.weight.name == target && m.role == ::device::Role::Multiply)
                .filter(|_| target.starts_with("blk."))
                .ok_or_else(|| Error::UnsupportedTensor {
                    tensor: name.to_string(),
                    what: "LoRA on a tensor other than a block's whole weight matrix",
                })?;
            let (n_out, n_in) = (base.weight.n_rows, base.weight.n_cols);
            let rank = match (half, info.dims.as_slice()) {
                (0, &[cols, r]) if cols as usize == n_in => r as usize,
                (1, &[r, rows]) if rows as usize == n_out => r as usize,
                _ => {
                    let want = if half == 0 { "[n_in, r]" } else { "[r, n_out]" };
                    return Err(bad(format!(
                        "tensor '{name}' has dims {:?}, expected {want} with n_in {n_in} and \
                         n_out {n_out} of '{target}'",
                        info.dims
                    )));
                }
            };
            let range = |i: &gguf::TensorInfo| {
                let start = (file.header.data_offset + i.offset) as usize;
                start..start + i.n_bytes as usize
            };
            let weight = Weight {
                name: name.to_string(),
                ty: info.ggml_type,
                range: range(info),
                n_rows: if half == 0 { rank } else { n_out },
                n_cols: if half == 0 { n_in } else { rank },
                borrowed: false,
            };
            match pairs.iter_mut().find(|p| p.target == target) {
                Some(p) if p.rank != rank => {
                    return Err(bad(format!(
                        "'{target}': lora_a and lora_b disagree on the rank ({} and {rank})",
                        p.rank
                    )))
                }
                Some(p) if half == 0 => p.a = weight,
                Some(p) => p.b = weight,
                None => pairs.push(Pair {
                    target: target.to_string(),
                    rank,
                    a: weight.clone(),
                    b: weight,
                }),
            }
        }
        for p in &pairs {
            if p.a.name == p.b.name {
                return Err(bad(format!(
                    "'{}' has only one of its two factors",
                    p.target
                )));
            }
        }
        if pairs.is_empty() {
            return Err(bad("it adapts no tensor".into()));
        }
        Ok(Adapter {
            path: path.to_path_buf(),
            scale,
            alpha: md.opt_f32("adapter.lora.alpha")?.unwrap_or(0.0),
            task_name: text("adapter.lora.task_name")?,
            prompt_prefix: text("adapter.lora.prompt_prefix")?,
            file: Arc::new(file),
            pairs,
        })
    }

    /// What a row's `B·(A·x)` is multiplied by for a pair of rank `rank` at the user's
    /// `scale`.
    pub fn factor(&self, rank: usize, scale: f32) -> f32 {
        if self.alpha == 0.0 {
            scale
        } else {
            scale * self.alpha / rank as f32
        }
    }
}
