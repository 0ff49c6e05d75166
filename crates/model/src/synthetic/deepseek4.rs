//! Random-weight DeepSeek-V4 models (`deepseek4`), written with the metadata keys and
//! tensors llama.cpp's loader reads: sliding-window attention with sinks, compressed
//! caches at ratio 4 (with the lightning indexer) and 128, grouped low-rank output,
//! hyper-connections, hash-routed and biased mixtures with a shared expert; optionally
//! multi-token-prediction (NextN) blocks after them.

use std::path::Path;

use gguf::{GgmlType, Value, ValueType};

use super::{scale, write_file, ExpertShape, Rng, Tensors, Vocab};
use crate::{Error, Result};

/// The shape of a synthetic DeepSeek-V4 model. [`Dsv4Shape::default`] is a small model
/// with every feature on.
#[derive(Debug, Clone, PartialEq)]
pub struct Dsv4Shape {
    pub n_embd: usize,
    pub n_layer: usize,
    pub n_head: usize,
    /// Width `d` of a query head and of the one key-and-value head
    /// (`attention.key_length` and `attention.value_length`).
    pub head_dim: usize,
    /// The last dims of each head that RoPE turns (`rope.dimension_count`): even, at most
    /// `head_dim` and `indexer_head_dim`.
    pub n_rot: usize,
    pub q_lora_rank: usize,
    /// Groups of heads of the low-rank output projection; they divide `n_head`.
    pub o_groups: usize,
    pub o_lora_rank: usize,
    /// Keys each query sees in the raw cache, itself included (`attention.sliding_window`).
    pub window: usize,
    /// Per block: 0 (the window only), 4 (overlapping compressed blocks picked by the
    /// lightning indexer) or 128 (every compressed block). At least `n_layer` of them.
    pub compress_ratios: Vec<u32>,
    pub indexer_heads: usize,
    /// Width `c` of an indexer head: a multiple of 64, as llama.cpp turns indexer queries
    /// and keys by Hadamard blocks of at least 64. Where it equals `head_dim`, llama.cpp
    /// turns the attention's queries and keys as well (the same logits, rounded otherwise).
    pub indexer_head_dim: usize,
    /// Compressed blocks the indexer picks for each query.
    pub indexer_top_k: usize,
    /// Residual streams of the hyper-connections (`hyper_connection.count`); llama.cpp
    /// runs only 4.
    pub hc_streams: usize,
    pub sinkhorn_iters: usize,
    /// The first this many blocks route each token to the experts its id hashes to
    /// (`ffn_gate_tid2eid`); the others by router score plus a bias.
    pub hash_layers: usize,
    pub experts: ExpertShape,
    /// Shared experts, each `experts.n_ff_exp` wide.
    pub n_shared: usize,
    /// Multi-token-prediction blocks after the `n_layer`: each a block of the model's kind
    /// (no compression, routed by score) behind the NextN entry, whose `eh_proj` passes the
    /// token's embedding through and adds a small random share of the target's streams.
    pub nextn: usize,
    /// Type of every matrix but the embeddings (Q8_0) and the F32 tensors (norms, sinks,
    /// hyper-connection mixes, compressor position biases, the router); its block size
    /// must divide every row of those matrices (`n_embd`, `q_lora_rank`,
    /// `n_head·head_dim/o_groups`, `o_groups·o_lora_rank`, the expert widths).
    pub ty: GgmlType,
    pub seed: u64,
}

impl Default for Dsv4Shape {
    fn default() -> Self {
        Dsv4Shape {
            n_embd: 256,
            n_layer: 6,
            n_head: 8,
            head_dim: 64,
            n_rot: 16,
            q_lora_rank: 64,
            o_groups: 2,
            o_lora_rank: 32,
            window: 16,
            compress_ratios: DEFAULT_RATIOS.to_vec(),
            indexer_heads: 16,
            indexer_head_dim: 128,
            indexer_top_k: 8,
            hc_streams: 4,
            sinkhorn_iters: 20,
            hash_layers: 2,
            experts: ExpertShape {
                n_expert: 16,
                n_expert_used: 4,
                n_ff_exp: 128,
            },
            n_shared: 1,
            nextn: 0,
            ty: GgmlType::Q8_0,
            seed: 1,
        }
    }
}

/// The compression ratios of the default shape's six blocks; other depths repeat them.
pub const DEFAULT_RATIOS: [u32; 6] = [4, 128, 4, 0, 4, 128];

