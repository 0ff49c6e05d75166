//! How a drafter that computes logits turns them into draft tokens.

use model::Model;

use super::{Draft, DraftJob};
use crate::sampling::argmax;
use crate::Sampler;

/// Per slot, the request's sampler chain with the drafter's own random stream: at
/// temperature 0 the argmax, above it a sample with the distribution verification needs.
pub(super) struct Picker {
    samplers: Vec<Option<Sampler>>,
    /// `[n_vocab]` scratch for the drafter's probability of its token.
    probs: Vec<f32>,
}

impl Picker {
    pub fn new(n_slots: usize, n_vocab: usize) -> Picker {
        Picker {
            samplers: vec![None; n_slots],
            probs: vec![0.0; n_vocab],
        }
    }

    /// The slot's request ended: its next one starts a fresh sampler.
    pub fn release(&mut self, slot: usize) {
        self.samplers[slot] = None;
    }

    /// Picks the draft token from `logits` (`model`'s, whose head may be restricted) for
    /// `job` and records it in `d` unless the drafter gives it less than `p_min`. Returns
    /// whether drafting for this slot goes on.
    pub fn pick(&mut self, model: &Model, job: &DraftJob, logits: &[f32], d: &mut Draft) -> bool {
        self.pick_given(model, job, logits, None, d)
    }

    /// [`Picker::pick`] where the drafter gives its own confidence in the position
    /// (DSpark's confidence head), which `p_min` is then held against and which is
    /// recorded, in place of the token's probability.
    pub fn pick_given(
        &mut self,
        model: &Model,
        job: &DraftJob,
        logits: &[f32],
        given: Option<f32>,
        d: &mut Draft,
    ) -> bool {
        if given.is_some_and(|c| c < job.p_min) {
            return false;
        }
        let sampler = self.samplers[job.slot].get_or_insert_with(|| {
            let mut cfg = job.sampling;
            cfg.seed ^= 0x5EED_D5AF;
            // The draft's rows index its own (possibly cut) vocabulary, so the target's
            // history cannot penalize them; verification stays exact with any `q`.
            cfg.penalties = Default::default();
            Sampler::new(cfg)
        });
        let (token, conf, q) = if job.sampling.temperature > 0.0 {
            let (i, q) = sampler.sample_with_distribution(logits, &[]);
            let conf = q.iter().find(|x| x.0 == i).map_or(0.0, |x| x.1);
            let q = q.iter().map(|&(j, p)| (model.logit_token(j), p)).collect();
            (model.logit_token(i), conf, Some(q))
        } else {
            let i = argmax(logits);
            let p = &mut self.probs[..logits.len()];
            p.copy_from_slice(logits);
            device::math::exp_shifted(p, logits[i as usize]);
            let sum: f32 = p.iter().sum();
            (model.logit_token(i), 1.0 / sum, None)
        };
        let conf = given.unwrap_or(conf);
        if conf < job.p_min {
            return false;
        }
        d.q.extend(q);
        d.tokens.push(token);
        d.confidence.push(conf);
        d.len() < job.n_max
    }
}
