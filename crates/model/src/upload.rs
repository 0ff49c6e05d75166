//! A stage's weights on a device: what [`Model::upload`] gives, handles mirroring
//! [`crate::Weights`] (names as in GGUF).

use device::{Buf, Device, Mat, MatrixSource, Op, Progress, Role};

use crate::weights::{Ffn, Weight};
use crate::{Error, Model, Result};

/// See the module doc.
pub struct DeviceWeights {
    /// `[n_vocab, n_embd]`, when the stage embeds.
    pub token_embd: Option<Mat>,
    pub layers: Vec<LayerMats>,
    /// `[n_embd]`, when the stage ends with the head.
    pub output_norm: Option<Buf>,
    /// `[n_logits, n_embd]`: the output head (the restricted one when the model has it).
    pub output: Option<Mat>,
}

/// One block's weights on a device.
pub struct LayerMats {
    pub attn_norm: Buf,
    pub attn_q: Mat,
    pub attn_k: Mat,
    pub attn_v: Mat,
    pub attn_q_bias: Option<Buf>,
    pub attn_k_bias: Option<Buf>,
    pub attn_v_bias: Option<Buf>,
    pub attn_q_norm: Option<Buf>,
    pub attn_k_norm: Option<Buf>,
    pub attn_output: Mat,
    pub post_attn_norm: Option<Buf>,
    pub ffn_norm: Buf,
    pub ffn: FfnMats,
    pub post_ffn_norm: Option<Buf>,
}

pub enum FfnMats {
    Dense(MlpMats),
    Moe(MoeMats),
}

/// `gate`, `up`: `[n_ff, n_embd]`; `down`: `[n_embd, n_ff]`.
pub struct MlpMats {
    pub gate: Mat,
    pub up: Mat,
    pub down: Mat,
}

/// `n_expert` of each expert matrix, the router, and a shared expert with its gate.
pub struct MoeMats {
    pub ffn_gate_inp: Mat,
    pub ffn_gate_exps: Vec<Mat>,
    pub ffn_up_exps: Vec<Mat>,
    pub ffn_down_exps: Vec<Mat>,
    pub shared: Option<MlpMats>,
    pub ffn_gate_inp_shexp: Option<Buf>,
}

/// The matrices to upload, in order; each [`Sources::add`] returns the index whose handle
/// [`Sources::upload`] gives back.
struct Sources<'m> {
    model: &'m Model,
    list: Vec<MatrixSource>,
}

impl Sources<'_> {
    fn add(&mut self, w: &Weight, role: Role) -> usize {
        self.list.push(w.source(&self.model.file, role));
        self.list.len() - 1
    }
}

fn vector(dev: &mut dyn Device, v: &[f32]) -> Result<Buf> {
    let b = dev.alloc(v.len())?;
    dev.upload(b, 0, v);
    Ok(b)
}

fn opt_vector(dev: &mut dyn Device, v: &Option<Vec<f32>>) -> Result<Option<Buf>> {
    v.as_deref().map(|v| vector(dev, v)).transpose()
}

impl Model {
    /// The ops a forward of this stage needs.
    pub fn ops(&self) -> Vec<Op> {
        let mut ops = vec![
            Op::RmsNorm,
            Op::MatMul,
            Op::Rope,
            Op::KvStore,
            Op::Attention,
            Op::Add,
            Op::Swiglu,
            Op::AllFinite,
        ];
        if self.stage.embed {
            ops.push(Op::Embed);
        }
        if self.stage.head {
            ops.extend([Op::GatherRows, Op::Argmax]);
        }
        if self.hparams.moe.is_some() {
            ops.push(Op::Moe);
        }
        ops.extend(self.hparams.arch.spec().extra_ops);
        if self.stage.embed && self.hparams.embed_scale.is_some() {
            ops.push(Op::Scale);
        }
        ops
    }

