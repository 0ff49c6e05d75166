use device::{AttnSpec, Buf, Device, MatOut, RopeSpec};

use crate::forward::Scratch;
use crate::upload::LayerMats;
use crate::Model;

/// Self-attention block of layer `il` over `n` rows: `hidden += attn_output(attention(x))`
/// with `x = rms_norm(hidden)`; each row's keys and values are stored before any row
/// attends, and a row at `pos` attends positions `0..=pos` of its own sequence.
pub fn block(
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
    // q: [n, n_head * head_dim], k and v: [n, n_head_kv * head_dim]
    let out = |y, bias| MatOut {
        y,
        bias,
        residual: None,
    };
    dev.matmul(
        &[lw.attn_q, lw.attn_k, lw.attn_v],
        s.x,
        n,
        &[
            out(s.q, lw.attn_q_bias),
            out(s.k, lw.attn_k_bias),
            out(s.v, lw.attn_v_bias),
        ],
    );
    if let (Some(qn), Some(kn)) = (lw.attn_q_norm, lw.attn_k_norm) {
        dev.rms_norm(s.q, qn, n * hp.n_head, hp.head_dim, hp.rms_eps, s.q);
        dev.rms_norm(s.k, kn, n * hp.n_head_kv, hp.head_dim, hp.rms_eps, s.k);
    }
    let rope = RopeSpec {
        head_dim: hp.head_dim,
        n_rot: hp.n_rot,
        mode: hp.arch.spec().rope_mode,
        freq_base: hp.rope_freq_base,
    };
    dev.rope(s.q, hp.n_head, &rope);
    dev.rope(s.k, hp.n_head_kv, &rope);
    // The KV pool holds the stage's blocks only.
    let kl = il - model.stage.layers.start;
    dev.kv_store(kl, s.k, s.v);
    let spec = AttnSpec {
        n_head: hp.n_head,
        n_head_kv: hp.n_head_kv,
        head_dim: hp.head_dim,
        scale: 1.0 / (hp.head_dim as f32).sqrt(),
    };
    dev.attention(kl, s.q, s.attn, &spec);
    let proj = MatOut {
        y: s.proj,
        bias: None,
        residual: Some(hidden),
    };
    dev.matmul(&[lw.attn_output], s.attn, n, &[proj]);
}
