//! Compressed sparse attention (DeepSeek-V4's): each query attends, with one shared key
//! head that is also its value (`K = V`) and a sink per head, to the raw keys of the last
//! `window` positions and to compressed rows, each pooling `ratio` positions, that the
//! layer writes as the sequence grows. With ratio 4 a lightning indexer picks the `top_k`
//! compressed rows a query sees; with ratio 128 it sees them all; with ratio 0 none.
//!
//! Per position `p` of a sequence, turning the last `n_rot` dimensions of a head (pairs
//! `(2i, 2i + 1)` after the first `head_dim - n_rot`):
//!
//! ```text
//! raw(p)   = turn(kv(p), p)
//! row(p)   = comp.kv(p),  score(p) = comp.score(p) + ape[p mod r]   (2·d wide with r = 4)
//! block b  = positions b·r .. b·r + r - 1, complete at p = b·r + r - 1:
//!   C̃_b[δ] = Σ_j softmax_j(score_j[δ]) · row_j[δ]   per channel δ < d, over
//!            r = 128: the block's positions;  r = 4: the previous block's positions on
//!            the first half (channel δ) and the block's own on the second (d + δ)
//!   C_b    = turn(rms_norm(C̃_b) · norm, b·r)                     (the compressed rope)
//! a query at p sees raw(j) for p - window < j <= p (j <= the last position of its
//! sequence's rows in the step, not causal), and C_b for b < (p + 1) / r (ratio 4: those
//! the indexer picks):
//!   I(b)   = Σ_h w_h(p) / √(c · H_i) · relu(turn(qi_h(p), p) · K^I_b)
//!            the top_k blocks by I, all of them when no more are visible (ties: lower b)
//!   l_h(j) = scale · turn(q_h(p), p) · K_j,     α = softmax over j and the sink s_h
//!   out_h  = turn⁻¹(Σ_j α_h(j) · K_j, p)
//! ```
//!
//! where K^I_b is an indexer block computed as C_b from the indexer's own rows (`c` wide).
//! Every row a step writes is stored before any is read, so a query's result depends on
//! its sequence's positions alone, whatever the step ([`crate::Device`]'s batch
//! invariance). The records each position keeps are [`SparseSpec::layout`]'s.

use std::ops::Range;

use crate::host::HostBufs;
use crate::records::Records;
use crate::{rope_angles, Buf, RopeSpec, Row};

/// One compressed-sparse attention layer's shape.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SparseSpec {
    pub n_head: usize,
    /// `d`: a query head, the key, a compressed row.
    pub head_dim: usize,
    /// Raw positions a query sees, its own included.
    pub window: usize,
    /// `false`: a row also sees the step's later rows of its sequence, those within the
    /// window after it too (a block drafter's block, whose rows see one another).
    pub causal: bool,
    /// Positions per compressed row: 0 (none), 4 (overlapping, with the indexer) or 128.
    pub ratio: usize,
    pub scale: f32,
    pub rms_eps: f32,
    /// The turn of queries, raw keys and outputs (`head_dim`, `n_rot` of the layer).
    pub rope: RopeSpec,
    /// The turn of compressed rows and indexer queries (its `head_dim` ignored).
    pub comp_rope: RopeSpec,
    pub indexer: Option<IndexerSpec>,
}

/// The lightning indexer of a ratio-4 layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndexerSpec {
    pub n_head: usize,
    /// `c`: an indexer head and key.
    pub head_dim: usize,
    pub top_k: usize,
}

/// A compressor's inputs for the step's rows: `kv`, `score` `[rows, coff · e]` (coff 2
/// for ratio 4, else 1), `ape` `[ratio, coff · e]`, `norm` `[e]`.
#[derive(Debug, Clone, Copy)]
pub struct CompIo {
    pub kv: Buf,
    pub score: Buf,
    pub ape: Buf,
    pub norm: Buf,
}

/// The buffers of [`crate::Device::sparse_attention`] for the step's rows.
#[derive(Debug, Clone, Copy)]
pub struct SparseIo {
    /// `[rows, n_head · d]`, each head RMS-normalized, not turned.
    pub q: Buf,
    /// `[rows, d]`, normalized, not turned.
    pub kv: Buf,
    /// `[n_head]`.
    pub sinks: Buf,
    /// `[rows, n_head · d]`.
    pub out: Buf,
    /// Ratio 4 and 128.
    pub comp: Option<CompIo>,
    /// Ratio 4: the indexer's compressor (`e = c`), its queries `[rows, H_i · c]` (not
    /// turned) and head weights `[rows, H_i]`.
    pub index: Option<(CompIo, Buf, Buf)>,
}