    /// Uploads the stage's weights to `dev`, refusing (before anything is uploaded) an op
    /// or weight type it does not run, named.
    pub fn upload(&self, dev: &mut dyn Device, progress: &Progress<'_>) -> Result<DeviceWeights> {
        if let Some(op) = self.ops().into_iter().find(|&op| !dev.supports(op)) {
            return Err(Error::Device(device::Error::Unsupported {
                device: dev.describe(),
                what: format!("run the {op:?} op"),
            }));
        }
        let w = &self.weights;
        let mut src = Sources {
            model: self,
            list: Vec::new(),
        };
        let embd = w.token_embd.as_ref().map(|t| src.add(t, Role::Rows));
        let head = match (&self.head, &w.output) {
            (Some(h), _) => {
                src.list.push(h.source());
                Some(src.list.len() - 1)
            }
            (None, Some(o)) => Some(src.add(o, Role::Multiply)),
            (None, None) => None,
        };
        let mut per_layer = Vec::with_capacity(w.layers.len());
        for l in &w.layers {
            let attn = [&l.attn_q, &l.attn_k, &l.attn_v, &l.attn_output]
                .map(|m| src.add(m, Role::Multiply));
            let ffn: Vec<usize> = l
                .ffn
                .matrices()
                .into_iter()
                .map(|m| src.add(m, Role::Multiply))
                .collect();
            per_layer.push((attn, ffn));
        }
        if let Some(bad) = src.list.iter().find(|s| !dev.supports_type(s.ty)) {
            return Err(Error::Device(device::Error::Unsupported {
                device: dev.describe(),
                what: format!("compute with tensor '{}' of type {}", bad.name, bad.ty),
            }));
        }
        let mats = dev.upload_matrices(&src.list, progress)?;
        let mut layers = Vec::with_capacity(w.layers.len());
        for (l, (attn, ffn)) in w.layers.iter().zip(per_layer) {
            let m = |i: usize| mats[i];
            let ffn = match &l.ffn {
                Ffn::Dense(_) => FfnMats::Dense(MlpMats {
                    gate: m(ffn[0]),
                    up: m(ffn[1]),
                    down: m(ffn[2]),
                }),
                Ffn::Moe(moe) => {
                    let ne = moe.ffn_gate_exps.len();
                    let exps = |k: usize| ffn[1 + k * ne..1 + (k + 1) * ne].iter().map(|&i| m(i));
                    FfnMats::Moe(MoeMats {
                        ffn_gate_inp: m(ffn[0]),
                        ffn_gate_exps: exps(0).collect(),
                        ffn_up_exps: exps(1).collect(),
                        ffn_down_exps: exps(2).collect(),
                        shared: moe.shared.as_ref().map(|_| MlpMats {
                            gate: m(ffn[1 + 3 * ne]),
                            up: m(ffn[2 + 3 * ne]),
                            down: m(ffn[3 + 3 * ne]),
                        }),
                        ffn_gate_inp_shexp: opt_vector(dev, &moe.ffn_gate_inp_shexp)?,
                    })
                }
            };
            layers.push(LayerMats {
                attn_norm: vector(dev, &l.attn_norm)?,
                attn_q: m(attn[0]),
                attn_k: m(attn[1]),
                attn_v: m(attn[2]),
                attn_q_bias: opt_vector(dev, &l.attn_q_bias)?,
                attn_k_bias: opt_vector(dev, &l.attn_k_bias)?,
                attn_v_bias: opt_vector(dev, &l.attn_v_bias)?,
                attn_q_norm: opt_vector(dev, &l.attn_q_norm)?,
                attn_k_norm: opt_vector(dev, &l.attn_k_norm)?,
                attn_output: m(attn[3]),
                post_attn_norm: opt_vector(dev, &l.post_attn_norm)?,
                ffn_norm: vector(dev, &l.ffn_norm)?,
                ffn,
                post_ffn_norm: opt_vector(dev, &l.post_ffn_norm)?,
            });
        }
        Ok(DeviceWeights {
            token_embd: embd.map(|i| mats[i]),
            layers,
            output_norm: w
                .output_norm
                .as_deref()
                .map(|v| vector(dev, v))
                .transpose()?,
            output: head.map(|i| mats[i]),
        })
    }
}
