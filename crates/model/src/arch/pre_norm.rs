//! The recipe of the architectures whose every block is the pre-norm block
//! ([`PreNorm`]): each is its name, its [`Traits`] and how its blocks store their tensors.

use super::Recipe;
use crate::error::Result;
use crate::hparams::{HParams, Traits};
use crate::layers::pre_norm::{PreNorm, PreNormKind};
use crate::layers::Layer;
use crate::tensors::TensorLoader;

/// See the module doc.
pub struct PreNormRecipe {
    pub name: &'static str,
    pub traits: Traits,
    pub kind: PreNormKind,
}

impl Recipe for PreNormRecipe {
    fn name(&self) -> &'static str {
        self.name
    }

    fn traits(&self) -> Traits {
        self.traits
    }

    fn layer(&self, t: &mut TensorLoader, hp: &HParams, il: usize) -> Result<Box<dyn Layer>> {
        Ok(Box::new(PreNorm::load(t, hp, il, self.kind)?))
    }
}
