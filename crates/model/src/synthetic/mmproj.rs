//! Random-weight vision towers (mmproj files) with the keys and tensors llama.cpp's mtmd
//! reads, for a language model `n_embd_out` wide: a SigLIP encoder with Gemma 3's projector
//! or Idefics3's (SmolVLM's) pixel shuffle, or a CLIP encoder with LLaVA 1.5's MLP.

use std::path::Path;

use gguf::{GgmlType, GgufWriter, Value, ValueType};

use super::{scale, write_file, Rng, Tensors};
use crate::{Error, Result};

/// Which tower.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TowerKind {
    /// SigLIP (GELU, no class token) with Gemma 3's pooled projection.
    Gemma3,
    /// CLIP (quick GELU, a class token, a pre-norm) with LLaVA 1.5's two-matrix MLP.
    Llava,
    /// SigLIP with Idefics3's pixel shuffle and one matrix; images tiled.
    Idefics3,
}

/// The shape of a synthetic tower.
#[derive(Debug, Clone, PartialEq)]
pub struct MmprojShape {
    pub kind: TowerKind,
    pub image_size: usize,
    pub patch_size: usize,
    pub n_embd: usize,
    pub n_head: usize,
    pub n_ff: usize,
    pub n_layer: usize,
    /// Patches merged per side (`clip.vision.projector.scale_factor`).
    pub n_merge: usize,
    /// The language model's `n_embd`.
    pub n_embd_out: usize,
    /// Idefics3: the longer edge images are resized to before tiling
    /// (`clip.vision.preproc_image_size`; 0: not written, as older files have none).
    pub longest_edge: usize,
    /// LLaVA 1.6: the sizes (width, height) images are tiled at
    /// (`clip.vision.image_grid_pinpoints`); none for LLaVA 1.5.
    pub pinpoints: Vec<(usize, usize)>,
    /// LLaVA: the block whose input the projector reads (`clip.vision.feature_layer`; none:
    /// the last block's).
    pub feature_layer: Option<usize>,
    /// Type of the blocks' matrices (F32 or F16, as converters write towers).
    pub ty: GgmlType,
    pub seed: u64,
}

impl MmprojShape {
    /// Gemma 3's geometry (896-pixel images, 14-pixel patches, 256 embeddings), narrow and
    /// shallow.
    pub fn gemma3(n_embd_out: usize) -> MmprojShape {
        MmprojShape {
            kind: TowerKind::Gemma3,
            image_size: 896,
            patch_size: 14,
            n_embd: 128,
            n_head: 4,
            n_ff: 512,
            n_layer: 2,
            n_merge: 4,
            n_embd_out,
            longest_edge: 0,
            pinpoints: Vec::new(),
            feature_layer: None,
            ty: GgmlType::F16,
            seed: 1,
        }
    }

    fn check(&self) -> Result<()> {
        let bad = |p: String| Err(Error::Synthetic(p));
        if !matches!(self.ty, GgmlType::F32 | GgmlType::F16) {
            return bad(format!(
                "a tower's matrices are f32 or f16, not {}",
                self.ty
            ));
        }
        if self.n_head == 0 || !self.n_embd.is_multiple_of(self.n_head) {
            return bad(format!(
                "{} heads do not divide {}",
                self.n_head, self.n_embd
            ));
        }
        let side = self.image_size / self.patch_size.max(1);
        if side * self.patch_size != self.image_size
            || self.n_merge == 0
            || !side.is_multiple_of(self.n_merge)
        {
            return bad(format!(
                "{}-pixel patches merged by {} do not tile {} pixels",
                self.patch_size, self.n_merge, self.image_size
            ));
        }
        if !self.pinpoints.is_empty() && self.kind != TowerKind::Llava
            || self.pinpoints.iter().any(|&(w, h)| {
                w == 0 || h == 0 || w % self.image_size != 0 || h % self.image_size != 0
            })
        {
            return bad(format!(
                "pinpoints {:?}: a LLaVA tower's, whole {}-pixel tiles",
                self.pinpoints, self.image_size
            ));
        }
        if self
            .feature_layer
            .is_some_and(|l| l > self.n_layer || self.kind != TowerKind::Llava)
        {
            return bad(format!(
                "feature layer {:?}: a LLaVA tower's, at most its {} blocks",
                self.feature_layer, self.n_layer
            ));
        }
        if self.kind == TowerKind::Idefics3 && self.n_merge < 2 {
            return bad(format!(
                "an idefics3 tower shuffles at least 2 patches a side, not {}",
                self.n_merge
            ));
        }
        Ok(())
    }

