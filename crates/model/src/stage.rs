//! The part of a model one process holds, for a split across machines.

use crate::error::{Error, Result};

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
    /// The multi-token-prediction blocks stored after the model's own
    /// ([`crate::HParams::n_nextn`]) and the output head: a drafter whose rows enter as the
    /// target's final hidden states with their tokens ([`crate::Recipe::nextn`]).
    Nextn,
    /// A drafter of a target's features ([`crate::HParams::target`]: EAGLE-3): its blocks
    /// and output head, its rows entering as the target's features fused by the recipe's
    /// [`crate::Recipe::fuse`] (or as states of its own) with their tokens.
    Drafter,
}

impl Part {
    /// The stage of a model of `n_layer` blocks followed by `n_nextn` multi-token-prediction
    /// blocks; a split must leave blocks on both sides.
    pub fn stage(self, n_layer: usize, n_nextn: usize) -> Result<Stage> {
        let (split, embed) = match self {
            Part::Nextn if n_nextn == 0 => {
                return Err(Error::BadStage(
                    "the model file holds no multi-token-prediction (nextn) blocks".into(),
                ))
            }
            Part::Nextn => {
                return Ok(Stage {
                    layers: n_layer..n_layer + n_nextn,
                    embed: false,
                    head: true,
                })
            }
            Part::Drafter => {
                return Ok(Stage {
                    layers: 0..n_layer,
                    embed: false,
                    head: true,
                })
            }
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
