use kernels::ops::{add_inplace, rms_norm, swiglu_inplace};
use kernels::{matmul, matmul_many, ThreadPool};

use crate::forward::Scratch;
use crate::layers::moe;
use crate::weights::{Ffn, LayerWeights, Mlp};
use crate::Model;

/// Feed-forward block: `hidden += ffn(x)` with `x = rms_norm(hidden)`, `ffn` a dense
/// SwiGLU network or a mixture of experts. `hidden` is `[n, n_embd]`.
pub fn block(
    model: &Model,
    lw: &LayerWeights,
    hidden: &mut [f32],
    n: usize,
    s: &mut Scratch,
    pool: &ThreadPool,
) {
    let hp = &model.hparams;
    let e = hp.n_embd;
    for (h, xr) in hidden.chunks_exact(e).zip(s.x[..n * e].chunks_exact_mut(e)) {
        rms_norm(h, &lw.ffn_norm, hp.rms_eps, xr);
    }
    match &lw.ffn {
        Ffn::Dense(mlp) => {
            swiglu(model, mlp, n, s, pool);
            add_inplace(hidden, &s.proj[..n * e]);
        }
        Ffn::Moe(m) => moe::block(model, m, hidden, n, s, pool),
    }
}

/// `s.proj[..n · n_embd] = mlp.down(silu(mlp.gate(x)) · mlp.up(x))` for `x = s.x[..n · n_embd]`.
pub fn swiglu(model: &Model, mlp: &Mlp, n: usize, s: &mut Scratch, pool: &ThreadPool) {
    let (e, ff) = (model.hparams.n_embd, mlp.gate.n_rows);
    let (gate, up) = (&mut s.gate[..n * ff], &mut s.up[..n * ff]);
    let f = &model.file;
    let gate_up = [mlp.gate.view(f), mlp.up.view(f)];
    matmul_many(
        pool,
        &gate_up,
        &s.x[..n * e],
        &mut [&mut *gate, &mut *up],
        s.precision,
    );
    swiglu_inplace(gate, up);
    matmul(
        pool,
        &mlp.down.view(f),
        gate,
        &mut s.proj[..n * e],
        s.precision,
    );
}
