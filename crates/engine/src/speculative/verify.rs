//! Exact verification of a draft token against the target's final distribution.
//!
//! With `p` the target's distribution after the sampler chain and `q` the drafter's, a
//! draft token `d ~ q` is accepted with probability `min(1, p(d) / q(d))`; otherwise the
//! token is drawn from `max(0, p − q)` normalized. The token that comes out is distributed
//! exactly as `p` (Leviathan et al. 2023). A deterministic drafter has a one-hot `q`, so
//! `d` is accepted with probability `p(d)` and the residual is `p` without `d`. At
//! temperature 0, `p` is one-hot on the argmax: a draft is accepted exactly when it is the
//! argmax, the residual is the argmax, and no random number is drawn.

use crate::sampling::rng::Rng;

/// What verifying one draft token gave.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Verdict {
    /// The next token: the draft when accepted, else a draw from the residual.
    pub token: u32,
    pub accepted: bool,
}

fn prob(dist: &[(u32, f32)], t: u32) -> f32 {
    dist.iter().find(|x| x.0 == t).map_or(0.0, |x| x.1)
}

/// Verifies `draft` against `p` (`(token, probability)`, summing to 1). `q` is the
/// drafter's distribution, `None` for one-hot on `draft`.
pub fn verify(p: &[(u32, f32)], draft: u32, q: Option<&[(u32, f32)]>, rng: &mut Rng) -> Verdict {
    let q_of = |t: u32| match q {
        Some(q) => prob(q, t),
        None => f32::from(t == draft),
    };
    let (pd, qd) = (prob(p, draft), q_of(draft));
    let accepted = if pd <= 0.0 {
        false
    } else if pd >= qd {
        true
    } else {
        rng.next_f64() < (pd / qd) as f64
    };
    if accepted {
        return Verdict {
            token: draft,
            accepted,
        };
    }
    let residual = |t: u32, pt: f32| (pt - q_of(t)).max(0.0) as f64;
    let mut positive = p.iter().filter(|&&(t, pt)| residual(t, pt) > 0.0);
    let token = match (positive.next(), positive.next()) {
        (Some(&(t, _)), None) => t,
        (None, _) => p.first().map_or(draft, |x| x.0),
        _ => {
            let total: f64 = p.iter().map(|&(t, pt)| residual(t, pt)).sum();
            let u = rng.next_f64() * total;
            let mut cum = 0.0;
            p.iter()
                .find(|&&(t, pt)| {
                    cum += residual(t, pt);
                    u < cum
                })
                .or(p.last())
                .map_or(draft, |x| x.0)
        }
    };
    Verdict {
        token,
        accepted: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Sampler, SamplerConfig};

    /// Draws `n` tokens by drafting from `q` (or always `fixed`) and verifying against
    /// `p`; returns the counts per token of a vocabulary of `v`.
    fn simulate(
        p: &[(u32, f32)],
        q: Option<&[(u32, f32)]>,
        fixed: u32,
        v: usize,
        n: usize,
    ) -> Vec<u64> {
        let mut draft_rng = Rng::new(7);
        let mut rng = Rng::new(11);
        let mut counts = vec![0u64; v];
        for _ in 0..n {
            let d = match q {
                Some(q) => {
                    let u = draft_rng.next_f64();
                    let mut cum = 0.0;
                    q.iter()
                        .find(|x| {
                            cum += x.1 as f64;
                            u < cum
                        })
                        .unwrap_or(q.last().unwrap())
                        .0
                }
                None => fixed,
            };
            counts[verify(p, d, q, &mut rng).token as usize] += 1;
        }
        counts
    }

    /// Pearson's chi-square statistic of `counts` against the probabilities `p`.
    fn chi_square(counts: &[u64], p: &[(u32, f32)]) -> f64 {
        let n: u64 = counts.iter().sum();
        let mut chi = 0.0;
        for (t, &c) in counts.iter().enumerate() {
            let e = prob(p, t as u32) as f64 * n as f64;
            if e == 0.0 {
                assert_eq!(c, 0, "token {t} has probability 0 but was drawn");
                continue;
            }
            chi += (c as f64 - e).powi(2) / e;
        }
        chi
    }

    /// The 0.999 quantile of chi-square with 5 degrees of freedom.
    const CHI2_5_999: f64 = 20.52;

    fn dist(logits: &[f32], cfg: SamplerConfig) -> Vec<(u32, f32)> {
        Sampler::new(cfg).distribution(logits, &[]).to_vec()
    }

    #[test]
    fn stochastic_verification_samples_the_target_distribution() {
        let chain = |temperature, top_k| SamplerConfig {
            temperature,
            top_k,
            top_p: 1.0,
            min_p: 0.0,
            seed: 0,
            ..SamplerConfig::default()
        };
        let p = dist(&[1.0, 0.2, 2.0, -1.0, 0.5, 1.5], chain(1.0, 0));
        let q = dist(&[0.3, 1.0, 1.5, 0.0, 2.0, 0.5], chain(0.7, 4));
        let n = 200_000;
        let counts = simulate(&p, Some(&q), 0, 6, n);
        let chi = chi_square(&counts, &p);
        assert!(chi < CHI2_5_999, "chi-square {chi:.2}, counts {counts:?}");
        for fixed in [2, 3] {
            let counts = simulate(&p, None, fixed, 6, n);
            let chi = chi_square(&counts, &p);
            assert!(
                chi < CHI2_5_999,
                "one-hot draft {fixed}: chi-square {chi:.2}"
            );
        }
        let skewed = simulate(&q, None, 0, 6, n);
        assert!(
            chi_square(&skewed, &p) > 1000.0,
            "the test must tell distributions apart"
        );
    }

    #[test]
    fn greedy_accepts_exactly_the_argmax_without_drawing() {
        let p = vec![(4u32, 1.0f32)];
        let mut rng = Rng::new(3);
        let before = rng.clone().next_u64();
        let v = verify(&p, 4, None, &mut rng);
        assert_eq!(
            v,
            Verdict {
                token: 4,
                accepted: true
            }
        );
        let q = [(1u32, 0.6f32), (4, 0.4)];
        let v = verify(&p, 1, Some(&q), &mut rng);
        assert_eq!(
            v,
            Verdict {
                token: 4,
                accepted: false
            }
        );
        assert_eq!(rng.next_u64(), before, "greedy verification drew a number");
    }
}
