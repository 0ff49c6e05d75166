//! Vision towers: mmproj (clip) GGUF files as llama.cpp's mtmd reads them, an image made
//! into the tower's pixels ([`preprocess`]) and encoded into embeddings that enter a
//! language model in place of token embeddings ([`Tower`]).
//!
//! ```text
//! Rgb ──fit, patches──▶ [n_patches, 3·p²] ──Tower::encode──▶ [n_tokens, n_embd_out]
//! ```
//!
//! Projectors run: `gemma3` (SigLIP, average-pooled by `n_merge`, RMS-normed, projected),
//! `mlp` (LLaVA 1.5: CLIP with a class embedding, its second-to-last block's states
//! through two matrices) and `idefics3` (SmolVLM: SigLIP on tiles of the image and an
//! overview, each pixel-shuffled by `n_merge` and projected). Any other is refused at load,
//! naming it. Where an image's tiles sit among text: [`layout`].

mod decode;
pub mod layout;
pub mod preprocess;
mod tower;

use device::encoder::Act;
use gguf::Metadata;

pub use decode::{decode, ImageError, Limits};
pub use layout::Piece;
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
    /// LLaVA's two-matrix MLP: the image resized (bicubic) into a square with grey bands
    /// (1.5), or with pinpoints (1.6) cut into tiles of the best-fitting pinpoint and
    /// followed by an overview; an embedding per patch, placed as they are, attended causally.
    Mlp,
    /// Idefics3 / SmolVLM: the image resized (Lanczos) to `longest_edge`, stretched to a grid
    /// of tiles, each tile and an overview of the whole pixel-shuffled (`n_merge²` patches
    /// side by side in one row) and projected by one matrix; attended causally.
    Idefics3,
}

impl Projector {
    fn parse(name: &str) -> Result<Projector> {
        match name {
            "gemma3" => Ok(Projector::Gemma3),
            "mlp" => Ok(Projector::Mlp),
            "idefics3" => Ok(Projector::Idefics3),
            _ => Err(Error::BadHParam {
                key: "clip.projector_type".into(),
                problem: format!(
                    "projector '{name}' is not supported yet (supported: gemma3, mlp, idefics3)"
                ),
            }),
        }
    }

