//! The activation buffers a forward works in, sized once from the hyper-parameters.

use device::{Buf, Device, MoeScratch};

use crate::error::Result;
use crate::hparams::HParams;

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
    /// The buffers blocks ask for ([`crate::layers::Layer::scratch`]): `extra[i]` is
    /// `[rows, widths[i]]` for the `widths` it was made with.
    pub extra: Vec<Buf>,
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
    /// The buffers for `hp` and, for the blocks' own, `extra` floats per row each.
    pub fn new(
        dev: &mut dyn Device,
        hp: &HParams,
        extra: &[usize],
        max_rows: usize,
    ) -> Result<Scratch> {
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
        let extra = extra
            .iter()
            .map(|&w| z(w))
            .collect::<std::result::Result<_, _>>()?;
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
            extra,
        })
    }

    /// Bytes `Scratch::new(dev, hp, extra, max_rows)` allocates, with what a device keeps
    /// per row of a mixture's routing.
    pub fn bytes(hp: &HParams, extra: &[usize], max_rows: usize) -> u64 {
        let widths = Widths::of(hp);
        let per_row = 2 * hp.n_embd
            + 2 * hp.q_dim()
            + 2 * hp.kv_dim()
            + 2 * widths.dense_ff
            + extra.iter().map(|w| w.max(&1)).sum::<usize>();
        let moe = widths.moe.map_or(0, |(ne, k, e, ff)| {
            let choice = std::mem::size_of::<(usize, f32)>() + std::mem::size_of::<usize>();
            max_rows * (4 * ne + k * (choice + 4 * (2 * e + 2 * ff)))
                + (ne + 1) * std::mem::size_of::<usize>()
        });
        (max_rows * per_row * 4 + moe) as u64
    }
}
