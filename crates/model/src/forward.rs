use std::ops::Range;

use device::{Buf, Device, MoeScratch};

use crate::hparams::HParams;
use crate::upload::DeviceWeights;
use crate::{Error, Model, Result};

/// Activation buffers on a device for up to `max_rows` rows, allocated once.
pub struct Scratch {
    pub max_rows: usize,
    /// `[rows, n_embd]` normalized input of a block.
    pub x: Buf,
    /// `[rows, q_dim]`.
    pub q: Buf,
    /// `[rows, kv_dim]`.
    pub k: Buf,
    pub v: Buf,
    /// `[rows, q_dim]` attention output before the projection.
    pub attn: Buf,
    /// `[rows, n_embd]` block output before the residual add.
    pub proj: Buf,
    /// `[rows, n_ff]` (dense blocks) or `[rows, shared n_ff]` (a shared expert).
    pub gate: Buf,
    pub up: Buf,
    /// The mixture blocks' buffers (models with experts).
    pub moe: Option<MoeScratch>,
}

/// Widths (floats per row) of the [`Scratch`] buffers.
struct Widths {
    dense_ff: usize,
    /// Per row: router (`n_expert`), and `k` gathered rows of `2 · n_embd + 2 · n_ff_exp`.
    moe: Option<(usize, usize, usize, usize)>,
}

impl Widths {
    fn of(hp: &HParams) -> Widths {
        let dense = (0..hp.n_layer).any(|il| !hp.is_moe_layer(il));
        let shared = hp.moe.as_ref().and_then(|m| m.shared).map_or(0, |s| s.n_ff);
        Widths {
            dense_ff: if dense { hp.n_ff } else { 0 }.max(shared),
            moe: hp
                .moe
                .as_ref()
                .map(|m| (m.n_expert, m.n_expert_used, hp.n_embd, m.n_ff_exp)),
        }
    }
}

impl Scratch {
    pub fn new(dev: &mut dyn Device, hp: &HParams, max_rows: usize) -> Result<Scratch> {
        let mut z = |w: usize| dev.alloc(max_rows * w.max(1));
        let widths = Widths::of(hp);
        let moe = match widths.moe {
            None => None,
            Some((ne, k, e, ff)) => Some(MoeScratch {
                probs: z(ne)?,
                x: z(k * e)?,
                gate: z(k * ff)?,
                up: z(k * ff)?,
                out: z(k * e)?,
            }),
        };
        Ok(Scratch {
            max_rows,
            x: z(hp.n_embd)?,
            q: z(hp.q_dim())?,
            k: z(hp.kv_dim())?,
            v: z(hp.kv_dim())?,
            attn: z(hp.q_dim())?,
            proj: z(hp.n_embd)?,
            gate: z(widths.dense_ff)?,
            up: z(widths.dense_ff)?,
            moe,
        })
    }

    /// Bytes `Scratch::new(dev, hp, max_rows)` allocates, with what a device keeps per row
    /// of a mixture's routing.
    pub fn bytes(hp: &HParams, max_rows: usize) -> u64 {
        let widths = Widths::of(hp);
        let per_row = 2 * hp.n_embd + 2 * hp.q_dim() + 2 * hp.kv_dim() + 2 * widths.dense_ff;
        let moe = widths.moe.map_or(0, |(ne, k, e, ff)| {
            let choice = std::mem::size_of::<(usize, f32)>() + std::mem::size_of::<usize>();
            max_rows * (4 * ne + k * (choice + 4 * (2 * e + 2 * ff)))
                + (ne + 1) * std::mem::size_of::<usize>()
        });
        (max_rows * per_row * 4 + moe) as u64
    }
}

impl Model {
    /// Embedding rows for `tokens` into `hidden` (`[tokens.len(), n_embd]`), scaled where
    /// the architecture scales them.
    pub fn embed(
        &self,
        dev: &mut dyn Device,
        w: &DeviceWeights,
        tokens: &[u32],
        hidden: Buf,
    ) -> Result<()> {
        let table = w.token_embd.ok_or(Error::NotInStage("the embeddings"))?;
        let n_vocab = self.hparams.n_vocab;
        if let Some(&id) = tokens.iter().find(|&&t| t as usize >= n_vocab) {
            return Err(Error::TokenOutOfRange { id, n_vocab });
        }
        dev.embed(table, tokens, hidden);
        if let Some(f) = self.hparams.embed_scale {
            dev.scale(hidden, tokens.len() * self.hparams.n_embd, f);
        }
        Ok(())
    }

    /// Runs blocks `layers` (of the stage's) over `hidden` (`[n, n_embd]`, updated in place)
    /// for the rows of the step begun on `dev`, writing each row's keys and values into the
    /// device's KV pool (which holds the stage's blocks, the first at index 0).
    pub fn forward_layers(
        &self,
        dev: &mut dyn Device,
        w: &DeviceWeights,
        s: &Scratch,
        layers: Range<usize>,
        hidden: Buf,
        n: usize,
    ) {
        assert!(
            n <= s.max_rows,
            "{n} rows exceed the scratch of {}",
            s.max_rows
        );
        let block = self.hparams.arch.spec().block;
        for il in layers {
            let lw = &w.layers[il - self.stage.layers.start];
            block(self, dev, il, lw, hidden, n, s);
        }
    }

    /// Final norm and output head: `logits` (`[n, n_logits]`) for `x` (`[n, n_embd]`,
    /// normalized in place).
    pub fn output(&self, dev: &mut dyn Device, w: &DeviceWeights, x: Buf, n: usize, logits: Buf) {
        let head = w.output.expect("the stage holds the output head");
        self.output_norm(dev, w, x, n);
        dev.matmul(&[head], x, n, &[device::MatOut::to(logits)]);
    }

    /// The output norm of `x` (`[n, n_embd]`, in place): the final hidden states that
    /// embeddings pool.
    pub fn output_norm(&self, dev: &mut dyn Device, w: &DeviceWeights, x: Buf, n: usize) {
        let hp = &self.hparams;
        let norm = w.output_norm.expect("the stage holds the output head");
        dev.rms_norm(x, norm, n, hp.n_embd, hp.rms_eps, x);
    }
}
