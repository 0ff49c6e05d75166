//! Speculative decoding: drafters behind one [`Proposer`] trait, exact verification, and
//! the policy that chooses how deep each slot drafts.
//!
//! A step for a slot past its prompt computes the token sampled last plus the draft
//! tokens: rows `[t, d1, .., dk]` at positions `p..=p+k`. Row `i`'s logits verify `d(i+1)`;
//! the first rejected draft is replaced by the verifier's own token, and when all `k` are
//! accepted row `k` gives a bonus token. The KV of rows past the first rejection is rolled
//! back. Because every kernel is batch-invariant, at temperature 0 the text is
//! byte-identical to plain decoding.

mod block;
mod draft_model;
mod estimates;
mod hidden;
mod kept;
mod ngram;
mod pick;
pub mod policy;
mod scripted;
mod target_states;
pub mod verify;
pub mod vocab;

pub use block::BlockDrafter;
pub use draft_model::DraftModel;
pub use hidden::HiddenDrafter;
pub use ngram::Ngram;
pub use policy::{Policy, PolicyKind};
pub use scripted::Scripted;

use std::time::Duration;

use model::Model;

use crate::backend::Threads;
use crate::{ContextConfig, Result, SamplerConfig};

/// One slot's request for drafts in this step.
#[derive(Debug, Clone, Copy)]
pub struct DraftJob<'a> {
    pub slot: usize,
    /// The sequence so far: prompt, accepted output, and last the token sampled most
    /// recently (not yet computed by the target).
    pub tokens: &'a [u32],
    /// Draft at most this many tokens (at least 1).
    pub n_max: usize,
    /// The request's sampler chain; a drafter that samples gives its final distribution.
    pub sampling: SamplerConfig,
    /// Stop drafting after a token whose draft probability is below this.
    pub p_min: f32,
}

/// Tokens proposed for one slot, with what verification needs to know about each.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Draft {
    pub tokens: Vec<u32>,
    /// The drafter's final distribution for each token, as `(token, probability)`; empty
    /// when the drafter is deterministic (a one-hot distribution on the token).
    pub q: Vec<Vec<(u32, f32)>>,
    /// The drafter's probability of each token (1 for a deterministic drafter).
    pub confidence: Vec<f32>,
}

impl Draft {
    pub fn clear(&mut self) {
        self.tokens.clear();
        self.q.clear();
        self.confidence.clear();
    }

    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }

    /// Keeps the first `n` tokens.
    pub fn truncate(&mut self, n: usize) {
        self.tokens.truncate(n);
        self.q.truncate(n);
        self.confidence.truncate(n);
    }

    /// The drafter's distribution for token `i`: `None` for one-hot.
    pub fn q(&self, i: usize) -> Option<&[(u32, f32)]> {
        self.q.get(i).map(Vec::as_slice).filter(|q| !q.is_empty())
    }
}

/// What a drafter's forwards took in one [`Proposer::propose`] call.
#[derive(Debug, Clone, Default)]
pub struct DraftLog {
    /// `(slots, time)` of each forward that computed exactly one row per drafting slot.
    pub steps: Vec<(usize, Duration)>,
    /// Time of the forwards that computed rows for tokens the drafter had missed (beyond
    /// one row per slot; the first draft row of each slot is in them too).
    pub catch_up: Duration,
}

/// A source of draft tokens. The engine calls it once per step for all drafting slots
/// and never asks which kind of drafter it is.
///
/// Contract: `propose` fills `out[i]` (cleared by the caller) with at most `jobs[i].n_max`
/// tokens for `jobs[i]`; it may give fewer, or none. A drafter that keeps per-slot state
/// (a KV cache) finds its place by comparing `jobs[i].tokens` with what it has seen, so
/// rejected drafts need no separate rollback call; `release` tells it that a slot's
/// sequence ended (it may keep what it computed as a prefix for the slot's next one). A
/// drafter that runs forwards reports them in `log`, so that the policy learns
/// what a draft step costs apart from catching up on tokens the drafter had not seen.
pub trait Proposer: Send {
    /// A short name for logs and metrics.
    fn name(&self) -> &str;
    fn propose(&mut self, jobs: &[DraftJob], out: &mut [Draft], log: &mut DraftLog) -> Result<()>;
    fn release(&mut self, slot: usize);
    /// Tokens of `tokens` the drafter would have to compute before drafting for `slot`
    /// (a draft model that has not seen them); 0 for a drafter without state.
    fn behind(&self, _slot: usize, _tokens: &[u32]) -> usize {
        0
    }
    /// How many tokens, at most `n_max`, `propose` would give for `tokens` now: a drafter
    /// that looks its drafts up knows without computing anything, so that the policy
    /// weighs (and probes with) only drafts that exist; a drafter that computes its drafts
    /// answers `n_max`.
    fn offers(&self, _slot: usize, _tokens: &[u32], n_max: usize) -> usize {
        n_max
    }
    /// Whether a draft of any depth is one forward of the drafter (a block drafter's), so
    /// that the policy charges a draft step, not one per draft token.
    fn drafts_blocks(&self) -> bool {
        false
    }
    /// Whether a draft's [`Draft::confidence`] is each position's probability of being
    /// accepted when the ones before it are (a trained confidence head's), so that the
    /// policy may cut a draft where the rest would not pay ([`Policy::trim`]).
    fn confident(&self) -> bool {
        false
    }
    /// What the drafter reads of the target's rows: where not empty, the engine hands it,
    /// for every row the target computes of a generating slot, [`Proposer::observe_state`].
    fn features(&self) -> Features {
        Features::default()
    }
    /// The target computed position `pos` of slot `slot`'s sequence; `state` holds the
    /// row's [`Proposer::features`] one after another ([`Features::width`]). A slot's rows come
    /// in order; a position seen again replaces what followed it (a rejected draft's rows,
    /// a new request).
    fn observe_state(&mut self, _slot: usize, _pos: usize, _state: &[f32]) {}
}