    pub fn n_params(&self) -> u64 {
        let (e, ff, p, n) = (self.n_embd, self.n_ff, self.patch_size, self.n_embd_out);
        let n_patches = (self.image_size / p).pow(2);
        let block = 4 * e * e + 2 * e * ff;
        let head = match self.kind {
            TowerKind::Gemma3 => e * n,
            TowerKind::Llava => e * n + n * n,
            TowerKind::Idefics3 => e * self.n_merge.pow(2) * n,
        };
        (3 * p * p * e + n_patches * e + self.n_layer * block + head) as u64
    }

    pub fn write(&self, path: &Path) -> Result<()> {
        self.check()?;
        let (e, ff, p, ty) = (self.n_embd, self.n_ff, self.patch_size, self.ty);
        let llava = self.kind == TowerKind::Llava;
        let mut w = GgufWriter::new();
        let s = |v: &str| Value::String(v.into());
        w.metadata("general.architecture", s("clip"));
        let (name, projector) = match self.kind {
            TowerKind::Gemma3 => ("synthetic gemma3 tower", "gemma3"),
            TowerKind::Llava => ("synthetic llava tower", "mlp"),
            TowerKind::Idefics3 => ("synthetic idefics3 tower", "idefics3"),
        };
        w.metadata("general.name", s(name));
        w.metadata("clip.projector_type", s(projector));
        w.metadata("clip.has_vision_encoder", Value::Bool(true));
        w.metadata("clip.use_gelu", Value::Bool(!llava));
        let u = |v: usize| Value::U32(v as u32);
        for (k, v) in [
            ("image_size", self.image_size),
            ("patch_size", p),
            ("embedding_length", e),
            ("feed_forward_length", ff),
            ("block_count", self.n_layer),
            ("attention.head_count", self.n_head),
            ("projection_dim", self.n_embd_out),
        ] {
            w.metadata(&format!("clip.vision.{k}"), u(v));
        }
        match self.kind {
            TowerKind::Gemma3 if self.n_merge != 4 => {
                w.metadata("clip.vision.projector.scale_factor", u(self.n_merge));
            }
            TowerKind::Idefics3 => {
                w.metadata("clip.vision.projector.scale_factor", u(self.n_merge));
                if self.longest_edge > 0 {
                    w.metadata("clip.vision.preproc_image_size", u(self.longest_edge));
                }
            }
            TowerKind::Llava => {
                let ints = |v: Vec<usize>| {
                    Value::Array(
                        ValueType::I32,
                        v.into_iter().map(|v| Value::I32(v as i32)).collect(),
                    )
                };
                if !self.pinpoints.is_empty() {
                    let flat = self.pinpoints.iter().flat_map(|&(w, h)| [w, h]).collect();
                    w.metadata("clip.vision.image_grid_pinpoints", ints(flat));
                }
                if let Some(l) = self.feature_layer {
                    w.metadata("clip.vision.feature_layer", ints(vec![l]));
                }
            }
            TowerKind::Gemma3 => {}
        }
        w.metadata("clip.vision.attention.layer_norm_epsilon", Value::F32(1e-6));
        let (mean, std) = match self.kind {
            TowerKind::Gemma3 | TowerKind::Idefics3 => ([0.5; 3], [0.5; 3]),
            TowerKind::Llava => (
                [0.481_454_66, 0.457_827_5, 0.408_210_73],
                [0.268_629_54, 0.261_302_6, 0.275_777_1],
            ),
        };
        let triple = |v: [f32; 3]| Value::Array(ValueType::F32, v.map(Value::F32).to_vec());
        w.metadata("clip.vision.image_mean", triple(mean));
        w.metadata("clip.vision.image_std", triple(std));
        let mut t = Tensors {
            w: &mut w,
            rng: Rng::new(self.seed),
        };
        // As llama.cpp's converters write them: Gemma 3's embeddings in f32 and its input
        // projection in f16; a CLIP's patch embedding in the file's type; the rest in the
        // file's type, vectors in f32.
        let embeddings_ty = if llava { ty } else { GgmlType::F32 };
        t.matrix(
            "v.patch_embd.weight",
            &[p, p, 3, e],
            embeddings_ty,
            scale(3 * p * p),
        )?;
        let n_patches = (self.image_size / p).pow(2);
        if llava {
            near(&mut t, "v.class_embd", e, 0.0, 1.0);
            near(&mut t, "v.pre_ln.weight", e, 1.0, 0.2);
            near(&mut t, "v.pre_ln.bias", e, 0.0, 0.1);
        } else {
            near(&mut t, "v.patch_embd.bias", e, 0.0, 0.1);
        }
        let n_pos = n_patches + usize::from(llava);
        t.matrix("v.position_embd.weight", &[e, n_pos], embeddings_ty, 0.5)?;
        for i in 0..self.n_layer {
            let b = format!("v.blk.{i}");
            for (name, cols, rows) in [
                ("attn_q", e, e),
                ("attn_k", e, e),
                ("attn_v", e, e),
                ("attn_out", e, e),
                ("ffn_up", e, ff),
                ("ffn_down", ff, e),
            ] {
                // Queries and keys twice as large: attention that is not near uniform.
                let a = scale(cols)
                    * if matches!(name, "attn_q" | "attn_k") {
                        2.0
                    } else {
                        1.0
                    };
                t.matrix(&format!("{b}.{name}.weight"), &[cols, rows], ty, a)?;
                near(&mut t, &format!("{b}.{name}.bias"), rows, 0.0, 0.1);
            }
            for ln in ["ln1", "ln2"] {
                near(&mut t, &format!("{b}.{ln}.weight"), e, 1.0, 0.2);
                near(&mut t, &format!("{b}.{ln}.bias"), e, 0.0, 0.1);
            }
        }
        if !llava {
            near(&mut t, "v.post_ln.weight", e, 1.0, 0.2);
            near(&mut t, "v.post_ln.bias", e, 0.0, 0.1);
        }
        match self.kind {
            TowerKind::Gemma3 => {
                near(&mut t, "mm.soft_emb_norm.weight", e, 1.0, 0.2);
                t.matrix(
                    "mm.input_projection.weight",
                    &[self.n_embd_out, e],
                    GgmlType::F16,
                    scale(e),
                )?;
            }
            TowerKind::Llava => {
                let n = self.n_embd_out;
                t.matrix("mm.0.weight", &[e, n], ty, scale(e))?;
                near(&mut t, "mm.0.bias", n, 0.0, 0.1);
                t.matrix("mm.2.weight", &[n, n], ty, scale(n))?;
                near(&mut t, "mm.2.bias", n, 0.0, 0.1);
            }
            TowerKind::Idefics3 => {
                let wide = e * self.n_merge.pow(2);
                t.matrix(
                    "mm.model.fc.weight",
                    &[wide, self.n_embd_out],
                    ty,
                    scale(wide),
                )?;
            }
        }
        write_file(&w, path)
    }
}

/// A vector of `n` values uniform in `[center - a, center + a)`.
fn near(t: &mut Tensors, name: &str, n: usize, center: f32, a: f32) {
    let v = (0..n).map(|_| center + a * t.rng.uniform()).collect();
    t.vector(name, v);
}
