//! The one sampler chain used everywhere: top-k → top-p → min-p → temperature → draw, or
//! greedy (first index wins a tie) at temperature 0.

use serde::{Deserialize, Serialize};

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
    pub seed: u64,
}

impl Default for SamplerConfig {
    fn default() -> Self {
        SamplerConfig {
            temperature: 0.8,
            top_k: 40,
            top_p: 0.95,
            min_p: 0.05,
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

/// xoshiro256** seeded through splitmix64: small, fast, and the same stream on every
/// platform for a given seed.
#[derive(Debug, Clone)]
pub struct Rng([u64; 4]);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        let mut z = seed;
        let mut next = || {
            z = z.wrapping_add(0x9E3779B97F4A7C15);
            let mut x = z;
            x = (x ^ (x >> 30)).wrapping_mul(0xBF58476D1CE4E5B9);
            x = (x ^ (x >> 27)).wrapping_mul(0x94D049BB133111EB);
            x ^ (x >> 31)
        };
        Rng([next(), next(), next(), next()])
    }

    pub fn next_u64(&mut self) -> u64 {
        let s = &mut self.0;
        let out = s[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = s[1] << 17;
        s[2] ^= s[0];
        s[3] ^= s[1];
        s[1] ^= s[2];
        s[0] ^= s[3];
        s[2] ^= t;
        s[3] = s[3].rotate_left(45);
        out
    }

    /// Uniform in `[0, 1)`.
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

pub use device::argmax;

/// A sampler chain with its own random stream.
#[derive(Debug, Clone)]
pub struct Sampler {
    pub config: SamplerConfig,
    rng: Rng,
    candidates: Vec<(u32, f32)>,
}

impl Sampler {
    pub fn new(config: SamplerConfig) -> Sampler {
        Sampler {
            config,
            rng: Rng::new(config.seed),
            candidates: Vec::new(),
        }
    }

    /// The final distribution of the chain over the surviving candidates, as
    /// `(token, probability)` sorted by decreasing probability (ties by token id).
    /// Greedy gives the argmax with probability 1.
    pub fn distribution(&mut self, logits: &[f32]) -> &[(u32, f32)] {
        let c = &self.config;
        self.candidates.clear();
        if c.temperature <= 0.0 {
            self.candidates.push((argmax(logits), 1.0));
            return &self.candidates;
        }
        self.candidates.extend(
            logits
                .iter()
                .enumerate()
                .filter(|(_, v)| !v.is_nan())
                .map(|(i, &v)| (i as u32, v)),
        );
        let by_logit = |a: &(u32, f32), b: &(u32, f32)| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0));
        if c.top_k > 0 && c.top_k < self.candidates.len() {
            self.candidates
                .select_nth_unstable_by(c.top_k - 1, by_logit);
            self.candidates.truncate(c.top_k);
        }
        self.candidates.sort_by(by_logit);
        softmax(&mut self.candidates, 1.0);
        if c.top_p < 1.0 {
            let mut cum = 0.0;
            let mut keep = self.candidates.len();
            for (i, &(_, p)) in self.candidates.iter().enumerate() {
                cum += p;
                if cum >= c.top_p {
                    keep = i + 1;
                    break;
                }
            }
            self.candidates.truncate(keep.max(1));
        }
        if c.min_p > 0.0 {
            let floor = self.candidates[0].1 * c.min_p;
            let keep = self
                .candidates
                .iter()
                .take_while(|(_, p)| *p >= floor)
                .count();
            self.candidates.truncate(keep.max(1));
        }
        // Back to logits, then the temperature-scaled softmax over what survived.
        let kept: Vec<u32> = self.candidates.iter().map(|(t, _)| *t).collect();
        self.candidates.clear();
        self.candidates
            .extend(kept.iter().map(|&t| (t, logits[t as usize])));
        softmax(&mut self.candidates, c.temperature);
        &self.candidates
    }

    /// Draws the next token.
    pub fn sample(&mut self, logits: &[f32]) -> u32 {
        let u = if self.config.temperature > 0.0 {
            self.rng.next_f64()
        } else {
            0.0
        };
        self.distribution(logits);
        pick(&self.candidates, u)
    }

    /// Draws the next token and returns it with the distribution it was drawn from.
    pub fn sample_with_distribution(&mut self, logits: &[f32]) -> (u32, &[(u32, f32)]) {
        let t = self.sample(logits);
        (t, &self.candidates)
    }

    /// Verifies a draft token against this chain's distribution for `logits`
    /// (see [`crate::speculative::verify`]); `q` is the drafter's distribution, `None`
    /// for one-hot.
    pub fn verify(
        &mut self,
        logits: &[f32],
        draft: u32,
        q: Option<&[(u32, f32)]>,
    ) -> crate::speculative::verify::Verdict {
        self.distribution(logits);
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

/// Softmax of `v / temperature` over the candidates' values, in place.
fn softmax(c: &mut [(u32, f32)], temperature: f32) {
    let max = c.iter().map(|x| x.1).fold(f32::NEG_INFINITY, f32::max);
    let mut sum = 0f64;
    for x in c.iter_mut() {
        x.1 = ((x.1 - max) / temperature).exp();
        sum += x.1 as f64;
    }
    for x in c.iter_mut() {
        x.1 = (x.1 as f64 / sum) as f32;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn greedy_first_index_wins_ties() {
        assert_eq!(argmax(&[1.0, 3.0, 3.0, 2.0]), 1);
        assert_eq!(argmax(&[f32::NAN, 0.5, 0.5]), 1);
        let mut s = Sampler::new(SamplerConfig::greedy());
        assert_eq!(s.sample(&[0.0, 2.0, 2.0]), 1);
    }

    #[test]
    fn seeded_sampling_is_reproducible_and_respects_top_k() {
        let logits: Vec<f32> = (0..100).map(|i| (i % 7) as f32).collect();
        let cfg = SamplerConfig {
            temperature: 1.0,
            top_k: 3,
            top_p: 1.0,
            min_p: 0.0,
            seed: 42,
        };
        let draw = |cfg| {
            let mut s = Sampler::new(cfg);
            (0..50).map(|_| s.sample(&logits)).collect::<Vec<_>>()
        };
        let a = draw(cfg);
        assert_eq!(a, draw(cfg));
        assert!(a.iter().all(|&t| logits[t as usize] == 6.0));
        assert_ne!(a, draw(SamplerConfig { seed: 43, ..cfg }));
    }

    #[test]
    fn top_p_and_min_p_cut_the_tail() {
        let logits = [10.0, 9.0, 0.0, -5.0];
        let mut s = Sampler::new(SamplerConfig {
            temperature: 1.0,
            top_k: 0,
            top_p: 0.5,
            min_p: 0.0,
            seed: 1,
        });
        assert_eq!(s.distribution(&logits).len(), 1);
        s.config.top_p = 1.0;
        s.config.min_p = 0.2;
        let d = s.distribution(&logits).to_vec();
        assert_eq!(d.iter().map(|x| x.0).collect::<Vec<_>>(), vec![0, 1]);
        assert!((d.iter().map(|x| x.1).sum::<f32>() - 1.0).abs() < 1e-6);
    }

    #[test]
    fn temperature_sharpens() {
        let logits = [1.0, 0.0];
        let mut s = Sampler::new(SamplerConfig {
            temperature: 0.5,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            seed: 1,
        });
        let p = s.distribution(&logits)[0].1;
        assert!((p - 1.0 / (1.0 + (-2.0f32).exp())).abs() < 1e-6);
    }
}
