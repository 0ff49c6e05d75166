use device::{AttnSpec, Buf, Device, MatOut, RopeSpec};

use crate::forward::Scratch;
use crate::upload::LayerMats;
use crate::Model;

/// Self-attention of block `il` over `n` rows, from the normalized input `s.x` to the
/// heads' output `s.attn` (`[n, q_dim]`, before the output projection): Q, K and V (with
/// their biases), per-head Q/K norms where the block has them, RoPE with the block's base,
/// then each row's keys and values stored before any row attends; a row at `pos` attends
/// positions `0..=pos` of its own sequence, or the last window of them in a windowed block.
pub fn attend(
    model: &Model,
    dev: &mut dyn Device,
    il: usize,
    lw: &LayerMats,
    n: usize,
    s: &Scratch,
) {
    let hp = &model.hparams;
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
        freq_base: hp.rope_base(il),
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
        scale: hp.attn_scale,
        window: hp.window(il),
    };
    dev.attention(kl, s.q, s.attn, &spec);
}

/// The output projection of [`attend`]'s heads: `s.proj = attn_output · s.attn`, and
/// `residual += s.proj` when given.
pub fn project(dev: &mut dyn Device, lw: &LayerMats, n: usize, s: &Scratch, residual: Option<Buf>) {
    let proj = MatOut {
        y: s.proj,
        bias: None,
        residual,
    };
    dev.matmul(&[lw.attn_output], s.attn, n, &[proj]);
}
