//! The chain's first stage: what a request forbids or favours before any sampling.

use std::time::{Duration, Instant};

use text::{Constraint, GrammarError};

use super::Budget;

/// `logit_bias`: `(token, bias)` added to the token's logit; a bias of −∞ bans the token.
pub type LogitBias = Vec<(u32, f32)>;

/// The mask of one sequence, applied to each of its rows' logits in place, in this order:
/// the grammar's forbidden tokens to −∞, the biases added, end-of-generation tokens to −∞
/// when banned, every token but the forced one to −∞ while a reasoning budget forces. A token at −∞ is never sampled and a draft token at −∞ is always rejected.
#[derive(Debug, Clone, Default)]
pub struct Mask {
    pub constraint: Option<Box<Constraint>>,
    pub bias: LogitBias,
    /// `ignore_eos`: end-of-generation tokens are never sampled.
    pub ban_eog: bool,
    /// A reasoning budget: when spent, the end of reasoning is the only token allowed.
    pub budget: Option<Budget>,
    /// Time the grammar took so far (its masks and advancing past tokens).
    pub grammar_time: Duration,
}

impl Mask {
    /// Applies the mask to `logits` (`[n_vocab]`); `eog` are the end-of-generation ids.
    pub fn apply(&mut self, logits: &mut [f32], eog: &[u32]) -> Result<(), GrammarError> {
        if let Some(c) = &mut self.constraint {
            let t0 = Instant::now();
            c.mask(logits)?;
            self.grammar_time += t0.elapsed();
        }
        for &(t, b) in &self.bias {
            if let Some(l) = logits.get_mut(t as usize) {
                *l += b;
            }
        }
        if self.ban_eog {
            for &id in eog {
                if let Some(l) = logits.get_mut(id as usize) {
                    *l = f32::NEG_INFINITY;
                }
            }
        }
        if let Some(f) = self.budget.as_ref().and_then(Budget::forced) {
            for (t, l) in logits.iter_mut().enumerate() {
                *l = if t as u32 == f {
                    0.0
                } else {
                    f32::NEG_INFINITY
                };
            }
        }
        Ok(())
    }

    /// Advances the grammar and the reasoning budget past the emitted token `id`.
    pub fn commit(&mut self, id: u32) -> Result<(), GrammarError> {
        if let Some(b) = &mut self.budget {
            b.commit(id);
        }
        if let Some(c) = &mut self.constraint {
            let t0 = Instant::now();
            c.commit(id)?;
            self.grammar_time += t0.elapsed();
        }
        Ok(())
    }

    /// Whether the grammar is complete and allows nothing more.
    pub fn is_finished(&self) -> bool {
        self.constraint.as_ref().is_some_and(|c| c.is_finished())
    }
}