/// Where a record keeps each field: offsets into a position's recent part, and into the
/// kept parts of the [`SparseSpec::span`] positions ending at a block's last.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    /// The turned raw key (`d`, recent).
    pub raw: usize,
    /// The compressor's row and score of the position (`coff · d` each, recent) and the
    /// compressed row of a block (`d`, kept).
    pub comp: Option<[usize; 3]>,
    /// The same for the indexer (`2c`, `2c`, `c`).
    pub lid: Option<[usize; 3]>,
}

impl SparseSpec {
    /// Rows a compressor pools per channel: ratio 4 overlaps the previous block.
    fn coff(&self) -> usize {
        if self.ratio == 4 {
            2
        } else {
            1
        }
    }

    /// Positions over whose kept parts a block's compressed rows lie: the block, or the
    /// last [`BLOCK_SIZE`](kv::BLOCK_SIZE) of its positions.
    pub fn span(&self) -> usize {
        self.ratio.min(kv::BLOCK_SIZE)
    }

    /// What the layer keeps of each position: the recent part (raw key, compressor rows
    /// and scores) and the kept part (a share of each block's compressed rows).
    pub fn record(&self) -> kv::RecordKv {
        let (d, c) = (self.head_dim, self.indexer.map_or(0, |i| i.head_dim));
        let comp = if self.ratio > 0 {
            2 * self.coff() * d
        } else {
            0
        };
        kv::RecordKv {
            recent: d + comp + 4 * c,
            kept: match self.ratio {
                0 => 0,
                _ => (d + c).div_ceil(self.span()),
            },
        }
    }

    /// Positions a row reads the recent parts of, its own included: the window's, and
    /// the rows its compressor pools when it ends a block.
    pub fn lookback(&self) -> usize {
        self.window.max(self.coff() * self.ratio)
    }

    /// The fields of a record.
    pub fn layout(&self) -> Layout {
        let (d, c) = (self.head_dim, self.indexer.map_or(0, |i| i.head_dim));
        let w = self.coff() * d;
        Layout {
            raw: 0,
            comp: (self.ratio > 0).then_some([d, d + w, 0]),
            lid: self.indexer.map(|_| [d + 2 * w, d + 2 * w + 2 * c, d]),
        }
    }
}

/// Turns the last `spec.n_rot` dimensions of `x` (`[spec.head_dim]` per head, `heads` of
/// them) by position `pos`, backwards when `inverse`.
pub fn turn_tail(x: &mut [f32], pos: usize, spec: &RopeSpec, inverse: bool) {
    let mut cs = vec![(0f32, 0f32); spec.n_rot / 2];
    rope_angles(pos, spec, &mut cs);
    let off = spec.head_dim - spec.n_rot;
    for head in x.chunks_exact_mut(spec.head_dim) {
        for (i, &(cos, sin)) in cs.iter().enumerate() {
            let sin = if inverse { -sin } else { sin };
            let (a, b) = (head[off + 2 * i], head[off + 2 * i + 1]);
            head[off + 2 * i] = a * cos - b * sin;
            head[off + 2 * i + 1] = a * sin + b * cos;
        }
    }
}

/// `a · b` summed in 8 lanes (element `i` in lane `i mod 8`), the lanes then in order:
/// one fixed order for any row, which compilers turn into vector code.
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut lanes = [0f32; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = ca
        .remainder()
        .iter()
        .zip(cb.remainder())
        .map(|(x, y)| x * y)
        .sum();
    for (x, y) in ca.zip(cb) {
        for i in 0..8 {
            lanes[i] += x[i] * y[i];
        }
    }
    lanes.iter().sum::<f32>() + tail
}

/// A compressor of `e` floats per compressed row at ratio `r`, its fields at `at`, its
/// rows over the kept parts of `span` positions.
struct Compressor {
    e: usize,
    r: usize,
    span: usize,
    at: [usize; 3],
    io: CompIo,
}

impl Compressor {
    fn coff(&self) -> usize {
        if self.r == 4 {
            2
        } else {
            1
        }
    }

    /// Stores row `i` of the step (at `pos` of `seq`): its compressor row and score.
    fn store(&self, rec: &mut Records<'_>, b: &HostBufs, i: usize, pos: usize, seq: usize) {
        let w = self.coff() * self.e;
        rec.write_recent(seq, pos, self.at[0], &b[self.io.kv][i * w..(i + 1) * w]);
        let ape = &b[self.io.ape][(pos % self.r) * w..(pos % self.r + 1) * w];
        let score: Vec<f32> = b[self.io.score][i * w..(i + 1) * w]
            .iter()
            .zip(ape)
            .map(|(&s, &a)| s + a)
            .collect();
        rec.write_recent(seq, pos, self.at[1], &score);
    }