    /// Whether an image's embeddings see one another in the language model (not only the
    /// earlier ones).
    pub fn bidirectional(self) -> bool {
        match self {
            Projector::Gemma3 => true,
            Projector::Mlp | Projector::Idefics3 => false,
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
    /// The square side, in pixels, of an image or a tile.
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
    /// Blocks run: all, or as many as `clip.vision.feature_layer` says, or all but the last
    /// (LLaVA reads the second-to-last's states).
    pub depth: usize,
    /// LLaVA 1.6: the sizes (width, height), whole tiles, an image larger than a tile is
    /// fitted into before it is cut (`clip.vision.image_grid_pinpoints`); empty for the others.
    pub pinpoints: Vec<(usize, usize)>,
    /// Idefics3 with `--image-min-tokens`/`--image-max-tokens`: the pixels an image's tiles
    /// cover at least and at most ([`ClipParams::limit_tokens`]); 0: no limit.
    pub min_pixels: usize,
    pub max_pixels: usize,
    /// Idefics3: the longer edge, in pixels, an image is resized to before it is tiled
    /// (`clip.vision.preproc_image_size`); 0 where absent (older files: the image is tiled at
    /// about its own size) and for the others.
    pub longest_edge: usize,
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
        let counts = |key: &str| -> Result<Vec<usize>> {
            match meta.get(key) {
                None => Ok(Vec::new()),
                Some(_) => meta
                    .i64_array(key)?
                    .into_iter()
                    .map(|v| usize::try_from(v).map_err(|_| bad(key, format!("{v} is negative"))))
                    .collect(),
            }
        };
        let n_layer = u("block_count")?;
        let image_size = u("image_size")?;
        let pinpoints = counts("clip.vision.image_grid_pinpoints")?;
        let key = "clip.vision.image_grid_pinpoints";
        if pinpoints.len() % 2 != 0 {
            return Err(bad(
                key,
                format!("{} values, not (width, height) pairs", pinpoints.len()),
            ));
        }
        if let Some(v) = pinpoints.iter().find(|&&v| v == 0 || v % image_size != 0) {
            return Err(bad(
                key,
                format!("{v} is not a whole number of {image_size}-pixel tiles"),
            ));
        }
        let feature_layers = counts("clip.vision.feature_layer")?;
        let key = "clip.vision.feature_layer";
        let feature_layer = match feature_layers[..] {
            [] => None,
            [l] if l <= n_layer => Some(l),
            [l] => return Err(bad(key, format!("layer {l} of {n_layer}"))),
            _ => {
                return Err(bad(
                    key,
                    "stacked feature layers (Granite vision) are not supported yet".into(),
                ))
            }
        };
        let scale_factor = meta
            .opt_u32("clip.vision.projector.scale_factor")?
            .map(|v| v as usize);
        let p = ClipParams {
            projector,
            n_embd: u("embedding_length")?,
            n_head: u("attention.head_count")?,
            n_ff: u("feed_forward_length")?,
            n_layer,
            eps: meta.f32("clip.vision.attention.layer_norm_epsilon")?,
            image_size,
            patch_size: u("patch_size")?,
            mean: triple("image_mean")?,
            std: triple("image_std")?,
            n_merge: match projector {
                Projector::Gemma3 => scale_factor.unwrap_or(4),
                Projector::Idefics3 => scale_factor.unwrap_or(1),
                Projector::Mlp => 1,
            },
            filter: match projector {
                Projector::Gemma3 => Filter::Bilinear,
                Projector::Mlp => Filter::Bicubic,
                Projector::Idefics3 => Filter::Lanczos,
            },
            pad: match projector {
                Projector::Mlp => [122, 116, 104],
                Projector::Gemma3 | Projector::Idefics3 => [0; 3],
            },
            act,
            depth: match projector {
                Projector::Mlp => feature_layer.unwrap_or(n_layer.saturating_sub(1)),
                Projector::Gemma3 | Projector::Idefics3 => n_layer,
            },
            pinpoints: match projector {
                Projector::Mlp => pinpoints.chunks(2).map(|p| (p[0], p[1])).collect(),
                Projector::Gemma3 | Projector::Idefics3 => Vec::new(),
            },
            min_pixels: 0,
            max_pixels: 0,
            longest_edge: match projector {
                Projector::Idefics3 => {
                    meta.opt_u32("clip.vision.preproc_image_size")?.unwrap_or(0) as usize
                }
                Projector::Gemma3 | Projector::Mlp => 0,
            },
        };
        if projector == Projector::Idefics3 && p.n_merge < 2 {
            return Err(bad(
                "clip.vision.projector.scale_factor",
                format!(
                    "{} (absent: 1); a pixel shuffle merges at least 2",
                    p.n_merge
                ),
            ));
        }
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

    /// Limits the embeddings an image makes to `min..=max` (llama.cpp's `--image-min-tokens`
    /// and `--image-max-tokens`, as pixels of `n_merge²` patches each) where the tower's
    /// count follows the image (Idefics3); false where it is fixed (the limits are ignored,
    /// as llama.cpp ignores them).
    pub fn limit_tokens(&mut self, min: Option<usize>, max: Option<usize>) -> bool {
        if self.projector != Projector::Idefics3 {
            return false;
        }
        let area = (self.patch_size * self.n_merge).pow(2);
        self.min_pixels = min.map_or(0, |n| n * area);
        self.max_pixels = max.map_or(0, |n| n * area);
        true
    }

    /// Patches per side.
    pub fn side(&self) -> usize {
        self.image_size / self.patch_size
    }

    pub fn n_patches(&self) -> usize {
        self.side() * self.side()
    }

    /// Embeddings per tile.
    pub fn n_tokens(&self) -> usize {
        (self.side() / self.n_merge).pow(2)
    }
}
