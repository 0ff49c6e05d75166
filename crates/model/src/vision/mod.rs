//! Vision towers: mmproj (clip) GGUF files as llama.cpp's mtmd reads them, an image made
//! into the tower's pixels ([`preprocess`]) and encoded into embeddings that enter a
//! language model in place of token embeddings ([`Tower`]).
//!
//! ```text
//! Rgb ──fit_square, patches──▶ [n_patches, 3·p²] ──Tower::encode──▶ [n_tokens, n_embd_out]
//! ```
//!
//! Projectors run: `gemma3` (SigLIP, average-pooled by `n_merge`, RMS-normed, projected)
//! and `mlp` (LLaVA 1.5: CLIP with a class embedding, its second-to-last block's states
//! through two matrices). Any other is refused at load, naming it.

mod decode;
pub mod preprocess;
mod tower;

use device::encoder::Act;
use gguf::Metadata;

pub use decode::{decode, ImageError, Limits};
pub use preprocess::{Filter, Rgb};
pub use tower::Tower;

use crate::{Error, Result};

/// A tower's projector: what follows the ViT, and how images are made and placed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Projector {
    /// Gemma 3: the image resized into a square with black bands, `(side / n_merge)²`
    /// embeddings between `<start_of_image>` and `<end_of_image>`, attended bidirectionally
    /// by the language model.
    Gemma3,
    /// LLaVA 1.5's two-matrix MLP: the image resized (bicubic) into a square with grey
    /// bands, an embedding per patch, placed as they are, attended causally.
    Mlp,
}

impl Projector {
    fn parse(name: &str) -> Result<Projector> {
        match name {
            "gemma3" => Ok(Projector::Gemma3),
            "mlp" => Ok(Projector::Mlp),
            _ => Err(Error::BadHParam {
                key: "clip.projector_type".into(),
                problem: format!(
                    "projector '{name}' is not supported yet (supported: gemma3, mlp)"
                ),
            }),
        }
    }

    /// The text before and after an image's embeddings.
    pub fn markers(self) -> (&'static str, &'static str) {
        match self {
            Projector::Gemma3 => ("<start_of_image>", "<end_of_image>"),
            Projector::Mlp => ("", ""),
        }
    }

    /// Whether an image's embeddings see one another in the language model (not only the
    /// earlier ones).
    pub fn bidirectional(self) -> bool {
        match self {
            Projector::Gemma3 => true,
            Projector::Mlp => false,
        }
    }
}

/// A vision tower's hyper-parameters (`clip.vision.*`).
#[derive(Debug, Clone, PartialEq)]
pub struct ClipParams {
    pub projector: Projector,
    pub n_embd: usize,
    pub n_head: usize,
    pub n_ff: usize,
    pub n_layer: usize,
    pub eps: f32,
    /// The square side, in pixels, an image is made.
    pub image_size: usize,
    pub patch_size: usize,
    pub mean: [f32; 3],
    pub std: [f32; 3],
    /// Patches merged per side into one embedding.
    pub n_merge: usize,
    pub filter: Filter,
    /// The bands' color where an image is fitted into the square.
    pub pad: [u8; 3],
    /// The blocks' feed-forward activation.
    pub act: Act,
    /// Blocks run: all, or all but the last (LLaVA reads the second-to-last's states).
    pub depth: usize,
}

impl ClipParams {
    pub fn read(meta: &Metadata) -> Result<ClipParams> {
        let bad = |key: &str, problem: String| Error::BadHParam {
            key: key.into(),
            problem,
        };
        if meta.opt_bool("clip.has_vision_encoder")? != Some(true) {
            return Err(bad(
                "clip.has_vision_encoder",
                "the file has no vision encoder (an audio-only or not an mmproj file)".into(),
            ));
        }
        let name = match meta.opt_str("clip.projector_type")? {
            Some(n) => n,
            None => meta.str("clip.vision.projector_type")?,
        };
        let projector = Projector::parse(name)?;
        let u = |k: &str| -> Result<usize> { Ok(meta.u32(&format!("clip.vision.{k}"))? as usize) };
        let triple = |k: &str| -> Result<[f32; 3]> {
            let key = format!("clip.vision.{k}");
            let v = meta.f32_array(&key)?;
            match v[..] {
                [a, b, c, ..] => Ok([a, b, c]),
                _ => Err(bad(&key, format!("{} values, expected 3", v.len()))),
            }
        };
        if meta.opt_bool("clip.use_silu")? == Some(true) {
            return Err(bad(
                "clip.use_silu",
                "SiLU feed-forward towers are not supported yet (GELU, quick GELU)".into(),
            ));
        }
        let act = match meta.opt_bool("clip.use_gelu")? {
            Some(true) => Act::Gelu,
            _ => Act::GeluQuick,
        };
        for key in [
            "clip.vision.image_grid_pinpoints",
            "clip.vision.feature_layer",
        ] {
            if meta.get(key).is_some() {
                return Err(bad(
                    key,
                    "tiled images (LLaVA 1.6) and chosen feature layers are not supported yet"
                        .into(),
                ));
            }
        }
        let n_layer = u("block_count")?;
        let p = ClipParams {
            projector,
            n_embd: u("embedding_length")?,
            n_head: u("attention.head_count")?,
            n_ff: u("feed_forward_length")?,
            n_layer,
            eps: meta.f32("clip.vision.attention.layer_norm_epsilon")?,
            image_size: u("image_size")?,
            patch_size: u("patch_size")?,
            mean: triple("image_mean")?,
            std: triple("image_std")?,
            n_merge: match projector {
                Projector::Gemma3 => meta
                    .opt_u32("clip.vision.projector.scale_factor")?
                    .map_or(4, |v| v as usize),
                Projector::Mlp => 1,
            },
            filter: match projector {
                Projector::Gemma3 => Filter::Bilinear,
                Projector::Mlp => Filter::Bicubic,
            },
            pad: match projector {
                Projector::Gemma3 => [0; 3],
                Projector::Mlp => [122, 116, 104],
            },
            act,
            depth: match projector {
                Projector::Gemma3 => n_layer,
                Projector::Mlp => n_layer.saturating_sub(1),
            },
        };
        if p.n_head == 0 || !p.n_embd.is_multiple_of(p.n_head) {
            return Err(bad(
                "clip.vision.attention.head_count",
                format!("{} heads do not divide {}", p.n_head, p.n_embd),
            ));
        }
        if p.patch_size == 0 || !p.image_size.is_multiple_of(p.patch_size) {
            return Err(bad(
                "clip.vision.patch_size",
                format!(
                    "{} does not divide the image size {}",
                    p.patch_size, p.image_size
                ),
            ));
        }
        if p.n_merge == 0 || !p.side().is_multiple_of(p.n_merge) {
            return Err(bad(
                "clip.vision.projector.scale_factor",
                format!(
                    "{} does not divide the {} patches per side",
                    p.n_merge,
                    p.side()
                ),
            ));
        }
        Ok(p)
    }

    /// Patches per side.
    pub fn side(&self) -> usize {
        self.image_size / self.patch_size
    }

    pub fn n_patches(&self) -> usize {
        self.side() * self.side()
    }

    /// Embeddings per image.
    pub fn n_tokens(&self) -> usize {
        (self.side() / self.n_merge).pow(2)
    }

    /// `img` as the tower's `[n_patches, 3 · patch²]` input.
    pub fn pixels(&self, img: &Rgb) -> Vec<f32> {
        let square = preprocess::fit_square(img, self.image_size, self.filter, self.pad);
        preprocess::patches(&square, self.patch_size, self.mean, self.std)
    }
}
