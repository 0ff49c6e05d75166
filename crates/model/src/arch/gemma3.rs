//! gemma3 (Gemma 3): embeddings scaled by `√n_embd`; per-head Q/K norms; NeoX RoPE; norms
//! before and after both sub-blocks; a GELU-gated feed-forward network; five of every six
//! blocks attend through a sliding window with RoPE base 10,000, the sixth globally with
//! `rope.freq_base`; queries scaled by `1/√key_length` (`1/√(n_embd/n_head)` on the 27B);
//! the output head tied to the embeddings. Norm weights are stored with Gemma's `1 +`
//! already added by the converter, so the norms are plain RMS norms.

use device::{Buf, Device, Op, RopeMode};

use super::{ArchSpec, SlidingPattern, PLAIN};
use crate::forward::Scratch;
use crate::layers::{attention, ffn};
use crate::upload::{FfnMats, LayerMats};
use crate::Model;

pub const SPEC: ArchSpec = ArchSpec {
    rope_mode: RopeMode::Neox,
    qk_norm: true,
    post_norms: true,
    scaled_embeddings: true,
    sliding: Some(SlidingPattern {
        global_every: Some(6),
        rope_freq_base: Some(10_000.0),
    }),
    block,
    extra_ops: &[Op::Gelu],
    ..PLAIN
};

/// `h = hidden + post_attn_norm(attn(attn_norm(hidden)))`, then
/// `hidden = h + post_ffn_norm(ffn(ffn_norm(h)))`.
fn block(
    model: &Model,
    dev: &mut dyn Device,
    il: usize,
    lw: &LayerMats,
    hidden: Buf,
    n: usize,
    s: &Scratch,
) {
    let hp = &model.hparams;
    let (e, eps) = (hp.n_embd, hp.rms_eps);
    let post = |norm: Option<Buf>| norm.expect("gemma3 blocks have post norms");
    dev.rms_norm(hidden, lw.attn_norm, n, e, eps, s.x);
    attention::attend(model, dev, il, lw, n, s);
    attention::project(dev, lw, n, s, None);
    dev.rms_norm(s.proj, post(lw.post_attn_norm), n, e, eps, s.proj);
    dev.add(hidden, s.proj, n * e);
    dev.rms_norm(hidden, lw.ffn_norm, n, e, eps, s.x);
    let FfnMats::Dense(mlp) = &lw.ffn else {
        unreachable!("gemma3 blocks are dense")
    };
    ffn::gated(dev, mlp, hp.n_ff, n, s, None, ffn::Activation::Gelu);
    dev.rms_norm(s.proj, post(lw.post_ffn_norm), n, e, eps, s.proj);
    dev.add(hidden, s.proj, n * e);
}
