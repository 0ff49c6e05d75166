//! The one sampler chain used for sampling and for speculative verification alike.
//!
//! A request's logits pass, in order: the mask (a grammar's forbidden tokens, `logit_bias`,
//! end-of-generation when `ignore_eos`: [`Mask`], applied by the sequence), then the stages
//! of [`SamplerConfig::order`] (llama.cpp's default: penalties → DRY → top-k → typical →
//! top-p → min-p → temperature), then the draw. Penalties and DRY act on the whole
//! vocabulary's logits, in their order, before the stages that cut candidates. At
//! temperature 0 the draw is the argmax of the masked, penalized logits (first index wins
//! a tie) and truncating stages do not matter.
//! Every stage reads only this sequence's logits and history, so a row's token never
//! depends on its batch.

mod budget;
mod dry;
mod mask;
pub(crate) mod rng;
mod stages;

use serde::{Deserialize, Serialize};

pub use budget::{Budget, ThinkBudget};
pub use device::argmax;
pub use dry::Dry;
pub use mask::{LogitBias, Mask};
pub use rng::Rng;
pub use stages::{Named, Order, Penalties, Stage};

/// Sampling settings; the defaults are llama.cpp's.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct SamplerConfig {
    /// 0 or below: greedy.
    pub temperature: f32,
    /// 0: off.
    pub top_k: usize,
    /// 1.0: off.
    pub top_p: f32,
    /// 0.0: off.
    pub min_p: f32,
    /// Locally typical sampling; 1.0: off.
    pub typical_p: f32,
    pub penalties: Penalties,
    /// The order of the stages after the mask.
    pub order: Order,
    pub seed: u64,
}

impl Default for SamplerConfig {
    fn default() -> Self {
        SamplerConfig {
            temperature: 0.8,
            top_k: 40,
            top_p: 0.95,
            min_p: 0.05,
            typical_p: 1.0,
            penalties: Penalties::default(),
            order: Order::default(),
            seed: 0,
        }
    }
}

impl SamplerConfig {
    pub fn greedy() -> Self {
        SamplerConfig {
            temperature: 0.0,
            ..Default::default()
        }
    }
}

/// A sampler chain with its own random stream.
#[derive(Debug, Clone)]
pub struct Sampler {
    pub config: SamplerConfig,
    /// DRY, when the request asked for it.
    dry: Option<Dry>,
    rng: Rng,
    candidates: Vec<(u32, f32)>,
    /// The logits with penalties and DRY applied, when either is active.
    penalized: Vec<f32>,
}

impl Sampler {
    pub fn new(config: SamplerConfig) -> Sampler {
        Sampler {
            config,
            dry: None,
            rng: Rng::new(config.seed),
            candidates: Vec::new(),
            penalized: Vec::new(),
        }
    }

    /// This chain with DRY in its [`Stage::Dry`] place.
    pub fn with_dry(mut self, dry: Option<Dry>) -> Sampler {
        self.dry = dry;
        self
    }

    /// The final distribution of the chain over the surviving candidates, as
    /// `(token, probability)` sorted by decreasing probability (ties by token id), for
    /// `logits` (`[n_vocab]`, masked already) after the tokens `history` (the sequence so
    /// far, prompt included, as llama-server counts it for penalties). Greedy gives the
    /// argmax with probability 1.
    pub fn distribution(&mut self, logits: &[f32], history: &[u32]) -> &[(u32, f32)] {
        let c = self.config;
        let penalize = c.penalties.is_active() && c.order.has(Stage::Penalties);
        let dry = self.dry.as_ref().filter(|_| c.order.has(Stage::Dry));
        let logits = if penalize || dry.is_some() {
            self.penalized.clear();
            self.penalized.extend_from_slice(logits);
            for stage in c.order.stages() {
                match (stage, dry) {
                    (Stage::Penalties, _) if penalize => {
                        c.penalties.apply(&mut self.penalized, history)
                    }
                    (Stage::Dry, Some(d)) => d.apply(&mut self.penalized, history),
                    _ => {}
                }
            }
            &self.penalized[..]
        } else {
            logits
        };
        self.candidates.clear();
        if c.temperature <= 0.0 {
            self.candidates.push((argmax(logits), 1.0));
            return &self.candidates;
        }
        self.candidates.extend(
            logits
                .iter()
                .enumerate()
                .filter(|(_, v)| !v.is_nan() && **v != f32::NEG_INFINITY)
                .map(|(i, &v)| (i as u32, v)),
        );
        if self.candidates.is_empty() {
            self.candidates.push((argmax(logits), 1.0));
            return &self.candidates;
        }
        let mut sorted = false;
        for stage in c.order.stages() {
            let cands = &mut self.candidates;
            match stage {
                Stage::Penalties | Stage::Dry => {}
                Stage::TopK => stages::top_k(cands, c.top_k, &mut sorted),
                Stage::Typical => stages::typical(cands, c.typical_p, &mut sorted),
                Stage::TopP => stages::top_p(cands, c.top_p, &mut sorted),
                Stage::MinP => stages::min_p(cands, c.min_p, &mut sorted),
                Stage::Temperature => stages::temperature(cands, c.temperature),
            }
        }
        stages::sort(&mut self.candidates, &mut sorted);
        stages::softmax(&mut self.candidates);
        &self.candidates
    }

    /// Draws the next token.
    pub fn sample(&mut self, logits: &[f32], history: &[u32]) -> u32 {
        let u = if self.config.temperature > 0.0 {
            self.rng.next_f64()
        } else {
            0.0
        };
        self.distribution(logits, history);
        pick(&self.candidates, u)
    }

    /// The distribution the last token was drawn from or verified against.
    pub fn drawn_from(&self) -> &[(u32, f32)] {
        &self.candidates
    }

    /// Draws the next token and returns it with the distribution it was drawn from.
    pub fn sample_with_distribution(
        &mut self,
        logits: &[f32],
        history: &[u32],
    ) -> (u32, &[(u32, f32)]) {
        let t = self.sample(logits, history);
        (t, &self.candidates)
    }

    /// Verifies a draft token against this chain's distribution for `logits` after
    /// `history` (see [`crate::speculative::verify`]); `q` is the drafter's distribution,
    /// `None` for one-hot.
    pub fn verify(
        &mut self,
        logits: &[f32],
        history: &[u32],
        draft: u32,
        q: Option<&[(u32, f32)]>,
    ) -> crate::speculative::verify::Verdict {
        self.distribution(logits, history);
        crate::speculative::verify::verify(&self.candidates, draft, q, &mut self.rng)
    }
}

/// The token at cumulative probability `u` of `dist`.
fn pick(dist: &[(u32, f32)], u: f64) -> u32 {
    let mut cum = 0f64;
    for &(t, p) in dist {
        cum += p as f64;
        if u < cum {
            return t;
        }
    }
    dist.last().map_or(0, |d| d.0)
}

#[cfg(test)]
mod tests;