const ARCH: &str = "deepseek4";
const CONTEXT_LENGTH: u32 = 4096;
const RMS_EPS: f32 = 1e-6;
const ROPE_BASE: f32 = 10_000.0;
const COMPRESS_ROPE_BASE: f32 = 160_000.0;
const HC_EPS: f32 = 1e-6;
const EXPERT_WEIGHTS_SCALE: f32 = 1.5;
const SWIGLU_CLAMP: f32 = 10.0;
/// llama.cpp's `LLAMA_EXPERT_GATING_FUNC_TYPE_SQRT_SOFTPLUS`, the only gating it loads.
const GATING_SQRT_SOFTPLUS: u32 = 4;
/// Half-width of the small F32 biases (hyper-connection bases, compressor position
/// biases, the routing bias).
const BIAS: f32 = 0.1;

/// How a tensor's values are drawn.
#[derive(Debug, Clone, Copy)]
enum Fill {
    /// Uniform in `[-a, a)`, stored as the type.
    Uniform(GgmlType, f32),
    Ones,
    /// F32 2.0: the NextN head's norm, whose logits are then twice as wide as the
    /// trunk's head's, so that its drafts are rarely near-tied.
    Twos,
    /// F32 uniform in `[0.5, 1.5)`: the hyper-connections' scales.
    Scales,
    /// I32: for each token, `n_expert_used` distinct experts.
    Routes,
    /// A NextN entry's `eh_proj` (`[2 · n_embd, n_embd]`): the identity on the embedding's
    /// half, uniform in `[-a, a)` on the state's, stored as the type.
    Entry(GgmlType, f32),
}

struct Planned {
    name: String,
    dims: Vec<usize>,
    fill: Fill,
}

impl Dsv4Shape {
    /// Parameters of the model with a vocabulary of `n_vocab`.
    pub fn n_params(&self, n_vocab: usize) -> u64 {
        self.plan(n_vocab)
            .iter()
            .map(|p| p.dims.iter().product::<usize>() as u64)
            .sum()
    }

    /// Writes the model to `path` with the tokenizer `vocab`. Errors name the first
    /// constraint of the shape it breaks.
    pub fn write(&self, vocab: &Vocab, path: &Path) -> Result<()> {
        self.check()?;
        let plan = self.plan(vocab.n_vocab());
        self.check_rows(&plan)?;
        let mut w = vocab.writer(ARCH);
        self.metadata(&mut |k, v| {
            w.metadata(&format!("{ARCH}.{k}"), v);
        });
        let mut t = Tensors {
            w: &mut w,
            rng: Rng::new(self.seed),
        };
        self.put(&mut t, &plan)?;
        write_file(&w, path)
    }

    /// Writes a DSpark drafter's stages of this shape (blocks uncompressed and routed by
    /// score, no NextN) through `t`: their `prefix.*` keys (but those of the drafter's own
    /// `skip`) and tensors, the streams' merge (`output_hc_*`) included, the embeddings and
    /// the output head and norm not. Gives their parameters.
    pub(crate) fn write_stages(
        &self,
        t: &mut Tensors<'_>,
        prefix: &str,
        skip: &[&str],
        n_vocab: usize,
    ) -> Result<()> {
        let (stages, plan) = self.stages(n_vocab);
        stages.check()?;
        let drafter_only = [
            "attention.indexer.head_count",
            "attention.indexer.key_length",
            "attention.indexer.top_k",
            "attention.compress_rope_freq_base",
            "hash_layer_count",
            "nextn_predict_layers",
        ];
        stages.metadata(&mut |k, v| {
            if !skip.contains(&k) && !drafter_only.contains(&k) {
                t.w.metadata(&format!("{prefix}.{k}"), v);
            }
        });
        stages.check_rows(&plan)?;
        stages.put(t, &plan)
    }

    /// Parameters of [`Dsv4Shape::write_stages`]'s tensors.
    pub(crate) fn stage_params(&self, n_vocab: usize) -> u64 {
        let plan = self.stages(n_vocab).1;
        plan.iter()
            .map(|p| p.dims.iter().product::<usize>() as u64)
            .sum()
    }

    /// The shape of a drafter's stages, and their tensors.
    fn stages(&self, n_vocab: usize) -> (Dsv4Shape, Vec<Planned>) {
        let stages = Dsv4Shape {
            compress_ratios: vec![0; self.n_layer],
            hash_layers: 0,
            nextn: 0,
            ..self.clone()
        };
        let head = ["token_embd.weight", "output.weight", "output_norm.weight"];
        let plan = stages
            .plan(n_vocab)
            .into_iter()
            .filter(|p| !head.contains(&p.name.as_str()))
            .collect();
        (stages, plan)
    }

