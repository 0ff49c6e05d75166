//! eagle3: EAGLE-3's drafter, run as the drafter stage of its target
//! ([`crate::Part::Drafter`]). Its row of position `p` enters with the token at `p + 1` and
//! a state `g`: for a row the target computed, `g = fc · [f_1; f_2; f_3]` of the target's
//! features at `eagle3.target_layers` ([`Fuse`], RMS-normed first with
//! `enc.output_norm` when `eagle3.norm_before_fc`); for a draft row, the block's own output
//! of the row before. Its one block:
//!
//! ```text
//! x      = [attn_norm(embed(token)) ; attn_norm_2(g)]          2 · n_embd wide
//! h      = attn(x) + (norm_before_residual ? attn_norm_2(g) : g)
//! out    = h + ffn(ffn_norm(h))
//! ```
//!
//! then the output norm and head. `out`, before the norm, is the next draft row's `g`.

use device::{Buf, Device, MatOut, Role};

use super::Recipe;
use crate::error::{Error, Result};
use crate::hparams::{HParams, TargetFeatures, Traits, PLAIN};
use crate::layers::attention::heads;
use crate::layers::ffn::{Activation, Ffn, GateUp};
use crate::layers::fuse::Fuse;
use crate::layers::nextn::side_by_side;
use crate::layers::{Cx, Layer};
use crate::tensors::{MatId, TensorLoader, VecId};

pub struct Eagle3;

impl Recipe for Eagle3 {
    fn name(&self) -> &'static str {
        "eagle3"
    }

    fn traits(&self) -> Traits {
        PLAIN
    }

    fn hparams(&self, md: &gguf::Metadata) -> Result<HParams> {
        let mut hp = HParams::read(md, self.name(), &self.traits())?;
        let bad = |key: &str, problem: String| Error::BadHParam {
            key: format!("eagle3.{key}"),
            problem,
        };
        if hp.n_layer != 1 {
            return Err(bad(
                "block_count",
                format!("{}: EAGLE-3 has one block", hp.n_layer),
            ));
        }
        let layers = md.i64_array("eagle3.target_layers")?;
        if layers.len() != 3 {
            let problem = format!("{layers:?}: EAGLE-3 reads three of the target's blocks");
            return Err(bad("target_layers", problem));
        }
        let layers = layers
            .iter()
            .map(|&l| usize::try_from(l).map_err(|_| bad("target_layers", format!("{l}"))))
            .collect::<Result<Vec<_>>>()?;
        let n_embd = md.u32("eagle3.target_hidden_size")? as usize;
        hp.target = Some(TargetFeatures {
            layers,
            n_embd,
            block: 0,
        });
        Ok(hp)
    }

    fn layer(&self, t: &mut TensorLoader, hp: &HParams, il: usize) -> Result<Box<dyn Layer>> {
        Ok(Box::new(Eagle3Block::load(t, hp, il)?))
    }

    fn fuse(&self, t: &mut TensorLoader, hp: &HParams) -> Result<Fuse> {
        let pre = flag(t, "eagle3.norm_before_fc")?.then_some("enc.output_norm.weight");
        Fuse::load(t, hp, pre, None)
    }
}

fn flag(t: &TensorLoader, key: &str) -> Result<bool> {
    Ok(t.metadata().opt_bool(key)?.unwrap_or(false))
}

/// See the module doc. `q`: `[q_dim, 2 · n_embd]`, `k`, `v`: `[kv_dim, 2 · n_embd]`,
/// `output`: `[n_embd, q_dim]`; the norms `[n_embd]`; `embed`: `[n_vocab, n_embd]`.
struct Eagle3Block {
    embed: MatId,
    attn_norm: VecId,
    hidden_norm: VecId,
    q: MatId,
    k: MatId,
    v: MatId,
    output: MatId,
    ffn_norm: VecId,
    ffn: Ffn,
    norm_before_residual: bool,
    /// `n_embd`.
    width: usize,
}

impl Eagle3Block {
    fn load(t: &mut TensorLoader, hp: &HParams, il: usize) -> Result<Eagle3Block> {
        let (e, nv) = (hp.n_embd, hp.n_vocab);
        let n = |s: &str| format!("blk.{il}.{s}.weight");
        Ok(Eagle3Block {
            embed: t.matrix_for("token_embd.weight", nv, e, Role::Rows)?,
            attn_norm: t.vector(&n("attn_norm"), e)?,
            hidden_norm: t.vector(&n("attn_norm_2"), e)?,
            q: t.matrix(&n("attn_q"), hp.q_dim(), 2 * e)?,
            k: t.matrix(&n("attn_k"), hp.kv_dim(), 2 * e)?,
            v: t.matrix(&n("attn_v"), hp.kv_dim(), 2 * e)?,
            output: t.matrix(&n("attn_output"), e, hp.q_dim())?,
            ffn_norm: t.vector(&n("ffn_norm"), e)?,
            ffn: Ffn::load(t, hp, il, GateUp::Apart)?,
            norm_before_residual: flag(t, "eagle3.norm_before_residual")?,
            width: e,
        })
    }
}

impl Layer for Eagle3Block {
    /// `[2 · n_embd]` (the joined input), `[n_embd]` (the embeddings), `[n_embd]` (`g`
    /// normed).
    fn scratch(&self) -> Vec<usize> {
        vec![2 * self.width, self.width, self.width]
    }

    fn needs_tokens(&self) -> bool {
        true
    }

    fn forward(&self, cx: &Cx<'_>, dev: &mut dyn Device, hidden: Buf, n: usize) {
        let (hp, s, t) = (cx.hp, cx.s, cx.t);
        let (e, eps) = (hp.n_embd, hp.rms_eps);
        let tokens = cx.tokens.expect("an EAGLE-3 row enters with its token");
        let (joined, embedded, normed) = (s.extra[0], s.extra[1], s.extra[2]);
        dev.embed(t[self.embed], tokens, embedded);
        dev.rms_norm(embedded, t[self.attn_norm], n, e, eps, embedded);
        let g = match self.norm_before_residual {
            true => hidden,
            false => normed,
        };
        dev.rms_norm(hidden, t[self.hidden_norm], n, e, eps, g);
        side_by_side(dev, [embedded, g], joined, n, e);
        let to = MatOut::to;
        dev.matmul(
            &[t[self.q], t[self.k], t[self.v]],
            joined,
            n,
            &[to(s.q), to(s.k), to(s.v)],
        );
        heads(cx, dev, n, None);
        let proj = MatOut {
            y: s.proj,
            bias: None,
            residual: Some(hidden),
        };
        dev.matmul(&[t[self.output]], s.attn, n, &[proj]);
        dev.rms_norm(hidden, t[self.ffn_norm], n, e, eps, s.x);
        self.ffn.forward(cx, dev, hidden, n, Activation::Silu);
    }
}
