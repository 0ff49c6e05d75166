use kernels::ops::{add_inplace, rms_norm, swiglu_inplace};
use kernels::{matmul, matmul_many, ThreadPool};

use crate::forward::Scratch;
use crate::weights::LayerWeights;
use crate::Model;

/// `hidden += ffn_down(silu(ffn_gate(x)) * ffn_up(x))` with `x = rms_norm(hidden)`.
/// `hidden` is `[n, n_embd]`.
pub fn block(
    model: &Model,
    lw: &LayerWeights,
    hidden: &mut [f32],
    n: usize,
    s: &mut Scratch,
    pool: &ThreadPool,
) {
    let hp = &model.hparams;
    let (e, ff) = (hp.n_embd, hp.n_ff);
    let x = &mut s.x[..n * e];
    for (h, xr) in hidden.chunks_exact(e).zip(x.chunks_exact_mut(e)) {
        rms_norm(h, &lw.ffn_norm, hp.rms_eps, xr);
    }
    let (gate, up) = (&mut s.gate[..n * ff], &mut s.up[..n * ff]);
    let f = &model.file;
    let gate_up = [lw.ffn_gate.view(f), lw.ffn_up.view(f)];
    matmul_many(pool, &gate_up, x, &mut [&mut *gate, &mut *up], s.precision);
    swiglu_inplace(gate, up);
    let proj = &mut s.proj[..n * e];
    matmul(
        pool,
        &lw.ffn_down.view(&model.file),
        gate,
        proj,
        s.precision,
    );
    add_inplace(hidden, proj);
}