    /// Draws and writes the tensors `plan` through `t`.
    fn put(&self, t: &mut Tensors<'_>, plan: &[Planned]) -> Result<()> {
        for p in plan {
            match p.fill {
                Fill::Uniform(ty, a) => t.matrix(&p.name, &p.dims, ty, a)?,
                Fill::Entry(ty, a) => {
                    let e = self.n_embd;
                    let rows = (0..e).map(|i| {
                        let mut row = vec![0.0; 2 * e];
                        row[i] = 1.0;
                        row
                    });
                    t.rows(&p.name, 2 * e, rows, ty, a)?
                }
                Fill::Ones => t.ones(&p.name, p.dims[0]),
                Fill::Twos => t.vector(&p.name, vec![2.0; p.dims[0]]),
                Fill::Scales => {
                    let v = (0..p.dims[0])
                        .map(|_| 1.0 + 0.5 * t.rng.uniform())
                        .collect();
                    t.vector(&p.name, v);
                }
                Fill::Routes => self.routes(t, &p.name, p.dims[1]),
            }
        }
        Ok(())
    }

    fn check(&self) -> Result<()> {
        let bad = |problem: String| Err(Error::Synthetic(format!("{ARCH}: {problem}")));
        let x = self.experts;
        let sizes = [
            ("n_embd", self.n_embd),
            ("n_layer", self.n_layer),
            ("n_head", self.n_head),
            ("head_dim", self.head_dim),
            ("q_lora_rank", self.q_lora_rank),
            ("o_groups", self.o_groups),
            ("o_lora_rank", self.o_lora_rank),
            ("window", self.window),
            ("indexer_heads", self.indexer_heads),
            ("indexer_head_dim", self.indexer_head_dim),
            ("indexer_top_k", self.indexer_top_k),
            ("hc_streams", self.hc_streams),
            ("sinkhorn_iters", self.sinkhorn_iters),
            ("experts", x.n_expert),
            ("experts used", x.n_expert_used),
            ("n_ff_exp", x.n_ff_exp),
            ("shared experts", self.n_shared),
        ];
        if let Some((name, _)) = sizes.iter().find(|(_, v)| *v == 0) {
            return bad(format!("{name} is 0"));
        }
        if !self.n_head.is_multiple_of(self.o_groups) {
            return bad(format!(
                "{} output groups do not divide {} heads",
                self.o_groups, self.n_head
            ));
        }
        if self.compress_ratios.len() < self.n_layer {
            return bad(format!(
                "{} compression ratios for {} blocks",
                self.compress_ratios.len(),
                self.n_layer
            ));
        }
        if let Some(r) = self
            .compress_ratios
            .iter()
            .find(|r| ![0, 4, 128].contains(*r))
        {
            return bad(format!("compression ratio {r} (0, 4 or 128)"));
        }
        if self.n_rot == 0
            || !self.n_rot.is_multiple_of(2)
            || self.n_rot > self.head_dim
            || self.n_rot > self.indexer_head_dim
        {
            return bad(format!(
                "RoPE over {} dims: even, at most head_dim {} and indexer_head_dim {}",
                self.n_rot, self.head_dim, self.indexer_head_dim
            ));
        }
        if !self.indexer_head_dim.is_multiple_of(64) {
            return bad(format!(
                "indexer_head_dim {} is not a multiple of 64",
                self.indexer_head_dim
            ));
        }
        if self.hash_layers > self.n_layer {
            return bad(format!(
                "{} hash-routed blocks of {}",
                self.hash_layers, self.n_layer
            ));
        }
        if x.n_expert_used > x.n_expert {
            return bad(format!(
                "{} experts used of {}",
                x.n_expert_used, x.n_expert
            ));
        }
        if !device::formats::is_quantize_supported(self.ty) {
            return bad(format!("tandem cannot write {} values", self.ty));
        }
        Ok(())
    }

    /// Every quantized tensor's rows are whole blocks of its type.
    fn check_rows(&self, plan: &[Planned]) -> Result<()> {
        for p in plan {
            if let Fill::Uniform(ty, _) | Fill::Entry(ty, _) = p.fill {
                if !(p.dims[0] as u64).is_multiple_of(ty.block_size()) {
                    return Err(Error::Synthetic(format!(
                        "{ARCH}: {}: rows of {} are not whole blocks of {ty}",
                        p.name, p.dims[0]
                    )));
                }
            }
        }
        Ok(())
    }