    /// Writes the compressed row of the block ending at `pos` of `seq`.
    fn compress(&self, rec: &mut Records<'_>, b: &HostBufs, pos: usize, seq: usize, s: &Rot) {
        let (e, r) = (self.e, self.r);
        let block = pos / r;
        let w = self.coff() * e;
        // (position, offset of its half) of every row pooled, oldest first.
        let mut src: Vec<(usize, usize)> = Vec::new();
        if r == 4 && block > 0 {
            src.extend((block * r - r..block * r).map(|p| (p, 0)));
        }
        let own = if r == 4 { e } else { 0 };
        src.extend((block * r..block * r + r).map(|p| (p, own)));
        let (mut kv, mut sc) = (vec![0f32; w], vec![0f32; w]);
        let mut rows = Vec::with_capacity(src.len());
        for &(p, half) in &src {
            rec.read_recent(seq, p, self.at[0], &mut kv);
            rec.read_recent(seq, p, self.at[1], &mut sc);
            rows.push((kv[half..half + e].to_vec(), sc[half..half + e].to_vec()));
        }
        let mut out = vec![0f32; e];
        let mut weight = vec![0f32; rows.len()];
        for (ch, o) in out.iter_mut().enumerate() {
            let max = rows.iter().fold(f32::NEG_INFINITY, |m, r| m.max(r.1[ch]));
            weight
                .iter_mut()
                .zip(&rows)
                .for_each(|(w, r)| *w = (r.1[ch] - max).exp());
            let sum: f32 = weight.iter().sum();
            *o = weight
                .iter()
                .zip(&rows)
                .map(|(w, r)| w / sum * r.0[ch])
                .sum();
        }
        let ms = out.iter().map(|v| v * v).sum::<f32>() / e as f32;
        let inv = 1.0 / (ms + s.eps).sqrt();
        let norm = &b[self.io.norm][..e];
        out.iter_mut()
            .zip(norm)
            .for_each(|(v, &g)| *v = *v * inv * g);
        let mut rope = s.comp;
        rope.head_dim = e;
        turn_tail(&mut out, block * r, &rope, false);
        rec.write_kept(seq, pos, self.span, self.at[2], &out);
    }

    /// The last position of block `block`, where its compressed row's span ends.
    fn last(&self, block: usize) -> usize {
        block * self.r + self.r - 1
    }

    /// The compressed rows of blocks `blocks` of `seq`.
    fn rows(&self, rec: &Records<'_>, seq: usize, blocks: Range<usize>) -> Vec<Vec<f32>> {
        blocks
            .map(|b| {
                let mut v = vec![0f32; self.e];
                rec.read_kept(seq, self.last(b), self.span, self.at[2], &mut v);
                v
            })
            .collect()
    }
}

/// What the compressors need besides their inputs.
struct Rot {
    comp: RopeSpec,
    eps: f32,
}

/// The layer's compressors as `io` and `spec` give them: the attention's (ratio 4 and
/// 128) and the indexer's with its queries, head weights and shape (ratio 4).
type Compressors = (
    Option<Compressor>,
    Option<(Compressor, Buf, Buf, IndexerSpec)>,
);

fn compressors(io: &SparseIo, spec: &SparseSpec) -> Compressors {
    let (lay, span) = (spec.layout(), spec.span());
    let comp = io.comp.zip(lay.comp).map(|(io, at)| Compressor {
        e: spec.head_dim,
        r: spec.ratio,
        span,
        at,
        io,
    });
    let lid = io.index.zip(lay.lid).zip(spec.indexer).map(|((x, at), s)| {
        let c = Compressor {
            e: s.head_dim,
            r: 4,
            span,
            at,
            io: x.0,
        };
        (c, x.1, x.2, s)
    });
    (comp, lid)
}

/// [`crate::Device::sparse_store`] with host buffers and the layer's `rec`ords.
pub fn sparse_store(
    rec: &mut Records<'_>,
    bufs: &HostBufs,
    rows: &[Row],
    io: &SparseIo,
    spec: &SparseSpec,
) {
    store(rec, bufs, rows, io, spec, &compressors(io, spec));
}

/// Stores the rows' records and compresses the blocks they end.
fn store(
    rec: &mut Records<'_>,
    bufs: &HostBufs,
    rows: &[Row],
    io: &SparseIo,
    spec: &SparseSpec,
    (comp, lid): &Compressors,
) {
    let d = spec.head_dim;
    let lay = spec.layout();
    let rot = Rot {
        comp: spec.comp_rope,
        eps: spec.rms_eps,
    };
    for (i, r) in rows.iter().enumerate() {
        let mut raw = bufs[io.kv][i * d..(i + 1) * d].to_vec();
        turn_tail(&mut raw, r.pos, &spec.rope, false);
        rec.round(&mut raw);
        rec.write_recent(r.seq, r.pos, lay.raw, &raw);
        for c in comp.iter().chain(lid.as_ref().map(|l| &l.0)) {
            c.store(rec, bufs, i, r.pos, r.seq);
        }
    }
    if spec.ratio > 0 {
        for r in rows.iter().filter(|r| (r.pos + 1) % spec.ratio == 0) {
            for c in comp.iter().chain(lid.as_ref().map(|l| &l.0)) {
                c.compress(rec, bufs, r.pos, r.seq, &rot);
            }
        }
    }
}

