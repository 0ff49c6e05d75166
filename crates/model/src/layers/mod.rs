//! The pieces blocks are made of, written once for every architecture against the
//! [`device::Device`] ops, and the [`Layer`] seam through which the model runs a block
//! whatever its recipe. A piece loads its own tensors (naming each once, by its GGUF name)
//! and runs its own forward.

pub mod attention;
pub mod ffn;
pub mod fuse;
pub mod gated_attention;
pub mod gated_delta_net;
pub mod hyper;
pub mod mamba2;
pub mod markov;
pub mod nextn;
pub mod pre_norm;
pub mod selector;
pub mod sparse_attention;

use device::{Buf, Device};

use crate::hparams::HParams;
use crate::scratch::Scratch;
use crate::tensors::DeviceTensors;

/// What a block drafter computes over its block's logits before they become drafts.
pub enum DraftHead {
    /// DSpark's Markov (and confidence) heads.
    Markov(markov::MarkovHead),
    /// DFlash 2's selector.
    Selector(selector::Selector),
}

impl DraftHead {
    /// Whether it reads each drafted row's state after the output norm (a confidence
    /// head's, the selector's gate) besides its logits.
    pub fn reads_states(&self) -> bool {
        match self {
            DraftHead::Markov(m) => m.has_confidence(),
            DraftHead::Selector(_) => true,
        }
    }

    /// Whether the states it reads are taken before the output norm (the streams merged),
    /// not after it.
    pub fn reads_before_norm(&self) -> bool {
        match self {
            DraftHead::Markov(m) => m.reads_before_norm(),
            DraftHead::Selector(_) => false,
        }
    }
}

/// What a block's forward reads besides its own tensor ids.
pub struct Cx<'a> {
    pub hp: &'a HParams,
    /// The stage's tensors on the device.
    pub t: &'a DeviceTensors,
    pub s: &'a Scratch,
    /// The block's index in the model.
    pub il: usize,
    /// The block's index in the device's KV pool, which holds the stage's blocks only.
    pub kv_layer: usize,
    /// The tokens of the step's rows, where the stage embedded them (`None` for the
    /// blocks after a split, which receive hidden states).
    pub tokens: Option<&'a [u32]>,
}

/// What a block keeps of each sequence between forwards.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LayerMemory {
    /// Keys and values of every position in the paged pool, or of the last `window`
    /// positions.
    Paged { window: Option<usize> },
    /// A recurrent state of `floats` values per sequence, whatever its length.
    State { floats: usize },
    /// A record of every position ([`device::records`]): its recent part read by the
    /// `lookback` positions from it (itself included), and its kept part.
    Records {
        record: kv::RecordKv,
        lookback: usize,
    },
    /// Nothing: a block that reads no earlier position (a feed-forward network alone).
    Nothing,
}

impl LayerMemory {
    /// The positions back from the newest it reads in the pool's windowed class of blocks:
    /// a window's, a record layer's recent part; `None` for the others.
    pub fn lookback(&self) -> Option<usize> {
        match self {
            LayerMemory::Paged { window } => *window,
            LayerMemory::Records { lookback, .. } => Some(*lookback),
            LayerMemory::State { .. } | LayerMemory::Nothing => None,
        }
    }
}

/// One block of a model, its tensors loaded: the unit a recipe makes and the model runs.
pub trait Layer: Send + Sync {
    /// What block `il` keeps of each sequence: by default, attention's keys and values.
    fn memory(&self, hp: &HParams, il: usize) -> LayerMemory {
        LayerMemory::Paged {
            window: hp.window(il),
        }
    }

    /// Floats per row of the buffers the block works in besides [`Scratch`]'s named ones:
    /// its `i`-th is [`Scratch::extra`]`[i]`, which every block shares (sized for the
    /// widest).
    fn scratch(&self) -> Vec<usize> {
        Vec::new()
    }

    /// Whether the block reads the rows' tokens ([`Cx::tokens`]): it then runs only where
    /// they are embedded (never after a split).
    fn needs_tokens(&self) -> bool {
        false
    }

    /// `hidden` (`[n, hidden_width]`) through the block, in place, for the rows of the step
    /// begun on `dev`, writing what the block keeps of each row into its memory.
    fn forward(&self, cx: &Cx<'_>, dev: &mut dyn Device, hidden: Buf, n: usize);

    /// Writes into its memory what the block keeps of `n` rows of a block drafter's
    /// context, from their fused features `g` (`[n, n_embd]`, left as it is), without
    /// computing them through ([`crate::Recipe::injects_features`]); nothing for the blocks
    /// of other recipes, which never get such rows.
    fn inject(&self, _cx: &Cx<'_>, _dev: &mut dyn Device, _g: Buf, _n: usize) {}
}