    /// Every `deepseek4.*` key, its name without the prefix.
    fn metadata(&self, put: &mut impl FnMut(&str, Value)) {
        let x = self.experts;
        let u32s = [
            ("context_length", CONTEXT_LENGTH as usize),
            ("embedding_length", self.n_embd),
            ("block_count", self.n_layer + self.nextn),
            ("feed_forward_length", x.n_ff_exp),
            ("attention.head_count", self.n_head),
            ("attention.head_count_kv", 1),
            ("attention.key_length", self.head_dim),
            ("attention.value_length", self.head_dim),
            ("rope.dimension_count", self.n_rot),
            ("attention.q_lora_rank", self.q_lora_rank),
            ("attention.sliding_window", self.window),
            ("attention.output_group_count", self.o_groups),
            ("attention.output_lora_rank", self.o_lora_rank),
            ("attention.indexer.head_count", self.indexer_heads),
            ("attention.indexer.key_length", self.indexer_head_dim),
            ("attention.indexer.top_k", self.indexer_top_k),
            ("hyper_connection.count", self.hc_streams),
            ("hyper_connection.sinkhorn_iterations", self.sinkhorn_iters),
            ("hash_layer_count", self.hash_layers),
            ("expert_count", x.n_expert),
            ("expert_used_count", x.n_expert_used),
            ("expert_feed_forward_length", x.n_ff_exp),
            ("expert_shared_count", self.n_shared),
            ("expert_gating_func", GATING_SQRT_SOFTPLUS as usize),
            ("nextn_predict_layers", self.nextn),
        ];
        for (k, v) in u32s {
            put(k, Value::U32(v as u32));
        }
        let f32s = [
            ("attention.layer_norm_rms_epsilon", RMS_EPS),
            ("rope.freq_base", ROPE_BASE),
            ("attention.compress_rope_freq_base", COMPRESS_ROPE_BASE),
            ("hyper_connection.epsilon", HC_EPS),
            ("expert_weights_scale", EXPERT_WEIGHTS_SCALE),
        ];
        for (k, v) in f32s {
            put(k, Value::F32(v));
        }
        put("expert_weights_norm", Value::Bool(true));
        let clamps = vec![Value::F32(SWIGLU_CLAMP); self.n_layer + self.nextn];
        put(
            "swiglu_clamp_exp",
            Value::Array(ValueType::F32, clamps.clone()),
        );
        put("swiglu_clamp_shexp", Value::Array(ValueType::F32, clamps));
        let ratios = self.ratios().map(Value::U32).collect();
        put(
            "attention.compress_ratios",
            Value::Array(ValueType::U32, ratios),
        );
    }

