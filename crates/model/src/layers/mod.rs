//! The shared pieces of a transformer block, written once for every architecture against
//! the [`device::Device`] ops; each architecture's block ([`crate::arch::Block`]) is a
//! recipe composed of them.

pub mod attention;
pub mod ffn;

use device::{Buf, Device};

use crate::forward::Scratch;
use crate::upload::LayerMats;
use crate::Model;

/// The pre-norm block (llama, qwen2, qwen3 and their mixtures):
/// `hidden += attn(rms_norm(hidden))`, then `hidden += ffn(rms_norm(hidden))`, each residual
/// add fused into its projection.
pub fn pre_norm_block(
    model: &Model,
    dev: &mut dyn Device,
    il: usize,
    lw: &LayerMats,
    hidden: Buf,
    n: usize,
    s: &Scratch,
) {
    let hp = &model.hparams;
    dev.rms_norm(hidden, lw.attn_norm, n, hp.n_embd, hp.rms_eps, s.x);
    attention::attend(model, dev, il, lw, n, s);
    attention::project(dev, lw, n, s, Some(hidden));
    dev.rms_norm(hidden, lw.ffn_norm, n, hp.n_embd, hp.rms_eps, s.x);
    ffn::feed_forward(model, dev, lw, hidden, n, s, ffn::Activation::Silu);
}
