//! Recipes: one file per architecture, each owning its hyper-parameters (the shared
//! reading directed by its [`Traits`], and what is its own), its tensors (each named once,
//! where its block loads them) and its forward (a [`Layer`] built from the pieces of
//! [`crate::layers`] or its own). Adding an architecture is its file and one line of
//! [`RECIPES`].

mod deepseek4;
mod dflash;
mod eagle3;
mod gemma3;
mod llama;
mod nemotron_h;
mod phi3;
mod pre_norm;
mod qwen2;
mod qwen2moe;
mod qwen3;
mod qwen35;
mod qwen3moe;
#[cfg(feature = "testing")]
mod toyconv;

use device::Op;
use gguf::Metadata;

use crate::error::{Error, Result};
use crate::hparams::{HParams, Traits};
use crate::layers::fuse::Fuse;
use crate::layers::{DraftHead, Layer};
use crate::tensors::TensorLoader;

/// An architecture: how its files are read and its blocks run.
pub trait Recipe: Sync {
    /// `general.architecture`, and the prefix of its metadata keys.
    fn name(&self) -> &'static str;

    /// What the shared reading of hyper-parameters needs to know of it.
    fn traits(&self) -> Traits;

    /// The hyper-parameters of a file of this architecture.
    fn hparams(&self, md: &Metadata) -> Result<HParams> {
        HParams::read(md, self.name(), &self.traits())
    }

    /// Block `il`'s tensors, each checked and recorded through `t`, as the layer that runs
    /// them.
    fn layer(&self, t: &mut TensorLoader, hp: &HParams, il: usize) -> Result<Box<dyn Layer>>;

    /// Multi-token-prediction block `il` (past the `n_layer` blocks: [`crate::Part::Nextn`])
    /// as the layer that runs it; an error for a recipe that does not run its NextN blocks.
    fn nextn(&self, _t: &mut TensorLoader, _hp: &HParams, il: usize) -> Result<Box<dyn Layer>> {
        Err(Error::BadStage(format!(
            "{}: multi-token-prediction block {il} is not run by this version",
            self.name()
        )))
    }

    /// How a drafter of a target's features ([`crate::Part::Drafter`]) fuses them into
    /// its rows' hidden states, its tensors loaded through `t`; an error for a recipe that
    /// is no such drafter.
    fn fuse(&self, _t: &mut TensorLoader, _hp: &HParams) -> Result<Fuse> {
        Err(Error::BadStage(format!(
            "{} is not a drafter of a target's features",
            self.name()
        )))
    }

    /// What a block drafter computes over its block's logits (DSpark's heads, DFlash 2's
    /// selector), loaded through `t`, its output head having `n_logits` rows; `None` where
    /// it has nothing.
    fn draft_head(
        &self,
        _t: &mut TensorLoader,
        _hp: &HParams,
        _n_logits: usize,
    ) -> Result<Option<DraftHead>> {
        Ok(None)
    }

    /// Whether its drafter stage embeds its rows' tokens itself (a block drafter's block
    /// enters as tokens) rather than in its first block (EAGLE-3).
    fn drafter_embeds(&self) -> bool {
        false
    }

    /// Whether rows entering as fused features ([`crate::Part::Drafter`]) only give the
    /// blocks' memory its context ([`Layer::inject`]: a block drafter's), rather than being
    /// computed through the blocks.
    fn injects_features(&self) -> bool {
        false
    }

    /// What merges the residual streams of an architecture with several
    /// ([`HParams::streams`]) into one `[rows, n_embd]` before the output norm, its tensors
    /// loaded through `t`; `None` for a plain residual.
    fn merge(&self, _t: &mut TensorLoader, _hp: &HParams) -> Result<Option<Box<dyn Layer>>> {
        Ok(None)
    }

    /// Device ops its blocks use besides those every model needs.
    fn extra_ops(&self) -> &'static [Op] {
        &[]
    }
}

/// Every architecture tandem runs.
pub static RECIPES: &[&dyn Recipe] = &[
    &llama::RECIPE,
    &qwen2::RECIPE,
    &qwen2moe::RECIPE,
    &qwen3::RECIPE,
    &qwen3moe::RECIPE,
    &qwen35::QWEN35,
    &qwen35::QWEN35MOE,
    &gemma3::Gemma3,
    &deepseek4::DeepSeek4,
    &phi3::RECIPE,
    &nemotron_h::NEMOTRON_H,
    &nemotron_h::NEMOTRON_H_MOE,
    &eagle3::Eagle3,
    &dflash::Dflash,
];

/// Architectures for tests of the seams (feature `testing`), never in a user's build.
#[cfg(feature = "testing")]
static TEST_RECIPES: &[&dyn Recipe] = &[&toyconv::ToyConv];
#[cfg(not(feature = "testing"))]
static TEST_RECIPES: &[&dyn Recipe] = &[];

/// An architecture tandem runs: a handle to its recipe, compared by name.
#[derive(Clone, Copy)]
pub struct Arch(&'static dyn Recipe);

impl Arch {
    /// The architecture named by `general.architecture`.
    pub fn from_name(name: &str) -> Result<Arch> {
        RECIPES
            .iter()
            .chain(TEST_RECIPES)
            .find(|r| r.name() == name)
            .map(|&r| Arch(r))
            .ok_or_else(|| Error::UnknownArch {
                name: name.to_string(),
                known: RECIPES
                    .iter()
                    .map(|r| r.name())
                    .collect::<Vec<_>>()
                    .join(", "),
            })
    }

    /// The prefix of this architecture's metadata keys.
    pub fn name(self) -> &'static str {
        self.0.name()
    }

    pub fn recipe(self) -> &'static dyn Recipe {
        self.0
    }
}

impl PartialEq for Arch {
    fn eq(&self, other: &Arch) -> bool {
        self.name() == other.name()
    }
}

impl std::fmt::Debug for Arch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}
