//! DeepSeek-V4's attention: a low-rank query (`attn_q_a` → norm → `attn_q_b`, each head
//! RMS-normalized), one shared key that is also the value (`attn_kv` → norm), compressors
//! and, at ratio 4, a lightning indexer, all read by [`Device::sparse_attention`]
//! ([`device::sparse`]); the heads' outputs in `G` groups each through its own low-rank
//! projection (`attn_output_a`), then `attn_output_b`.

use device::sparse::{CompIo, IndexerSpec, SparseIo, SparseSpec};
use device::{Buf, Cols, Device, MatOut, RopeMode, RopeScaling, RopeSpec};

use super::{Cx, LayerMemory};
use crate::error::Result;
use crate::hparams::HParams;
use crate::tensors::{MatId, TensorLoader, VecId};

/// What the file says of a layer's attention besides the shared hyper-parameters.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SparseShape {
    pub q_lora: usize,
    pub window: usize,
    pub ratio: usize,
    pub groups: usize,
    pub o_lora: usize,
    pub compress_base: f32,
    pub indexer: IndexerSpec,
    /// `false`: a block drafter's, whose block's rows see one another
    /// ([`SparseSpec::causal`]).
    pub causal: bool,
}

/// A compressor's tensors: `kv`, `gate` `[coff · e, n_embd]`, `ape` `[ratio, coff · e]`,
/// `norm` `[e]`.
struct Compressor {
    kv: MatId,
    gate: MatId,
    ape: VecId,
    norm: VecId,
}

impl Compressor {
    fn load(t: &mut TensorLoader, p: &str, hp: &HParams, e: usize, r: usize) -> Result<Self> {
        let n = |s: &str| format!("{p}_{s}.weight");
        let w = if r == 4 { 2 * e } else { e };
        Ok(Compressor {
            kv: t.matrix(&n("kv"), w, hp.n_embd)?,
            gate: t.matrix(&n("gate"), w, hp.n_embd)?,
            ape: t.vector_dims(&n("ape"), &[w, r])?,
            norm: t.vector(&n("norm"), e)?,
        })
    }

    fn io(&self, cx: &Cx<'_>, [kv, score]: [Buf; 2]) -> CompIo {
        CompIo {
            kv,
            score,
            ape: cx.t[self.ape],
            norm: cx.t[self.norm],
        }
    }
}

/// The indexer's own tensors: `attn_q_b` `[H_i · c, q_lora]`, `proj` `[H_i, n_embd]`.
struct Indexer {
    q_b: MatId,
    proj: MatId,
    comp: Compressor,
}

/// See the module doc. Scratch: `extra[at..at + 9]` ([`SparseAttention::scratch`]).
pub struct SparseAttention {
    q_a: MatId,
    q_a_norm: VecId,
    q_b: MatId,
    kv: MatId,
    kv_norm: VecId,
    ones: VecId,
    sinks: VecId,
    /// `G` × `[o_lora, n_head · d / G]`.
    out_a: Vec<MatId>,
    out_b: MatId,
    comp: Option<Compressor>,
    indexer: Option<Indexer>,
    spec: SparseSpec,
    q_lora: usize,
    o_lora: usize,
    at: usize,
}

impl SparseAttention {
    /// Block `il`'s attention, working in scratch `extra[at..]`.
    pub fn load(
        t: &mut TensorLoader,
        hp: &HParams,
        il: usize,
        sh: SparseShape,
        at: usize,
    ) -> Result<SparseAttention> {
        let (e, h, d) = (hp.n_embd, hp.n_head, hp.head_dim);
        let n = |s: &str| format!("blk.{il}.{s}.weight");
        let gd = h * d / sh.groups;
        let comp = match sh.ratio {
            0 => None,
            r => Some(Compressor::load(
                t,
                &format!("blk.{il}.attn_compressor"),
                hp,
                d,
                r,
            )?),
        };
        let indexer = match sh.ratio {
            4 => Some(Indexer {
                q_b: t.matrix(
                    &n("indexer.attn_q_b"),
                    sh.indexer.n_head * sh.indexer.head_dim,
                    sh.q_lora,
                )?,
                proj: t.matrix(&n("indexer.proj"), sh.indexer.n_head, e)?,
                comp: Compressor::load(
                    t,
                    &format!("blk.{il}.indexer_compressor"),
                    hp,
                    sh.indexer.head_dim,
                    4,
                )?,
            }),
            _ => None,
        };
        let comp_scaling = {
            let mut s = hp.rope.scaling(sh.compress_base, hp.n_rot, false);
            s.attn_factor = match s.ext_factor {
                0.0 => 1.0,
                _ => 1.0 / (1.0 + 0.1 * (1.0 / s.freq_scale).ln()),
            };
            s
        };
        let comp_rope = RopeSpec {
            head_dim: d,
            n_rot: hp.n_rot,
            mode: RopeMode::Normal,
            freq_base: sh.compress_base,
            scaling: comp_scaling,
        };
        let rope = match sh.ratio {
            0 => RopeSpec {
                freq_base: hp.rope_freq_base,
                scaling: RopeScaling::NONE,
                ..comp_rope
            },
            _ => comp_rope,
        };
        Ok(SparseAttention {
            q_a: t.matrix(&n("attn_q_a"), sh.q_lora, e)?,
            q_a_norm: t.vector(&n("attn_q_a_norm"), sh.q_lora)?,
            q_b: t.matrix(&n("attn_q_b"), h * d, sh.q_lora)?,
            kv: t.matrix(&n("attn_kv"), d, e)?,
            kv_norm: t.vector(&n("attn_kv_a_norm"), d)?,
            ones: t.constant(&format!("blk.{il} (rms weights)"), vec![1.0; d]),
            sinks: t.vector(&n("attn_sinks"), h)?,
            out_a: t.grouped(&n("attn_output_a"), sh.groups, sh.o_lora, gd)?,
            out_b: t.matrix(&n("attn_output_b"), e, sh.groups * sh.o_lora)?,
            comp,
            indexer,
            spec: SparseSpec {
                n_head: h,
                head_dim: d,
                window: sh.window,
                causal: sh.causal,
                ratio: sh.ratio,
                scale: 1.0 / (d as f32).sqrt(),
                rms_eps: hp.rms_eps,
                rope,
                comp_rope,
                indexer: (sh.ratio == 4).then_some(sh.indexer),
            },
            q_lora: sh.q_lora,
            o_lora: sh.o_lora,
            at,
        })
    }

