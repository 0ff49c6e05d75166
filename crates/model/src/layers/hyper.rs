//! Hyper-connections ([`device::hyper`]): the residual streams mixed into a block's input
//! and the block's output mixed back into them, by weights each row computes from its
//! streams (`{prefix}_fn`: `[mix_width, streams · n_embd]`, `{prefix}_base`:
//! `[mix_width]`, `{prefix}_scale`: `[3]`, or `[1]` for the merge before the head).

use device::hyper::HyperSpec;
use device::{Buf, Device, MatOut};

use super::Cx;
use crate::error::Result;
use crate::hparams::HParams;
use crate::tensors::{MatId, TensorLoader, VecId};

/// What a hyper-connection needs besides its tensors.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HyperShape {
    pub streams: usize,
    pub sinkhorn_iters: usize,
    pub eps: f32,
}

/// One hyper-connection's tensors; its buffers are the block's scratch `flat` (`[rows,
/// streams · n_embd]`) and `mix` (`[rows, mix_width]`).
pub struct Hyper {
    fn_: MatId,
    base: VecId,
    ones: VecId,
    spec: HyperSpec,
    flat: usize,
    mix: usize,
}

impl Hyper {
    /// The connection named `{prefix}_fn.weight` etc. (`blk.N.hc_attn`, `output_hc`),
    /// working in scratch `extra[flat]` and `extra[mix]`; `merge` for the head's.
    pub fn load(
        t: &mut TensorLoader,
        hp: &HParams,
        prefix: &str,
        shape: HyperShape,
        merge: bool,
        [flat, mix]: [usize; 2],
    ) -> Result<Hyper> {
        let n = |s: &str| format!("{prefix}_{s}.weight");
        let width = shape.streams * hp.n_embd;
        let mut spec = HyperSpec {
            streams: shape.streams,
            width: hp.n_embd,
            sinkhorn_iters: shape.sinkhorn_iters,
            eps: shape.eps,
            scale: [1.0; 3],
            merge,
        };
        let m = spec.mix_width();
        let scales = t.values(&n("scale"), &[if merge { 1 } else { 3 }])?;
        spec.scale[..scales.len()].copy_from_slice(&scales);
        Ok(Hyper {
            fn_: t.matrix(&n("fn"), m, width)?,
            base: t.vector(&n("base"), m)?,
            ones: t.constant(&format!("{prefix} (rms weights)"), vec![1.0; width]),
            spec,
            flat,
            mix,
        })
    }

    /// Scratch widths it needs: `[flat, mix]`.
    pub fn scratch(hp: &HParams, streams: usize) -> [usize; 2] {
        [streams * hp.n_embd, (2 + streams) * streams]
    }

    /// `out = Σ_h pre[h] · x_h` for the streams `x` (`[n, streams · n_embd]`), leaving the
    /// row's weights for [`Hyper::post`].
    pub fn pre(&self, cx: &Cx<'_>, dev: &mut dyn Device, x: Buf, n: usize, out: Buf) {
        let (t, s) = (cx.t, cx.s);
        let (flat, mix) = (s.extra[self.flat], s.extra[self.mix]);
        let w = self.spec.streams * self.spec.width;
        dev.rms_norm(x, t[self.ones], n, w, cx.hp.rms_eps, flat);
        dev.matmul(&[t[self.fn_]], flat, n, &[MatOut::to(mix)]);
        dev.hyper_pre(x, mix, t[self.base], out, n, &self.spec);
    }

    /// The streams `x` from the block's output `y` (`[n, n_embd]`) and themselves.
    pub fn post(&self, cx: &Cx<'_>, dev: &mut dyn Device, y: Buf, x: Buf, n: usize) {
        dev.hyper_post(y, x, cx.s.extra[self.mix], n, &self.spec);
    }
}
