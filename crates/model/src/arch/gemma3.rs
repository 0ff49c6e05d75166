//! gemma3 (Gemma 3): embeddings scaled by `√n_embd`; per-head Q/K norms; NeoX RoPE; norms
//! before and after both sub-blocks; a GELU-gated feed-forward network; five of every six
//! blocks attend through a sliding window with RoPE base 10,000, the sixth globally with
//! `rope.freq_base`; queries scaled by `1/√key_length` (`1/√(n_embd/n_head)` on the 27B);
//! the output head tied to the embeddings. Norm weights are stored with Gemma's `1 +`
//! already added by the converter, so the norms are plain RMS norms.

use device::{Buf, Device, Op, RopeMode};
use gguf::Metadata;

use super::Recipe;
use crate::error::Result;
use crate::hparams::{HParams, SlidingPattern, Traits, PLAIN};
use crate::layers::attention::{Attention, AttentionKind};
use crate::layers::ffn::{Activation, GateUp, Mlp};
use crate::layers::{Cx, Layer};
use crate::tensors::{TensorLoader, VecId};

pub struct Gemma3;

impl Recipe for Gemma3 {
    fn name(&self) -> &'static str {
        "gemma3"
    }

    fn traits(&self) -> Traits {
        Traits {
            rope_mode: RopeMode::Neox,
            scaled_embeddings: true,
            sliding: Some(SlidingPattern {
                global_every: Some(6),
                rope_freq_base: Some(10_000.0),
            }),
            ..PLAIN
        }
    }

    fn hparams(&self, md: &Metadata) -> Result<HParams> {
        let hp = HParams::read(md, self.name(), &self.traits())?;
        // The 27B (62 blocks) scales queries by the width per head, not head_dim.
        let attn_scale = match hp.n_layer {
            62 => 1.0 / ((hp.n_embd / hp.n_head) as f32).sqrt(),
            _ => hp.attn_scale,
        };
        Ok(HParams { attn_scale, ..hp })
    }

    fn layer(&self, t: &mut TensorLoader, hp: &HParams, il: usize) -> Result<Box<dyn Layer>> {
        let e = hp.n_embd;
        let n = |s: &str| format!("blk.{il}.{s}.weight");
        let kind = AttentionKind {
            qkv_bias: false,
            qk_norm: true,
        };
        Ok(Box::new(Block {
            attn_norm: t.vector(&n("attn_norm"), e)?,
            attn: Attention::load(t, hp, il, kind)?,
            post_attention_norm: t.vector(&n("post_attention_norm"), e)?,
            ffn_norm: t.vector(&n("ffn_norm"), e)?,
            mlp: Mlp::load(t, hp, il, "", hp.n_ff, GateUp::Apart)?,
            post_ffw_norm: t.vector(&n("post_ffw_norm"), e)?,
        }))
    }

    fn extra_ops(&self) -> &'static [Op] {
        &[Op::Gelu]
    }
}

/// A Gemma 3 block; the norms `[n_embd]`.
struct Block {
    attn_norm: VecId,
    attn: Attention,
    post_attention_norm: VecId,
    ffn_norm: VecId,
    mlp: Mlp,
    post_ffw_norm: VecId,
}

impl Layer for Block {
    /// `h = hidden + post_attention_norm(attn(attn_norm(hidden)))`, then
    /// `hidden = h + post_ffw_norm(mlp(ffn_norm(h)))`.
    fn forward(&self, cx: &Cx<'_>, dev: &mut dyn Device, hidden: Buf, n: usize) {
        let (hp, s, t) = (cx.hp, cx.s, cx.t);
        let (e, eps) = (hp.n_embd, hp.rms_eps);
        dev.rms_norm(hidden, t[self.attn_norm], n, e, eps, s.x);
        self.attn.attend(cx, dev, n);
        self.attn.project(cx, dev, n, None);
        dev.rms_norm(s.proj, t[self.post_attention_norm], n, e, eps, s.proj);
        dev.add(hidden, s.proj, n * e);
        dev.rms_norm(hidden, t[self.ffn_norm], n, e, eps, s.x);
        self.mlp.forward(cx, dev, n, None, Activation::Gelu);
        dev.rms_norm(s.proj, t[self.post_ffw_norm], n, e, eps, s.proj);
        dev.add(hidden, s.proj, n * e);
    }
}
