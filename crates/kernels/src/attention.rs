//! Attention of one query row against the cached keys and values of its sequence.

use gguf::GgmlType;

use crate::dot::{dot, Isa};
use crate::formats::dequantize_row;

/// Cached keys or values of one sequence for one layer, stored in blocks of
/// `block_size` positions, each `[block_size, n_head_kv, head_dim]` elements of `ty`.
pub struct KvView<'a> {
    pub ty: GgmlType,
    pub blocks: &'a [&'a [u8]],
    pub block_size: usize,
    pub n_head_kv: usize,
    pub head_dim: usize,
}

impl KvView<'_> {
    /// Bytes of the `[head_dim]` vector of `kv_head` at position `pos`.
    fn vector(&self, pos: usize, kv_head: usize) -> &[u8] {
        let vb = (self
            .ty
            .row_bytes(self.head_dim as u64)
            .expect("head_dim fits the KV type")) as usize;
        let block = self.blocks[pos / self.block_size];
        let at = ((pos % self.block_size) * self.n_head_kv + kv_head) * vb;
        &block[at..at + vb]
    }
}

/// Scratch for `attend`: `scores` grows to the longest context seen.
#[derive(Default)]
pub struct AttentionScratch {
    scores: Vec<f32>,
    vec: Vec<f32>,
}

/// Grouped-query attention for the query heads `heads` (all mapped to `kv_head`) of one row
/// over positions `0..n_kv` of its sequence.
///
/// `q` is the row's `[n_head, head_dim]`; `out` is `[heads.len(), head_dim]`, the chosen
/// heads' outputs. Scores are `scale · q·k`, softmax over positions in order,
/// then `out = Σ_t p_t v_t` accumulated in position order.
#[allow(clippy::too_many_arguments)]
pub fn attend(
    q: &[f32],
    keys: &KvView,
    values: &KvView,
    kv_head: usize,
    heads: std::ops::Range<usize>,
    n_kv: usize,
    scale: f32,
    scratch: &mut AttentionScratch,
    out: &mut [f32],
) {
    let hd = keys.head_dim;
    let isa = Isa::detect();
    let n_group = heads.len();
    scratch.scores.resize(n_group * n_kv, 0.0);
    scratch.vec.resize(hd, 0.0);
    let AttentionScratch { scores, vec } = scratch;
    for t in 0..n_kv {
        dequantize_row(keys.ty, keys.vector(t, kv_head), vec).expect("KV type is supported");
        for (g, h) in heads.clone().enumerate() {
            scores[g * n_kv + t] = dot(isa, &q[h * hd..(h + 1) * hd], vec) * scale;
        }
    }
    for g in 0..n_group {
        crate::ops::softmax_inplace(&mut scores[g * n_kv..(g + 1) * n_kv]);
    }
    for h in heads.clone() {
        let o = h - heads.start;
        out[o * hd..(o + 1) * hd].fill(0.0);
    }
    for t in 0..n_kv {
        dequantize_row(values.ty, values.vector(t, kv_head), vec).expect("KV type is supported");
        for (g, h) in heads.clone().enumerate() {
            let p = scores[g * n_kv + t];
            let o = h - heads.start;
            for (o, &v) in out[o * hd..(o + 1) * hd].iter_mut().zip(vec.iter()) {
                *o += p * v;
            }
        }
    }
}