/// [`crate::Device::sparse_attention`] over the step's `rows` with host buffers and the
/// layer's `rec`ords; `par(n, task)` runs `task(i)` for each `i` in `0..n`, in any order
/// or on any threads.
pub fn sparse_attention(
    rec: &mut Records<'_>,
    bufs: &mut HostBufs,
    rows: &[Row],
    io: &SparseIo,
    spec: &SparseSpec,
    par: impl Fn(usize, &(dyn Fn(usize) + Sync)),
) {
    let (h, d) = (spec.n_head, spec.head_dim);
    let lay = spec.layout();
    let compressors = compressors(io, spec);
    store(rec, bufs, rows, io, spec, &compressors);
    let (comp, lid) = compressors;
    let last = match spec.causal {
        true => Vec::new(),
        false => crate::attn::last_positions(rows),
    };
    let rec = &*rec;
    let b = &*bufs;
    let outs: Vec<std::sync::Mutex<Vec<f32>>> = rows
        .iter()
        .map(|_| std::sync::Mutex::new(vec![0f32; h * d]))
        .collect();
    par(rows.len(), &|i| {
        let r = rows[i];
        let visible = match spec.ratio {
            0 => 0,
            ratio => (r.pos + 1) / ratio,
        };
        let blocks: Vec<usize> = match &lid {
            Some((c, q, wt, s)) if visible > s.top_k => {
                let (hi, ci) = (s.n_head, s.head_dim);
                let mut qi = b[*q][i * hi * ci..(i + 1) * hi * ci].to_vec();
                let mut rope = spec.comp_rope;
                rope.head_dim = ci;
                turn_tail(&mut qi, r.pos, &rope, false);
                let norm = 1.0 / ((ci * hi) as f32).sqrt();
                let w: Vec<f32> = b[*wt][i * hi..(i + 1) * hi]
                    .iter()
                    .map(|v| v * norm)
                    .collect();
                let keys = c.rows(rec, r.seq, 0..visible);
                let mut scored: Vec<(usize, f32)> = keys
                    .iter()
                    .enumerate()
                    .map(|(blk, k)| {
                        let s = qi
                            .chunks_exact(ci)
                            .zip(&w)
                            .fold(0.0, |s, (q, &w)| s + w * dot(q, k).max(0.0));
                        (blk, s)
                    })
                    .collect();
                scored.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
                let mut top: Vec<usize> = scored[..s.top_k].iter().map(|x| x.0).collect();
                top.sort_unstable();
                top
            }
            _ => (0..visible).collect(),
        };
        let span = (r.pos + 1).saturating_sub(spec.window)..crate::last_seen(&last, r) + 1;
        let n_comp = if comp.is_some() { blocks.len() } else { 0 };
        let mut keys = vec![0f32; (span.len() + n_comp) * d];
        let mut slots = keys.chunks_exact_mut(d);
        for (p, k) in span.zip(&mut slots) {
            rec.read_recent(r.seq, p, lay.raw, k);
        }
        if let Some(c) = &comp {
            for (&blk, k) in blocks.iter().zip(&mut slots) {
                rec.read_kept(r.seq, c.last(blk), c.span, c.at[2], k);
            }
        }
        let mut q = b[io.q][i * h * d..(i + 1) * h * d].to_vec();
        turn_tail(&mut q, r.pos, &spec.rope, false);
        let mut out = outs[i].lock().expect("one task per row");
        let sinks = &b[io.sinks][..h];
        let mut l = Vec::with_capacity(keys.len() / d);
        for ((qh, oh), &sink) in q.chunks_exact(d).zip(out.chunks_exact_mut(d)).zip(sinks) {
            l.clear();
            l.extend(keys.chunks_exact(d).map(|k| spec.scale * dot(qh, k)));
            let max = l.iter().fold(sink, |m, &v| m.max(v));
            l.iter_mut().for_each(|v| *v = (*v - max).exp());
            let sum = l.iter().sum::<f32>() + (sink - max).exp();
            for (k, &e) in keys.chunks_exact(d).zip(&l) {
                let a = e / sum;
                oh.iter_mut().zip(k).for_each(|(o, &v)| *o += a * v);
            }
        }
        turn_tail(&mut out, r.pos, &spec.rope, true);
    });
    let o = &mut bufs[io.out];
    for (i, m) in outs.into_iter().enumerate() {
        o[i * h * d..(i + 1) * h * d].copy_from_slice(&m.into_inner().expect("tasks done"));
    }
}
