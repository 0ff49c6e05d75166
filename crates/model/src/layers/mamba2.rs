//! Mamba-2's mixer (Nemotron-H's recurrent blocks), as llama.cpp computes it:
//!
//! ```text
//! z, xBC, dt = ssm_in · x                     [d_inner], [conv_dim], [n_head]
//! xBC  = silu(conv(xBC) + ssm_conv1d.bias)     causal, ssm.conv_kernel taps, state: last k-1 rows
//! x, B, C = xBC's parts                        [d_inner], [n_group · d_state] each
//! y    = scan(x, softplus(dt + ssm_dt.bias), ssm_a, B, C, ssm_d)   (Device::ssm_scan)
//! y    = rms_norm per group (y · silu(z)) · ssm_norm       n_group groups of d_inner / n_group
//! out  = ssm_out · y
//! ```
//!
//! `conv_dim = d_inner + 2 · n_group · d_state`; a head is `d_inner / n_head` wide. A
//! sequence's state is the convolution's `(k - 1) · conv_dim` floats, then the scan's
//! `[n_head, head_dim, d_state]`.

use device::{Buf, Cols, ConvSpec, Device, MatOut, ScanIo, ScanSpec};

use super::{Cx, LayerMemory};
use crate::error::{Error, Result};
use crate::hparams::required;
use crate::tensors::{MatId, TensorLoader, VecId};

/// The shape of a Mamba-2 mixer (the file's `ssm.*` keys).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mamba2Shape {
    /// `ssm.conv_kernel`.
    pub conv_kernel: usize,
    /// `ssm.inner_size`.
    pub d_inner: usize,
    /// `ssm.state_size`.
    pub d_state: usize,
    /// `ssm.time_step_rank`: the heads.
    pub n_head: usize,
    /// `ssm.group_count`.
    pub n_group: usize,
}

impl Mamba2Shape {
    /// The shape `{arch}.ssm.*` gives, checked (heads and groups divide the inner size,
    /// groups divide the heads).
    pub fn read(md: &gguf::Metadata, arch: &str) -> Result<Mamba2Shape> {
        let get = |k: &str| required(md, &format!("{arch}.ssm.{k}"));
        let shape = Mamba2Shape {
            conv_kernel: get("conv_kernel")?,
            d_inner: get("inner_size")?,
            d_state: get("state_size")?,
            n_head: get("time_step_rank")?,
            n_group: get("group_count")?,
        };
        let s = shape;
        if !s.d_inner.is_multiple_of(s.n_head) || !s.n_head.is_multiple_of(s.n_group) {
            return Err(Error::BadHParam {
                key: format!("{arch}.ssm.inner_size"),
                problem: format!(
                    "{} must be a multiple of time_step_rank {}, itself a multiple of group_count {}",
                    s.d_inner, s.n_head, s.n_group
                ),
            });
        }
        Ok(shape)
    }

    fn bc(&self) -> usize {
        self.n_group * self.d_state
    }

    /// Channels of the convolution: x, B, C.
    fn conv_dim(&self) -> usize {
        self.d_inner + 2 * self.bc()
    }

    fn scan(&self) -> ScanSpec {
        ScanSpec {
            n_head: self.n_head,
            head_dim: self.d_inner / self.n_head,
            d_state: self.d_state,
            n_group: self.n_group,
            at: (self.conv_kernel - 1) * self.conv_dim(),
        }
    }
}

/// See the module doc. `ssm_in`: `[2 · d_inner + 2 · n_group · d_state + n_head,
/// n_embd]` (as three parts: z, xBC, dt); `ssm_conv1d`: `[conv_dim, conv_kernel]`, its bias
/// `[conv_dim]` (optional); `ssm_dt.bias`, `ssm_a`, `ssm_d`: `[n_head]`; `ssm_norm`:
/// `[d_inner]` (a group's weights after another's); `ssm_out`: `[n_embd, d_inner]`.
pub struct Mamba2 {
    z: MatId,
    xbc: MatId,
    dt: MatId,
    conv: VecId,
    conv_bias: Option<VecId>,
    dt_bias: VecId,
    a: VecId,
    d: VecId,
    norm: VecId,
    /// Ones of a group's width: the groups are normed by this, then weighted by `norm`.
    ones: Option<VecId>,
    out: MatId,
    shape: Mamba2Shape,
}

