//! The fusion of a target's features into a drafter's hidden state (EAGLE-3's and
//! DFlash's `fc`):
//!
//! ```text
//! hidden = post(fc · pre(features))
//! ```
//!
//! `features` being the target's states at its [`crate::HParams::target`] blocks side by
//! side, `pre` and `post` RMSNorms where the recipe has them.

use device::{Buf, Device, MatOut};

use crate::error::{Error, Result};
use crate::hparams::HParams;
use crate::tensors::{DeviceTensors, MatId, TensorLoader, VecId};

/// `fc`: `[n_embd, width]`; `pre`: `[width]`; `post`: `[n_embd]`.
pub struct Fuse {
    pre: Option<VecId>,
    fc: MatId,
    post: Option<VecId>,
    width: usize,
}

impl Fuse {
    /// `fc.weight`, and the norms named `pre` and `post` where given.
    pub fn load(
        t: &mut TensorLoader,
        hp: &HParams,
        pre: Option<&str>,
        post: Option<&str>,
    ) -> Result<Fuse> {
        let target = hp
            .target
            .as_ref()
            .ok_or_else(|| Error::BadStage(format!("{} reads no target's features", hp.arch)))?;
        let width = target.layers.len() * target.n_embd;
        Ok(Fuse {
            pre: pre.map(|name| t.vector(name, width)).transpose()?,
            fc: t.matrix("fc.weight", hp.n_embd, width)?,
            post: post.map(|name| t.vector(name, hp.n_embd)).transpose()?,
            width,
        })
    }

    /// Floats of a row's features.
    pub fn width(&self) -> usize {
        self.width
    }

    /// `hidden` (`[n, n_embd]`) from `features` (`[n, width]`, normed in place where the
    /// recipe norms them first).
    pub fn forward(
        &self,
        hp: &HParams,
        t: &DeviceTensors,
        dev: &mut dyn Device,
        features: Buf,
        hidden: Buf,
        n: usize,
    ) {
        if let Some(pre) = self.pre {
            dev.rms_norm(features, t[pre], n, self.width, hp.rms_eps, features);
        }
        dev.matmul(&[t[self.fc]], features, n, &[MatOut::to(hidden)]);
        if let Some(post) = self.post {
            dev.rms_norm(hidden, t[post], n, hp.n_embd, hp.rms_eps, hidden);
        }
    }
}
