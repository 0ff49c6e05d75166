use device::{Buf, Device, MatOut, MoeSpec, Routing, SharedIn};

use crate::forward::Scratch;
use crate::upload::{FfnMats, LayerMats, MlpMats, MoeMats};
use crate::Model;

/// The gate's activation in a gated feed-forward network.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Activation {
    /// SwiGLU: `silu(gate) · up`.
    Silu,
    /// GeGLU: `gelu(gate) · up` (tanh approximation).
    Gelu,
}

/// Feed-forward block on the normalized input `s.x` (`[n, n_embd]`): `hidden += ffn(s.x)`,
/// `ffn` a dense gated network with `act` or a mixture of experts.
pub fn feed_forward(
    model: &Model,
    dev: &mut dyn Device,
    lw: &LayerMats,
    hidden: Buf,
    n: usize,
    s: &Scratch,
    act: Activation,
) {
    match &lw.ffn {
        FfnMats::Dense(mlp) => gated(dev, mlp, model.hparams.n_ff, n, s, Some(hidden), act),
        FfnMats::Moe(m) => moe(model, dev, m, hidden, n, s),
    }
}

/// `s.proj[..n · n_embd] = mlp.down(act(mlp.gate(x)) · mlp.up(x))` for `x = s.x` (and
/// `residual += s.proj` when given); `n_ff` is the network's width.
pub fn gated(
    dev: &mut dyn Device,
    mlp: &MlpMats,
    n_ff: usize,
    n: usize,
    s: &Scratch,
    residual: Option<Buf>,
    act: Activation,
) {
    dev.matmul(
        &[mlp.gate, mlp.up],
        s.x,
        n,
        &[MatOut::to(s.gate), MatOut::to(s.up)],
    );
    match act {
        Activation::Silu => dev.swiglu(s.gate, s.up, n * n_ff),
        Activation::Gelu => dev.gelu(s.gate, s.up, n * n_ff),
    }
    let down = MatOut {
        y: s.proj,
        bias: None,
        residual,
    };
    dev.matmul(&[mlp.down], s.gate, n, &[down]);
}

/// A mixture of experts: the shared expert (when the block has one) into `s.proj`, then
/// [`Device::moe`] adds the chosen experts and it to `hidden`.
fn moe(model: &Model, dev: &mut dyn Device, m: &MoeMats, hidden: Buf, n: usize, s: &Scratch) {
    let hp = &model.hparams;
    let p = hp.moe.as_ref().expect("a mixture-of-experts block");
    let shared = m.shared.as_ref().map(|mlp| {
        let n_ff = p.shared.expect("a shared expert's width").n_ff;
        gated(dev, mlp, n_ff, n, s, None, Activation::Silu);
        SharedIn {
            out: s.proj,
            gate: m.ffn_gate_inp_shexp,
        }
    });
    let spec = MoeSpec {
        router: m.ffn_gate_inp,
        gate: &m.ffn_gate_exps,
        up: &m.ffn_up_exps,
        down: &m.ffn_down_exps,
        routing: Routing {
            n_expert: p.n_expert,
            k: p.n_expert_used,
            gating: p.gating,
            norm_weights: p.norm_weights,
            weights_scale: p.weights_scale,
        },
        n_embd: hp.n_embd,
        n_ff_exp: p.n_ff_exp,
        shared,
        scratch: s.moe.expect("mixture scratch for a model with experts"),
    };
    dev.moe(&spec, s.x, n, hidden);
}