impl Mamba2 {
    pub fn load(
        t: &mut TensorLoader,
        n_embd: usize,
        il: usize,
        shape: Mamba2Shape,
    ) -> Result<Mamba2> {
        let s = shape;
        let n = |x: &str| format!("blk.{il}.{x}");
        let parts = [s.d_inner, s.conv_dim(), s.n_head];
        let [z, xbc, dt] = t
            .row_parts(&n("ssm_in.weight"), &parts, n_embd)?
            .try_into()
            .expect("three parts");
        let conv_bias = match t.has(&n("ssm_conv1d.bias")) {
            true => Some(t.vector(&n("ssm_conv1d.bias"), s.conv_dim())?),
            false => None,
        };
        let group = s.d_inner / s.n_group;
        Ok(Mamba2 {
            z,
            xbc,
            dt,
            conv: t.vector_dims(&n("ssm_conv1d.weight"), &[s.conv_kernel, s.conv_dim()])?,
            conv_bias,
            dt_bias: t.vector(&n("ssm_dt.bias"), s.n_head)?,
            a: t.vector_dims(&n("ssm_a"), &[1, s.n_head])?,
            d: t.vector_dims(&n("ssm_d"), &[1, s.n_head])?,
            norm: t.vector_dims(&n("ssm_norm.weight"), &[group, s.n_group])?,
            ones: (s.n_group > 1).then(|| t.constant(&n("ssm_norm(ones)"), vec![1.0; group])),
            out: t.matrix(&n("ssm_out.weight"), n_embd, s.d_inner)?,
            shape,
        })
    }

    /// The convolution's last inputs, then the scan's state.
    pub fn memory(&self) -> LayerMemory {
        let scan = self.shape.scan();
        LayerMemory::State {
            floats: scan.at + scan.state_floats(),
        }
    }

    /// Buffers of [`crate::Scratch::extra`] it uses: z, the projected and the convolved
    /// channels, dt, x, B, C, the scan's output and the norm's weights row by row.
    pub fn scratch(&self) -> Vec<usize> {
        let s = self.shape;
        let (di, c) = (s.d_inner, s.conv_dim());
        vec![di, c, c, s.n_head, di, s.bc(), s.bc(), di, di]
    }

    /// From the normalized input `s.x` (`[n, n_embd]`): `residual += ` the mixer's output.
    pub fn forward(&self, cx: &Cx<'_>, dev: &mut dyn Device, n: usize, residual: Buf) {
        let (hp, s, t, sh) = (cx.hp, cx.s, cx.t, self.shape);
        let [z, mixed, conv, dt, x, b, c, y, w] = s.extra[..9] else {
            unreachable!("nine buffers asked for by scratch()")
        };
        let dt_out = MatOut {
            y: dt,
            bias: Some(t[self.dt_bias]),
            residual: None,
        };
        dev.matmul(
            &[t[self.z], t[self.xbc], t[self.dt]],
            s.x,
            n,
            &[MatOut::to(z), MatOut::to(mixed), dt_out],
        );
        let spec = ConvSpec {
            width: sh.conv_dim(),
            k: sh.conv_kernel,
            silu: true,
            bias: t.opt(self.conv_bias),
        };
        dev.conv1d(cx.kv_layer, mixed, t[self.conv], conv, &spec);
        let part = |at: usize, width: usize| Cols {
            x_width: sh.conv_dim(),
            x_at: at,
            out_width: width,
            out_at: 0,
            width,
        };
        dev.copy_cols(conv, x, n, &part(0, sh.d_inner));
        dev.copy_cols(conv, b, n, &part(sh.d_inner, sh.bc()));
        dev.copy_cols(conv, c, n, &part(sh.d_inner + sh.bc(), sh.bc()));
        dev.softplus(dt, n * sh.n_head);
        let io = ScanIo {
            x,
            dt,
            a: t[self.a],
            b,
            c,
            d: t[self.d],
            out: y,
        };
        dev.ssm_scan(cx.kv_layer, &io, &sh.scan());
        dev.swiglu(z, y, n * sh.d_inner);
        let eps = hp.rms_eps;
        match self.ones {
            None => dev.rms_norm(z, t[self.norm], n, sh.d_inner, eps, z),
            Some(ones) => {
                let group = sh.d_inner / sh.n_group;
                dev.rms_norm(z, t[ones], n * sh.n_group, group, eps, z);
                dev.gather_rows(t[self.norm], &vec![0; n], sh.d_inner, w);
                dev.mul(z, w, n * sh.d_inner);
            }
        }
        let out = MatOut {
            y: s.proj,
            bias: None,
            residual: Some(residual),
        };
        dev.matmul(&[t[self.out]], z, n, &[out]);
    }
}
