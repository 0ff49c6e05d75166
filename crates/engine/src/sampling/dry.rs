//! DRY ("don't repeat yourself", p-e-w's sampler, as llama.cpp runs it): a token that would
//! extend a repetition already in the context is penalized, more the longer the repetition.

use std::collections::HashMap;

/// Longest repetition measured; past it the penalty is already prohibitive.
const MAX_MATCH: usize = 64;

/// DRY's settings. A token `t` that followed an earlier occurrence of the `n` tokens the
/// context ends with (`n >= allowed_length`) has its logit lowered by
/// `multiplier · base^(n − allowed_length)`. A repetition never extends across a breaker
/// token (one whose text holds a sequence breaker such as a newline), so structure repeated
/// line by line is not punished.
///
/// Example, context `a b c x a b` (one letter a token), allowed_length 2, multiplier 1,
/// base 2: the context ends with `a b`, which was followed by `c` before, so `c` loses
/// 1 · 2^0 = 1; after `a b c x a b c x a b` it would lose 1 · 2^(6−2) = 16 (the repetition
/// `a b c x a b` is 6 tokens long).
#[derive(Debug, Clone, PartialEq)]
pub struct Dry {
    pub multiplier: f32,
    pub base: f32,
    pub allowed_length: usize,
    /// How many of the last tokens are searched; `usize::MAX`: the whole sequence.
    pub last_n: usize,
    /// Token ids that break repetitions, ascending.
    pub breakers: Vec<u32>,
}

impl Dry {
    fn breaks(&self, t: u32) -> bool {
        self.breakers.binary_search(&t).is_ok()
    }

    /// Penalizes `logits` (`[n_vocab]`) for the repetitions that end `history`.
    pub fn apply(&self, logits: &mut [f32], history: &[u32]) {
        let ctx = &history[history.len() - self.last_n.min(history.len())..];
        let n = ctx.len();
        if n < 2 || self.multiplier == 0.0 || self.breaks(ctx[n - 1]) {
            return;
        }
        // For every earlier place `j` whose token follows a copy of the context's end,
        // the copy's length: the common suffix of `ctx[..j]` and `ctx`.
        let mut longest: HashMap<u32, usize> = HashMap::new();
        for j in 1..n {
            let mut k = 0;
            while k < j && k < MAX_MATCH {
                let (a, b) = (ctx[j - 1 - k], ctx[n - 1 - k]);
                if a != b || self.breaks(a) {
                    break;
                }
                k += 1;
            }
            if k >= self.allowed_length.max(1) {
                let e = longest.entry(ctx[j]).or_default();
                *e = (*e).max(k);
            }
        }
        for (t, k) in longest {
            if let Some(l) = logits.get_mut(t as usize) {
                let excess = (k - self.allowed_length) as i32;
                *l -= self.multiplier * self.base.powi(excess);
            }
        }
    }
}