    /// Scratch widths (`extra[at..]`): `qr`, the compressor's row and score, the indexer's
    /// row, score, queries and weights, a group of heads' outputs, a group's projection, all
    /// groups' projections.
    pub fn scratch(hp: &HParams, sh: &SparseShape) -> [usize; 9] {
        let (d, c, hi) = (hp.head_dim, sh.indexer.head_dim, sh.indexer.n_head);
        [
            sh.q_lora,
            2 * d,
            2 * d,
            2 * c,
            2 * c,
            hi * c,
            hi,
            hp.n_head * d / sh.groups,
            sh.o_lora,
        ]
        .map(|w| w.max(sh.groups * sh.o_lora))
    }

    /// What the layer keeps of each position.
    pub fn memory(&self) -> LayerMemory {
        LayerMemory::Records {
            record: self.spec.record(),
            lookback: self.spec.lookback(),
        }
    }

    /// Stores the raw keys of `n` rows of a block drafter's context from their fused
    /// features `g` (`[n, n_embd]`): `kv_norm(attn_kv · g)`, turned at the rows' positions.
    /// Only a layer without compression (ratio 0) gets such rows.
    pub fn store(&self, cx: &Cx<'_>, dev: &mut dyn Device, g: Buf, n: usize) {
        let (hp, s, t) = (cx.hp, cx.s, cx.t);
        debug_assert_eq!(self.spec.ratio, 0, "a context row of a compressed layer");
        dev.matmul(&[t[self.kv]], g, n, &[MatOut::to(s.k)]);
        dev.rms_norm(s.k, t[self.kv_norm], n, hp.head_dim, hp.rms_eps, s.k);
        let io = SparseIo {
            q: s.q,
            kv: s.k,
            sinks: t[self.sinks],
            out: s.attn,
            comp: None,
            index: None,
        };
        dev.sparse_store(cx.kv_layer, &io, &self.spec);
    }

    /// `s.proj = attention(s.x)` for the normalized input `s.x` (`[n, n_embd]`).
    pub fn forward(&self, cx: &Cx<'_>, dev: &mut dyn Device, n: usize) {
        let (hp, s, t) = (cx.hp, cx.s, cx.t);
        let (h, d) = (hp.n_head, hp.head_dim);
        let x: [Buf; 9] = std::array::from_fn(|i| s.extra[self.at + i]);
        let [qr, ckv, csc, lkv, lsc, lq, lw, group, low] = x;
        let mut ws = vec![t[self.q_a], t[self.kv]];
        let mut outs = vec![MatOut::to(qr), MatOut::to(s.k)];
        if let Some(c) = &self.comp {
            ws.extend([t[c.kv], t[c.gate]]);
            outs.extend([MatOut::to(ckv), MatOut::to(csc)]);
        }
        if let Some(i) = &self.indexer {
            ws.extend([t[i.comp.kv], t[i.comp.gate], t[i.proj]]);
            outs.extend([MatOut::to(lkv), MatOut::to(lsc), MatOut::to(lw)]);
        }
        dev.matmul(&ws, s.x, n, &outs);
        dev.rms_norm(qr, t[self.q_a_norm], n, self.q_lora, hp.rms_eps, qr);
        dev.rms_norm(s.k, t[self.kv_norm], n, d, hp.rms_eps, s.k);
        let mut ws = vec![t[self.q_b]];
        let mut outs = vec![MatOut::to(s.q)];
        if let Some(i) = &self.indexer {
            ws.push(t[i.q_b]);
            outs.push(MatOut::to(lq));
        }
        dev.matmul(&ws, qr, n, &outs);
        dev.rms_norm(s.q, t[self.ones], n * h, d, hp.rms_eps, s.q);
        let io = SparseIo {
            q: s.q,
            kv: s.k,
            sinks: t[self.sinks],
            out: s.attn,
            comp: self.comp.as_ref().map(|c| c.io(cx, [ckv, csc])),
            index: self
                .indexer
                .as_ref()
                .map(|i| (i.comp.io(cx, [lkv, lsc]), lq, lw)),
        };
        dev.sparse_attention(cx.kv_layer, &io, &self.spec);
        let (g, gd) = (self.out_a.len(), h * d / self.out_a.len());
        let o_lora = self.o_lora;
        let all = s.extra[self.at];
        for (i, &m) in self.out_a.iter().enumerate() {
            let slice = Cols {
                x_width: h * d,
                x_at: i * gd,
                out_width: gd,
                out_at: 0,
                width: gd,
            };
            dev.copy_cols(s.attn, group, n, &slice);
            dev.matmul(&[t[m]], group, n, &[MatOut::to(low)]);
            let put = Cols {
                x_width: o_lora,
                x_at: 0,
                out_width: g * o_lora,
                out_at: i * o_lora,
                width: o_lora,
            };
            dev.copy_cols(low, all, n, &put);
        }
        dev.matmul(&[t[self.out_b]], all, n, &[MatOut::to(s.proj)]);
    }
}