    /// Every tensor, in file order. Matrices are drawn so that a product with a
    /// unit-variance input has unit variance; the head twice that, for logits of standard
    /// deviation ~2.
    fn plan(&self, n_vocab: usize) -> Vec<Planned> {
        let (e, ty, hc) = (self.n_embd, self.ty, self.hc_streams);
        let (hd, ql, c) = (self.head_dim, self.q_lora_rank, self.indexer_head_dim);
        let (g, ol) = (self.o_groups, self.o_lora_rank);
        let x = self.experts;
        let (ne, ff, ffs) = (x.n_expert, x.n_ff_exp, x.n_ff_exp * self.n_shared);
        let mix = (2 + hc) * hc;
        let group_width = (self.n_head * hd).checked_div(g).unwrap_or(0);
        let float = |a: f32| Fill::Uniform(GgmlType::F32, a);
        let mat = |cols: usize| Fill::Uniform(ty, scale(cols));

        let mut plan = Vec::new();
        let mut put = |name: String, dims: &[usize], fill: Fill| {
            plan.push(Planned {
                name,
                dims: dims.to_vec(),
                fill,
            });
        };
        put(
            "token_embd.weight".into(),
            &[e, n_vocab],
            Fill::Uniform(GgmlType::Q8_0, 1.0),
        );
        put("output_norm.weight".into(), &[e], Fill::Ones);
        put(
            "output.weight".into(),
            &[e, n_vocab],
            Fill::Uniform(ty, 2.0 * scale(e)),
        );
        put(
            "output_hc_fn.weight".into(),
            &[hc * e, hc],
            float(scale(hc * e)),
        );
        put("output_hc_base.weight".into(), &[hc], float(BIAS));
        put("output_hc_scale.weight".into(), &[1], Fill::Scales);
        let ratios: Vec<u32> = self.ratios().collect();
        for (il, &ratio) in ratios.iter().enumerate().take(self.n_layer + self.nextn) {
            let n = |s: &str| format!("blk.{il}.{s}");
            put(n("attn_norm.weight"), &[e], Fill::Ones);
            put(n("attn_sinks.weight"), &[self.n_head], float(1.0));
            put(n("attn_q_a.weight"), &[e, ql], mat(e));
            put(n("attn_q_a_norm.weight"), &[ql], Fill::Ones);
            put(n("attn_q_b.weight"), &[ql, self.n_head * hd], mat(ql));
            put(n("attn_kv.weight"), &[e, hd], mat(e));
            put(n("attn_kv_a_norm.weight"), &[hd], Fill::Ones);
            put(
                n("attn_output_a.weight"),
                &[group_width, ol * g],
                mat(group_width),
            );
            put(n("attn_output_b.weight"), &[g * ol, e], mat(g * ol));
            for part in ["attn", "ffn"] {
                let h = |s: &str| n(&format!("hc_{part}_{s}.weight"));
                put(h("fn"), &[hc * e, mix], float(scale(hc * e)));
                put(h("base"), &[mix], float(BIAS));
                put(h("scale"), &[3], Fill::Scales);
            }
            if ratio != 0 {
                let r = ratio as usize;
                let width = if r == 4 { 2 * hd } else { hd };
                put(n("attn_compressor_kv.weight"), &[e, width], mat(e));
                put(n("attn_compressor_gate.weight"), &[e, width], mat(e));
                put(n("attn_compressor_ape.weight"), &[width, r], float(BIAS));
                put(n("attn_compressor_norm.weight"), &[hd], Fill::Ones);
            }
            if ratio == 4 {
                let hi = self.indexer_heads;
                put(n("indexer.proj.weight"), &[e, hi], mat(e));
                put(n("indexer.attn_q_b.weight"), &[ql, hi * c], mat(ql));
                put(n("indexer_compressor_kv.weight"), &[e, 2 * c], mat(e));
                put(n("indexer_compressor_gate.weight"), &[e, 2 * c], mat(e));
                put(n("indexer_compressor_ape.weight"), &[2 * c, 4], float(BIAS));
                put(n("indexer_compressor_norm.weight"), &[c], Fill::Ones);
            }
            put(n("ffn_gate_inp.weight"), &[e, ne], float(scale(e)));
            if il < self.hash_layers {
                put(
                    n("ffn_gate_tid2eid.weight"),
                    &[x.n_expert_used, n_vocab],
                    Fill::Routes,
                );
            } else {
                put(n("exp_probs_b.bias"), &[ne], float(BIAS));
            }
            put(n("ffn_norm.weight"), &[e], Fill::Ones);
            put(n("ffn_gate_exps.weight"), &[e, ff, ne], mat(e));
            put(n("ffn_up_exps.weight"), &[e, ff, ne], mat(e));
            put(n("ffn_down_exps.weight"), &[ff, e, ne], mat(ff));
            put(n("ffn_gate_shexp.weight"), &[e, ffs], mat(e));
            put(n("ffn_up_shexp.weight"), &[e, ffs], mat(e));
            put(n("ffn_down_shexp.weight"), &[ffs, e], mat(ffs));
            if il >= self.n_layer {
                put(
                    n("nextn.eh_proj.weight"),
                    &[2 * e, e],
                    Fill::Entry(ty, 0.1 * scale(e)),
                );
                put(n("nextn.enorm.weight"), &[e], Fill::Ones);
                put(n("nextn.hnorm.weight"), &[e], Fill::Ones);
                put(n("nextn.shared_head_norm.weight"), &[e], Fill::Twos);
            }
        }
        plan
    }

    /// Every block's compression ratio as written: the shape's for its `n_layer` blocks
    /// (all of them when it has no NextN block), none for a NextN block.
    fn ratios(&self) -> impl Iterator<Item = u32> + '_ {
        let main = match self.nextn {
            0 => self.compress_ratios.len(),
            _ => self.n_layer,
        };
        let main = self.compress_ratios[..main].iter().copied();
        main.chain(std::iter::repeat_n(0, self.nextn))
    }

    /// The hash routing of `n_vocab` tokens: each token's experts drawn without
    /// replacement.
    fn routes(&self, t: &mut Tensors, name: &str, n_vocab: usize) {
        let (ne, used) = (self.experts.n_expert, self.experts.n_expert_used);
        let mut ids: Vec<i32> = (0..ne as i32).collect();
        let mut bytes = Vec::with_capacity(4 * used * n_vocab);
        for _ in 0..n_vocab {
            for i in 0..used {
                let j = i + t.rng.below(ne - i);
                ids.swap(i, j);
            }
            bytes.extend(ids[..used].iter().flat_map(|id| id.to_le_bytes()));
        }
        t.w.tensor(name, &[used as u64, n_vocab as u64], GgmlType::I32, bytes);
    }
}
