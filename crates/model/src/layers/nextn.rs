//! A multi-token-prediction (NextN) block, as DeepSeek-V3 introduced and Qwen 3.5 ships:
//! the row of position `p` enters as the target's final hidden state `h` of position
//! `p - 1` (after the output norm) with the token `x` at `p`, and
//!
//! ```text
//! hidden = eh_proj · [enorm(embed(x)) ; hnorm(h)]
//! ```
//!
//! goes through a decoder block of the architecture's own kind (with its own KV); the
//! model's output head (or the block's `shared_head_*`) then predicts the token at `p + 1`.
//! A model of several residual streams (DeepSeek-V4's hyper-connections) enters `h` as its
//! streams before they merge, each stream joined with the embedding and projected alone.

use device::{Buf, Cols, Device, MatOut, Role};

use super::{Cx, Layer, LayerMemory};
use crate::error::Result;
use crate::hparams::HParams;
use crate::tensors::{MatId, TensorLoader, VecId};

/// `eh_proj`: `[n_embd, 2 · n_embd]` (the embedding's half first); `enorm`, `hnorm`:
/// `[n_embd]`; the embedding table `blk.{il}.nextn.embed_tokens` or the model's.
pub struct Nextn {
    embed: MatId,
    enorm: VecId,
    hnorm: VecId,
    eh_proj: MatId,
    block: Box<dyn Layer>,
    /// The model's residual streams ([`HParams::streams`]).
    streams: usize,
    scratch: Vec<usize>,
}

impl Nextn {
    /// The entry of NextN block `il` around `block`, the decoder block it feeds.
    pub fn load(
        t: &mut TensorLoader,
        hp: &HParams,
        il: usize,
        block: Box<dyn Layer>,
    ) -> Result<Nextn> {
        let (e, nv) = (hp.n_embd, hp.n_vocab);
        let n = |s: &str| format!("blk.{il}.nextn.{s}.weight");
        let own = n("embed_tokens");
        let table = if t.has(&own) {
            own
        } else {
            "token_embd.weight".into()
        };
        let streams = hp.streams;
        let mut scratch = block.scratch();
        scratch.resize(scratch.len().max(2), 0);
        scratch[0] = scratch[0].max(2 * e * streams);
        scratch[1] = scratch[1].max(e * streams);
        Ok(Nextn {
            embed: t.matrix_for(&table, nv, e, Role::Rows)?,
            enorm: t.vector(&n("enorm"), e)?,
            hnorm: t.vector(&n("hnorm"), e)?,
            eh_proj: t.matrix(&n("eh_proj"), e, 2 * e)?,
            block,
            streams,
            scratch,
        })
    }
}

impl Layer for Nextn {
    fn memory(&self, hp: &HParams, il: usize) -> LayerMemory {
        self.block.memory(hp, il)
    }

    /// The block's buffers, the first at least `[2 · hidden_width]` (the joined input) and
    /// the second `[hidden_width]` (the embeddings, one a stream); [`Nextn::forward`] uses
    /// them before the block.
    fn scratch(&self) -> Vec<usize> {
        self.scratch.clone()
    }

    fn needs_tokens(&self) -> bool {
        true
    }

    fn forward(&self, cx: &Cx<'_>, dev: &mut dyn Device, hidden: Buf, n: usize) {
        let (hp, s, t) = (cx.hp, cx.s, cx.t);
        let (e, k) = (hp.n_embd, self.streams);
        let tokens = cx
            .tokens
            .expect("a NextN block's rows enter with their tokens");
        let (joined, embedded) = (s.extra[0], s.extra[1]);
        // One embedding a row (in `joined` while it is free), then one a stream.
        let own = if k == 1 { embedded } else { joined };
        dev.embed(t[self.embed], tokens, own);
        dev.rms_norm(own, t[self.enorm], n, e, hp.rms_eps, own);
        if k > 1 {
            let each: Vec<usize> = (0..n * k).map(|r| r / k).collect();
            dev.gather_rows(joined, &each, e, embedded);
        }
        dev.rms_norm(hidden, t[self.hnorm], n * k, e, hp.rms_eps, hidden);
        side_by_side(dev, [embedded, hidden], joined, n * k, e);
        dev.matmul(&[t[self.eh_proj]], joined, n * k, &[MatOut::to(hidden)]);
        self.block.forward(cx, dev, hidden, n);
    }
}

/// `joined` (`[n, 2 · e]`) from `halves` (`[n, e]` each) side by side, the first's first:
/// the entries of NextN and EAGLE-3 blocks.
pub fn side_by_side(dev: &mut dyn Device, halves: [Buf; 2], joined: Buf, n: usize, e: usize) {
    for (x, at) in halves.into_iter().zip([0, e]) {
        let c = Cols {
            x_width: e,
            x_at: 0,
            out_width: 2 * e,
            out_at: at,
            width: e,
        };
        dev.copy_cols(x, joined, n, &c);
    }
}
