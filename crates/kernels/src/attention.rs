//! Attention of one query row against the cached keys and values of its sequence.

use gguf::GgmlType;

use crate::dot::{dot, Isa};
use crate::formats::dequantize_row;
use crate::ops::{exp, exp_shifted};

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

/// Positions per chunk of the online softmax. Chunks start at multiples of `KV_CHUNK` from
/// position 0, so a row's chunks, and with them its arithmetic, are the same in any batch.
pub const KV_CHUNK: usize = 64;

/// Scratch for `attend`: one chunk of scores per head and one dequantized vector.
#[derive(Default)]
pub struct AttentionScratch {
    scores: Vec<f32>,
    vec: Vec<f32>,
    max: Vec<f32>,
    sum: Vec<f32>,
}

/// Grouped-query attention for the query heads `heads` (all mapped to `kv_head`) of one row
/// over positions `0..n_kv` of its sequence, flash-style: positions are taken in chunks of
/// [`KV_CHUNK`] in order; per head a running max `m`, sum `l` and output `o` are rescaled by
/// `e^(m_old - m_new)` as each chunk raises the max, and `o / l` is the result.
///
/// `q` is the row's `[n_head, head_dim]`; `out` is `[heads.len(), head_dim]`, the chosen
/// heads' outputs. Scores are `scale · q·k`; `e^x` is [`crate::ops::exp`].
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
    scratch.scores.resize(n_group * KV_CHUNK, 0.0);
    scratch.vec.resize(hd, 0.0);
    scratch.max.clear();
    scratch.max.resize(n_group, f32::NEG_INFINITY);
    scratch.sum.clear();
    scratch.sum.resize(n_group, 0.0);
    let AttentionScratch {
        scores,
        vec,
        max,
        sum,
    } = scratch;
    out[..n_group * hd].fill(0.0);
    for c0 in (0..n_kv).step_by(KV_CHUNK) {
        let len = KV_CHUNK.min(n_kv - c0);
        for t in 0..len {
            dequantize_row(keys.ty, keys.vector(c0 + t, kv_head), vec)
                .expect("KV type is supported");
            for (g, h) in heads.clone().enumerate() {
                scores[g * KV_CHUNK + t] = dot(isa, &q[h * hd..(h + 1) * hd], vec) * scale;
            }
        }
        for g in 0..n_group {
            let s = &mut scores[g * KV_CHUNK..g * KV_CHUNK + len];
            let m = s.iter().copied().fold(max[g], f32::max);
            let rescale = exp(max[g] - m);
            exp_shifted(s, m);
            let l = s.iter().fold(sum[g] * rescale, |l, v| l + v);
            for o in &mut out[g * hd..(g + 1) * hd] {
                *o *= rescale;
            }
            (max[g], sum[g]) = (m, l);
        }
        for t in 0..len {
            dequantize_row(values.ty, values.vector(c0 + t, kv_head), vec)
                .expect("KV type is supported");
            for g in 0..n_group {
                let p = scores[g * KV_CHUNK + t];
                for (o, &v) in out[g * hd..(g + 1) * hd].iter_mut().zip(vec.iter()) {
                    *o += p * v;
                }
            }
        }
    }
    for g in 0..n_group {
        let inv = 1.0 / sum[g];
        for o in &mut out[g * hd..(g + 1) * hd] {
            *o *= inv;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::formats::quantize_row;
    use crate::testing::data;

    /// Flash-style chunks agree with a two-pass float64 softmax attention, for contexts
    /// shorter and longer than a chunk.
    #[test]
    fn chunked_attention_matches_two_pass_reference() {
        let (hd, n_head_kv, group, bs) = (64, 2, 3, 16);
        for n_kv in [1usize, 5, 64, 65, 200] {
            let n_blocks = n_kv.div_ceil(bs);
            let raw = |seed| {
                let v = data(n_blocks * bs * n_head_kv * hd, seed);
                let mut b = vec![0u8; v.len() * 2];
                quantize_row(GgmlType::F16, &v, &mut b).unwrap();
                (v, b)
            };
            let ((kf, kb), (vf, vb)) = (raw(1), raw(2));
            let bytes = bs * n_head_kv * hd * 2;
            let kbl: Vec<&[u8]> = kb.chunks(bytes).collect();
            let vbl: Vec<&[u8]> = vb.chunks(bytes).collect();
            let view = |blocks| KvView {
                ty: GgmlType::F16,
                blocks,
                block_size: bs,
                n_head_kv,
                head_dim: hd,
            };
            let q: Vec<f32> = data(n_head_kv * group * hd, 3)
                .iter()
                .map(|v| v * 40.0)
                .collect();
            let mut out = vec![0f32; group * hd];
            let kv_head = 1;
            let heads = group..2 * group;
            attend(
                &q,
                &view(&kbl),
                &view(&vbl),
                kv_head,
                heads.clone(),
                n_kv,
                0.125,
                &mut AttentionScratch::default(),
                &mut out,
            );
            let at = |f: &[f32], t: usize| {
                let f16 = |x: f32| half::f16::from_f32(x).to_f32() as f64;
                (0..hd)
                    .map(|i| f16(f[(t * n_head_kv + kv_head) * hd + i]))
                    .collect::<Vec<_>>()
            };
            for (g, h) in heads.enumerate() {
                let qh = &q[h * hd..(h + 1) * hd];
                let s: Vec<f64> = (0..n_kv)
                    .map(|t| {
                        at(&kf, t)
                            .iter()
                            .zip(qh)
                            .map(|(k, q)| k * *q as f64)
                            .sum::<f64>()
                            * 0.125
                    })
                    .collect();
                let m = s.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let w: Vec<f64> = s.iter().map(|v| (v - m).exp()).collect();
                let z: f64 = w.iter().sum();
                for i in 0..hd {
                    let want: f64 = (0..n_kv).map(|t| w[t] / z * at(&vf, t)[i]).sum();
                    let got = out[g * hd + i] as f64;
                    assert!(
                        (got - want).abs() < 1e-5,
                        "n_kv {n_kv} head {h} dim {i}: {got} vs {want}"
                    );
                }
            }
        }
    }
}