/// The target's hidden states a drafter reads of each row, in this order: the state after
/// each block of `taps` (ascending, blocks of the target's stage: EAGLE-3's and DFlash's
/// features, the streams DeepSeek-V4's MTP enters), then, with `last`, the state after the
/// output norm (MTP's).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Features {
    pub taps: Vec<usize>,
    pub last: bool,
}

impl Features {
    /// How many states a row's features hold.
    pub fn parts(&self) -> usize {
        self.taps.len() + self.last as usize
    }

    /// Floats of a row's features for a target whose hidden state between blocks is
    /// `hidden` wide ([`model::HParams::hidden_width`]: each tap's) and whose normed state
    /// is `n_embd` wide (the last's).
    pub fn width(&self, hidden: usize, n_embd: usize) -> usize {
        self.taps.len() * hidden + self.last as usize * n_embd
    }
}

/// What the policy works with, as of a snapshot: measured at start, refreshed while
/// serving.
#[derive(Debug, Clone, PartialEq)]
pub struct SpecCosts {
    pub drafter: String,
    /// Index `r`: milliseconds of a target forward (output head included) of `r + 1` rows.
    pub target_ms: Vec<f64>,
    /// Index `s`: milliseconds of one draft step over `s + 1` slots.
    pub draft_ms: Vec<f64>,
    /// Milliseconds per token the drafter spends catching up.
    pub catch_up_ms: f64,
    /// Expected acceptance at each draft position, over all slots.
    pub acceptance: Vec<f64>,
}

/// Speculation settings of an engine.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SpecConfig {
    /// Draft at most this many tokens per slot and step (--spec-draft-n-max).
    pub n_max: usize,
    /// Draft at least this many whenever drafting (--spec-draft-n-min).
    pub n_min: usize,
    /// Stop a draft at a token the drafter gives less than this probability.
    pub p_min: f32,
    pub policy: PolicyKind,
}

impl Default for SpecConfig {
    fn default() -> Self {
        SpecConfig {
            n_max: 8,
            n_min: 0,
            p_min: 0.0,
            policy: PolicyKind::Adaptive,
        }
    }
}

/// What a drafter is built with, inside the engine at start.
pub struct ProposerEnv {
    /// The engine's threads (a drafter runs on them between target forwards).
    pub pool: Threads,
    /// The target's context sizes: a draft model's KV pool holds as many positions.
    pub context: ContextConfig,
    pub n_slots: usize,
}

/// Builds the drafter once the engine's threads exist.
pub type MakeProposer = Box<dyn FnOnce(&ProposerEnv) -> Result<Box<dyn Proposer>> + Send>;

/// A drafter with its settings, handed to the engine at start.
pub struct Speculation {
    pub make: MakeProposer,
    pub config: SpecConfig,
}

impl Speculation {
    /// A draft model of the target's vocabulary (the caller checks the vocabularies).
    pub fn draft_model(model: Model, config: SpecConfig) -> Self {
        Speculation {
            make: Box::new(move |env: &ProposerEnv| {
                let p = DraftModel::new(model, env.context, env.n_slots, env.pool.clone())?;
                Ok(Box::new(p) as Box<dyn Proposer>)
            }),
            config,
        }
    }

    /// The target's multi-token-prediction blocks (`model`: its [`model::Part::Nextn`]
    /// stage).
    pub fn mtp(model: Model, config: SpecConfig) -> Self {
        Speculation {
            make: Box::new(move |env: &ProposerEnv| {
                let p = HiddenDrafter::nextn(model, env.context, env.n_slots, env.pool.clone())?;
                Ok(Box::new(p) as Box<dyn Proposer>)
            }),
            config,
        }
    }

    /// An EAGLE-3 drafter (`model`: its [`model::Part::Drafter`] stage) of the target's
    /// features.
    pub fn eagle3(model: Model, config: SpecConfig) -> Self {
        Speculation {
            make: Box::new(move |env: &ProposerEnv| {
                let p = HiddenDrafter::eagle3(model, env.context, env.n_slots, env.pool.clone())?;
                Ok(Box::new(p) as Box<dyn Proposer>)
            }),
            config,
        }
    }

    /// A DFlash block drafter (`model`: its [`model::Part::Drafter`] stage) of the target's
    /// features.
    pub fn dflash(model: Model, config: SpecConfig) -> Self {
        Speculation {
            make: Box::new(move |env: &ProposerEnv| {
                let p = BlockDrafter::dflash(model, env.context, env.n_slots, env.pool.clone())?;
                Ok(Box::new(p) as Box<dyn Proposer>)
            }),
            config,
        }
    }

    /// Any drafter built without the engine's threads (n-gram, scripted).
    pub fn with(proposer: impl Proposer + 'static, config: SpecConfig) -> Self {
        Speculation {
            make: Box::new(move |_: &ProposerEnv| Ok(Box::new(proposer) as Box<dyn Proposer>)),
            config,
        }
    }
}
