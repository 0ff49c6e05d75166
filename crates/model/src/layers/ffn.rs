//! Feed-forward networks: a gated network (SwiGLU, GeGLU) and a mixture of experts with an
//! optional shared expert.

use device::{Buf, Device, ExpertNet, MatOut, MoeSpec, SharedIn};

use super::Cx;
use crate::error::Result;
use crate::hparams::HParams;
use crate::tensors::{MatId, MatSpan, TensorLoader, VecId};

/// The gate's activation in a gated feed-forward network.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Activation {
    /// SwiGLU: `silu(gate) · up`.
    Silu,
    /// GeGLU: `gelu(gate) · up` (tanh approximation).
    Gelu,
}

/// How a gated network stores its gate and up matrices.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GateUp {
    /// `ffn_gate` and `ffn_up`.
    Apart,
    /// One `ffn_up` of `2 · n_ff` rows, the gate's first (Phi-3).
    Fused,
}

/// A gated network `down(act(gate(x)) · up(x))` of width `n_ff`: GGUF's
/// `ffn_{gate,up,down}` in a dense block, `ffn_{gate,up,down}_shexp` as a shared expert.
/// `gate`, `up`: `[n_ff, n_embd]`; `down`: `[n_embd, n_ff]`.
pub struct Mlp {
    gate: MatId,
    up: MatId,
    down: MatId,
    n_ff: usize,
}

impl Mlp {
    /// The network of width `n_ff` from `ffn_{gate,up,down}{suffix}` of block `il`.
    pub fn load(
        t: &mut TensorLoader,
        hp: &HParams,
        il: usize,
        suffix: &str,
        n_ff: usize,
        gate_up: GateUp,
    ) -> Result<Mlp> {
        let e = hp.n_embd;
        let n = |s: &str| format!("blk.{il}.ffn_{s}{suffix}.weight");
        let [gate, up] = match gate_up {
            GateUp::Fused => {
                let parts = t.row_parts(&n("up"), &[n_ff, n_ff], e)?;
                parts.try_into().expect("two parts")
            }
            GateUp::Apart => [t.matrix(&n("gate"), n_ff, e)?, t.matrix(&n("up"), n_ff, e)?],
        };
        Ok(Mlp {
            gate,
            up,
            down: t.matrix(&n("down"), e, n_ff)?,
            n_ff,
        })
    }

    /// `s.proj[..n · n_embd] = down(act(gate(x)) · up(x))` for `x = s.x` (and
    /// `residual += s.proj` when given).
    pub fn forward(
        &self,
        cx: &Cx<'_>,
        dev: &mut dyn Device,
        n: usize,
        residual: Option<Buf>,
        act: Activation,
    ) {
        let (s, t) = (cx.s, cx.t);
        dev.matmul(
            &[t[self.gate], t[self.up]],
            s.x,
            n,
            &[MatOut::to(s.gate), MatOut::to(s.up)],
        );
        match act {
            Activation::Silu => dev.swiglu(s.gate, s.up, n * self.n_ff),
            Activation::Gelu => dev.gelu(s.gate, s.up, n * self.n_ff),
        }
        let down = MatOut {
            y: s.proj,
            bias: None,
            residual,
        };
        dev.matmul(&[t[self.down]], s.gate, n, &[down]);
    }
}

/// A mixture of experts. GGUF stores each kind of expert matrix as one tensor
/// `[n_expert, rows, cols]`; here each expert's slab is a matrix of its own, so that it is
/// packed and multiplied on its own.
pub struct Moe {
    /// `[n_expert, n_embd]`: the router.
    gate_inp: MatId,
    /// `n_expert` × `[n_ff_exp, n_embd]`.
    gate_exps: MatSpan,
    up_exps: MatSpan,
    /// `n_expert` × `[n_embd, n_ff_exp]`.
    down_exps: MatSpan,
    /// `ffn_{gate,up,down}_shexp`.
    shared: Option<Mlp>,
    /// `[n_embd]`: the shared expert's gate (qwen2moe).
    gate_inp_shexp: Option<VecId>,
}

/// A block's feed-forward network: dense, or a mixture where the hyper-parameters say
/// the block is one.
pub enum Ffn {
    Dense(Mlp),
    Moe(Moe),
}

impl Ffn {
    /// Block `il`'s network; a dense one stores its gate and up as `gate_up` says.
    pub fn load(t: &mut TensorLoader, hp: &HParams, il: usize, gate_up: GateUp) -> Result<Ffn> {
        let moe = match &hp.moe {
            Some(moe) if hp.is_moe_layer(il) => moe,
            _ => return Ok(Ffn::Dense(Mlp::load(t, hp, il, "", hp.n_ff, gate_up)?)),
        };
        let e = hp.n_embd;
        let n = |s: &str| format!("blk.{il}.{s}.weight");
        let (ne, ff) = (moe.n_expert, moe.n_ff_exp);
        let count = [ne, moe.n_expert_used];
        let gate_inp = t.matrix(&n("ffn_gate_inp"), ne, e)?;
        let gate_exps = t.experts(&n("ffn_gate_exps"), il, count, ff, e)?;
        let up_exps = t.experts(&n("ffn_up_exps"), il, count, ff, e)?;
        let down_exps = t.experts(&n("ffn_down_exps"), il, count, e, ff)?;
        let shared = moe
            .shared
            .map(|sh| Mlp::load(t, hp, il, "_shexp", sh.n_ff, GateUp::Apart))
            .transpose()?;
        let gated = moe.shared.is_some_and(|sh| sh.gated);
        Ok(Ffn::Moe(Moe {
            gate_inp,
            gate_exps,
            up_exps,
            down_exps,
            shared,
            gate_inp_shexp: gated
                .then(|| t.vector(&n("ffn_gate_inp_shexp"), e))
                .transpose()?,
        }))
    }

    /// `hidden += ffn(s.x)` for the normalized input `s.x` (`[n, n_embd]`), a dense
    /// network gated by `act`.
    pub fn forward(
        &self,
        cx: &Cx<'_>,
        dev: &mut dyn Device,
        hidden: Buf,
        n: usize,
        act: Activation,
    ) {
        match self {
            Ffn::Dense(mlp) => mlp.forward(cx, dev, n, Some(hidden), act),
            Ffn::Moe(m) => m.forward(cx, dev, hidden, n),
        }
    }
}

impl Moe {
    /// The shared expert (when the block has one) into `s.proj`, then [`Device::moe`] adds
    /// the chosen experts and it to `hidden`.
    fn forward(&self, cx: &Cx<'_>, dev: &mut dyn Device, hidden: Buf, n: usize) {
        let (hp, s, t) = (cx.hp, cx.s, cx.t);
        let p = hp.moe.as_ref().expect("a mixture-of-experts block");
        let shared = self.shared.as_ref().map(|mlp| {
            mlp.forward(cx, dev, n, None, Activation::Silu);
            SharedIn {
                out: s.proj,
                gate: t.opt(self.gate_inp_shexp),
            }
        });
        let spec = MoeSpec {
            router: t[self.gate_inp],
            gate: &t[&self.gate_exps],
            up: &t[&self.up_exps],
            down: &t[&self.down_exps],
            routing: p.routing(),
            n_embd: hp.n_embd,
            n_ff_exp: p.n_ff_exp,
            shared,
            choice_bias: None,
            given: None,
            limit: None,
            net: ExpertNet::Swiglu,
            scratch: s.moe.expect("mixture scratch for a model with experts"),
        };
        dev.moe(&spec, s.x, n, hidden);
    }
}
