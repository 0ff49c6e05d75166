//! Random-weight models of any shape, written as GGUF: subjects for tests and benchmarks
//! of shapes no model at hand has (a mixture of experts of a given size, say). The weights
//! are deterministic in the seed; the tokenizer (every `tokenizer.*` key, chat template
//! included) is copied from a real model, so the result loads and serves like one.
//! [`Synthetic`] shapes the architectures with a recipe; [`deepseek4::Dsv4Shape`] shapes
//! DeepSeek-V4, whose file llama.cpp reads.

use std::path::Path;

use gguf::{GgmlType, GgufFile, GgufWriter, Value};

use crate::arch::Arch;
use crate::hparams::Experts;
use crate::layers::gated_delta_net::DeltaShape;
use crate::{Error, Result};

pub mod deepseek4;
pub mod dflash;
pub mod eagle3;
pub mod lora;
pub mod mmproj;
pub mod nemotron_h;

/// The shape of a synthetic model.
#[derive(Debug, Clone, PartialEq)]
pub struct Synthetic {
    pub arch: Arch,
    pub n_embd: usize,
    pub n_layer: usize,
    pub n_head: usize,
    pub n_head_kv: usize,
    /// Width of a dense feed-forward block, and of qwen2moe's shared expert.
    pub n_ff: usize,
    /// The mixture, for architectures that have one.
    pub experts: Option<ExpertShape>,
    /// The Gated DeltaNet blocks of a hybrid (qwen35: every fourth block attends).
    pub delta: Option<DeltaShape>,
    /// Multi-token-prediction blocks after the `n_layer` (hybrids only): each a gated
    /// attention block behind the NextN entry, whose `eh_proj` passes the token's
    /// embedding through and adds a small random share of the target's state, so that
    /// the head drafts well where the target's next token follows from the current one.
    pub nextn: usize,
    /// The sliding window (`attention.sliding_window`) of an architecture that has one:
    /// gemma3's five of every six blocks, every block of a llama (Mistral).
    pub window: Option<usize>,
    /// Type of every matrix but the embeddings (Q8_0) and the router (F32); its block size
    /// must divide `n_embd` and the feed-forward widths. The output head is a matrix of its
    /// own (untied), so that the next token is not simply the last one.
    pub ty: GgmlType,
    pub seed: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExpertShape {
    pub n_expert: usize,
    pub n_expert_used: usize,
    pub n_ff_exp: usize,
}

impl Synthetic {
    /// The seams' tests' small model of `arch`: 4 blocks of 64 (4 heads over 2), a
    /// feed-forward of 128, Q8_0, seed 5; a hybrid's (qwen35) blocks 0 to 2 Gated DeltaNet
    /// (kernel 4, 2 key and 4 value heads of 16), block 3 gated attention.
    pub fn small(arch: Arch) -> Synthetic {
        let delta = (arch.name() == "qwen35").then_some(DeltaShape {
            conv_kernel: 4,
            head_dim: 16,
            n_k_heads: 2,
            n_v_heads: 4,
        });
        Synthetic {
            arch,
            n_embd: 64,
            n_layer: 4,
            n_head: 4,
            n_head_kv: 2,
            n_ff: 128,
            experts: None,
            delta,
            nextn: 0,
            window: None,
            ty: GgmlType::Q8_0,
            seed: 5,
        }
    }

    fn head_dim(&self) -> usize {
        self.n_embd / self.n_head
    }

    /// Checks the shape against the architecture before anything is written.
    fn check(&self) -> Result<()> {
        let bad = |problem: String| Err(Error::Synthetic(problem));
        match (self.experts, self.arch.recipe().traits().experts) {
            (None, Experts::Always(_)) => {
                return bad(format!("{} needs experts", self.arch.name()));
            }
            (Some(_), Experts::Never) => {
                return bad(format!("{} has no experts", self.arch.name()));
            }
            (Some(x), _) if x.n_expert_used == 0 || x.n_expert_used > x.n_expert => {
                return bad(format!(
                    "{} experts used of {}",
                    x.n_expert_used, x.n_expert
                ));
            }
            _ => {}
        }
        if self.arch.name().starts_with("qwen35") != self.delta.is_some() {
            return bad(format!(
                "{} takes a Gated DeltaNet shape only for qwen35 and qwen35moe",
                self.arch.name()
            ));
        }
        if self.window.is_some() && self.arch.recipe().traits().sliding.is_none() {
            return bad(format!("{} has no sliding window", self.arch.name()));
        }
        if self.window == Some(0) {
            return bad("a window of 0 positions".into());
        }
        if self.nextn > 0 && self.delta.is_none() {
            return bad(format!("{} takes no NextN blocks here", self.arch.name()));
        }
        check_heads(self.n_embd, self.n_head, self.n_head_kv)?;
        let block = self.ty.block_size() as usize;
        let dense_ff = match (self.experts, self.arch.name()) {
            (None, _) | (Some(_), "qwen2moe" | "qwen35moe") => Some(self.n_ff),
            _ => None,
        };
        let widths = [
            Some(self.n_embd),
            dense_ff,
            self.experts.map(|x| x.n_ff_exp),
            self.delta.map(|d| d.n_v_heads * d.head_dim),
        ]
        .into_iter()
        .flatten();
        for w in widths {
            if w == 0 || !w.is_multiple_of(block) {
                return bad(format!("width {w} is not whole blocks of {}", self.ty));
            }
        }
        if !device::formats::is_quantize_supported(self.ty) {
            return bad(format!("tandem cannot write {} values", self.ty));
        }
        Ok(())
    }

    /// Parameters of the model with a vocabulary of `n_vocab`.
    pub fn n_params(&self, n_vocab: usize) -> u64 {
        let (e, kv) = (self.n_embd, self.n_head_kv * self.head_dim());
        let attn = 2 * e * e + 2 * e * kv;
        let ffn = match self.experts {
            None => 3 * e * self.n_ff,
            Some(x) => {
                let shared = match self.arch.recipe().traits().experts {
                    Experts::Always(d) if d.gated_shared_expert => 3 * e * self.n_ff + e,
                    _ => 0,
                };
                x.n_expert * (3 * e * x.n_ff_exp + e) + shared
            }
        };
        (2 * n_vocab * e + (self.n_layer + self.nextn) * (attn + ffn)) as u64
    }

    /// Writes the model to `path`, with the tokenizer of `tokenizer`.
    pub fn write(&self, tokenizer: &GgufFile, path: &Path) -> Result<()> {
        self.write_vocab(&Vocab::copied(tokenizer)?, path)
    }

    /// Writes the model to `path` with the tokenizer of `tokenizer` cut to its first
    /// `n_vocab` tokens ([`Vocab::cut`]).
    pub fn write_cut_vocab(&self, tokenizer: &GgufFile, n_vocab: usize, path: &Path) -> Result<()> {
        self.write_vocab(&Vocab::cut(tokenizer, n_vocab)?, path)
    }

    /// Writes the model to `path` with a placeholder vocabulary of `n_vocab` tokens
    /// ([`Vocab::placeholder`]).
    pub fn write_placeholder_vocab(&self, n_vocab: usize, path: &Path) -> Result<()> {
        self.write_vocab(&Vocab::placeholder(n_vocab), path)
    }

    /// Writes the model to `path` with the tokenizer `vocab`.
    pub fn write_vocab(&self, vocab: &Vocab, path: &Path) -> Result<()> {
        self.check()?;
        let a = self.arch.name();
        let mut w = vocab.writer(a);
        // llama.cpp reads a Mixtral's expert width from feed_forward_length alone.
        let n_ff = match (a, self.experts) {
            ("llama", Some(x)) => x.n_ff_exp,
            _ => self.n_ff,
        };
        let mut keys = vec![
            ("embedding_length", self.n_embd),
            ("block_count", self.n_layer + self.nextn),
            ("feed_forward_length", n_ff),
            ("attention.head_count", self.n_head),
            ("attention.head_count_kv", self.n_head_kv),
            ("context_length", 4096),
        ];
        if self.nextn > 0 {
            keys.push(("nextn_predict_layers", self.nextn));
        }
        if let Some(w) = self.window {
            keys.push(("attention.sliding_window", w));
        }
        if let Some(x) = self.experts {
            keys.extend([
                ("expert_count", x.n_expert),
                ("expert_used_count", x.n_expert_used),
            ]);
            if a != "llama" {
                keys.push(("expert_feed_forward_length", x.n_ff_exp));
            }
            if a == "qwen2moe" {
                keys.push(("expert_shared_feed_forward_length", self.n_ff));
            }
        }
        for (k, v) in keys {
            w.metadata(&format!("{a}.{k}"), Value::U32(v as u32));
        }
        w.metadata(
            &format!("{a}.attention.layer_norm_rms_epsilon"),
            Value::F32(1e-6),
        );
        w.metadata(&format!("{a}.rope.freq_base"), Value::F32(10_000.0));
        self.arch_keys(&mut w);
        if let Some(d) = self.delta {
            self.hybrid_keys(&mut w, d);
        }
        let mut t = Tensors {
            w: &mut w,
            rng: Rng::new(self.seed),
        };
        self.tensors(&mut t, vocab.n_vocab)?;
        write_file(&w, path)
    }

    fn tensors(&self, t: &mut Tensors, n_vocab: usize) -> Result<()> {
        let (e, hd) = (self.n_embd, self.head_dim());
        let (q, kv) = (self.n_head * hd, self.n_head_kv * hd);
        let traits = self.arch.recipe().traits();
        // The recipes' attention options, as the files of each architecture have them.
        let qkv_bias = matches!(self.arch.name(), "qwen2" | "qwen2moe");
        let qk_norm = matches!(self.arch.name(), "qwen3" | "qwen3moe" | "gemma3");
        t.matrix("token_embd.weight", &[e, n_vocab], GgmlType::Q8_0, 1.0)?;
        // A hybrid's head twice as strong: logits of standard deviation ~2 (sharper
        // distributions for the comparisons with llama.cpp).
        let head = if self.delta.is_some() { 2.0 } else { 1.0 };
        t.matrix("output.weight", &[e, n_vocab], self.ty, head * scale(e))?;
        t.ones("output_norm.weight", e);
        for il in 0..self.n_layer + self.nextn {
            let n = |s: &str| format!("blk.{il}.{s}");
            if il >= self.n_layer {
                self.nextn_entry(t, il)?;
            }
            if let Some(d) = self.delta {
                self.hybrid_mixer(t, il, d)?;
            } else {
                t.ones(&n("attn_norm.weight"), e);
                t.ones(&n("ffn_norm.weight"), e);
            }
            if self.delta.is_none() && !self.conv_block(t, il)? {
                for (name, rows) in [("attn_q", q), ("attn_k", kv), ("attn_v", kv)] {
                    t.matrix(&n(&format!("{name}.weight")), &[e, rows], self.ty, scale(e))?;
                    if qkv_bias {
                        t.zeros(&n(&format!("{name}.bias")), rows);
                    }
                }
                if qk_norm {
                    t.ones(&n("attn_q_norm.weight"), hd);
                    t.ones(&n("attn_k_norm.weight"), hd);
                }
                t.matrix(&n("attn_output.weight"), &[q, e], self.ty, scale(q))?;
            }
            if self.arch.name() == "gemma3" {
                t.ones(&n("post_attention_norm.weight"), e);
                t.ones(&n("post_ffw_norm.weight"), e);
            }
            let (ff, suffix) = match self.experts {
                None => (self.n_ff, ""),
                Some(x) => {
                    let ne = x.n_expert;
                    let ff = x.n_ff_exp;
                    t.matrix(&n("ffn_gate_inp.weight"), &[e, ne], GgmlType::F32, scale(e))?;
                    t.matrix(&n("ffn_gate_exps.weight"), &[e, ff, ne], self.ty, scale(e))?;
                    t.matrix(&n("ffn_up_exps.weight"), &[e, ff, ne], self.ty, scale(e))?;
                    t.matrix(&n("ffn_down_exps.weight"), &[ff, e, ne], self.ty, scale(ff))?;
                    if !matches!(traits.experts, Experts::Always(d) if d.gated_shared_expert) {
                        continue;
                    }
                    t.matrix(
                        &n("ffn_gate_inp_shexp.weight"),
                        &[e],
                        GgmlType::F32,
                        scale(e),
                    )?;
                    (self.n_ff, "_shexp")
                }
            };
            t.matrix(
                &n(&format!("ffn_gate{suffix}.weight")),
                &[e, ff],
                self.ty,
                scale(e),
            )?;
            t.matrix(
                &n(&format!("ffn_up{suffix}.weight")),
                &[e, ff],
                self.ty,
                scale(e),
            )?;
            t.matrix(
                &n(&format!("ffn_down{suffix}.weight")),
                &[ff, e],
                self.ty,
                scale(ff),
            )?;
        }
        Ok(())
    }
}

/// Of every this many blocks of a hybrid, the last attends.
const FULL_ATTENTION_INTERVAL: usize = 4;

impl Synthetic {
    /// RoPE over a quarter of each head (as Qwen 3.5), its pairs in three interleaved
    /// sections.
    fn hybrid_keys(&self, w: &mut GgufWriter, d: DeltaShape) {
        let a = self.arch.name();
        let n_rot = (self.head_dim() / 4).max(2) & !1;
        let pairs = n_rot / 2;
        // Pair i takes axis i % 3: each axis as many pairs as fall to it.
        let sections = [0, 1, 2, 3].map(|a| if a < 3 { (pairs + 2 - a) / 3 } else { 0 });
        let keys = [
            ("ssm.conv_kernel", d.conv_kernel),
            ("ssm.state_size", d.head_dim),
            ("ssm.group_count", d.n_k_heads),
            ("ssm.time_step_rank", d.n_v_heads),
            ("ssm.inner_size", d.n_v_heads * d.head_dim),
            ("full_attention_interval", FULL_ATTENTION_INTERVAL),
            ("rope.dimension_count", n_rot),
        ];
        for (k, v) in keys {
            w.metadata(&format!("{a}.{k}"), Value::U32(v as u32));
        }
        let sections = sections.iter().map(|&v| Value::I32(v as i32)).collect();
        w.metadata(
            &format!("{a}.rope.dimension_sections"),
            Value::Array(gguf::ValueType::I32, sections),
        );
    }

    /// Block `il`'s norms and mixer in a qwen35 hybrid: Gated DeltaNet or gated
    /// attention (its feed-forward network is written as any other's). The decay rates `-exp(A_log)` lie in `[-1.5, -0.5)`, the biases of
    /// α in `[-1, 1)`.
    fn hybrid_mixer(&self, t: &mut Tensors, il: usize, d: DeltaShape) -> Result<()> {
        let (e, hd, ty) = (self.n_embd, self.head_dim(), self.ty);
        let (q, kv) = (self.n_head * hd, self.n_head_kv * hd);
        let n = |s: &str| format!("blk.{il}.{s}");
        t.ones(&n("attn_norm.weight"), e);
        t.ones(&n("post_attention_norm.weight"), e);
        if il >= self.n_layer || (il + 1).is_multiple_of(FULL_ATTENTION_INTERVAL) {
            t.matrix(&n("attn_q.weight"), &[e, 2 * q], ty, scale(e))?;
            t.matrix(&n("attn_k.weight"), &[e, kv], ty, scale(e))?;
            t.matrix(&n("attn_v.weight"), &[e, kv], ty, scale(e))?;
            t.ones(&n("attn_q_norm.weight"), hd);
            t.ones(&n("attn_k_norm.weight"), hd);
            t.matrix(&n("attn_output.weight"), &[q, e], ty, scale(q))?;
        } else {
            let (hk, hv, sd) = (d.n_k_heads, d.n_v_heads, d.head_dim);
            let conv = 2 * hk * sd + hv * sd;
            t.matrix(&n("attn_qkv.weight"), &[e, conv], ty, scale(e))?;
            t.matrix(&n("attn_gate.weight"), &[e, hv * sd], ty, scale(e))?;
            t.matrix(
                &n("ssm_conv1d.weight"),
                &[d.conv_kernel, conv],
                GgmlType::F32,
                scale(d.conv_kernel),
            )?;
            t.matrix(&n("ssm_dt.bias"), &[hv], GgmlType::F32, 1.0)?;
            let a = (0..hv).map(|_| -1.0 - 0.5 * t.rng.uniform()).collect();
            t.vector(&n("ssm_a"), a);
            t.matrix(&n("ssm_beta.weight"), &[e, hv], ty, scale(e))?;
            t.matrix(&n("ssm_alpha.weight"), &[e, hv], ty, scale(e))?;
            t.ones(&n("ssm_norm.weight"), sd);
            t.matrix(&n("ssm_out.weight"), &[hv * sd, e], ty, scale(hv * sd))?;
        }
        Ok(())
    }
}

impl Synthetic {
    /// NextN block `il`'s entry and head norm: `eh_proj` is the identity on the
    /// embedding's half, uniform in `±0.1/√n_embd` on the state's (see [`Synthetic::nextn`]).
    fn nextn_entry(&self, t: &mut Tensors, il: usize) -> Result<()> {
        let e = self.n_embd;
        let n = |s: &str| format!("blk.{il}.nextn.{s}.weight");
        t.ones(&n("enorm"), e);
        t.ones(&n("hnorm"), e);
        t.ones(&n("shared_head_norm"), e);
        let a = 0.1 * scale(e);
        let rows = (0..e).map(|i| {
            let mut row = vec![0.0; 2 * e];
            row[i] = 1.0;
            row
        });
        t.rows(&n("eh_proj"), 2 * e, rows, self.ty, a)
    }
}

#[cfg(feature = "testing")]
impl Synthetic {
    /// Taps of a toyconv model's convolutions.
    const CONV_KERNEL: usize = 4;

    /// Writes block `il`'s convolution in place of attention where the architecture is
    /// toyconv and the block odd; whether it did.
    fn conv_block(&self, t: &mut Tensors, il: usize) -> Result<bool> {
        if self.arch.name() != "toyconv" || il.is_multiple_of(2) {
            return Ok(false);
        }
        let (e, k) = (self.n_embd, Self::CONV_KERNEL);
        let n = |s: &str| format!("blk.{il}.{s}.weight");
        t.matrix(&n("ssm_in"), &[e, e], self.ty, scale(e))?;
        t.matrix(&n("ssm_conv1d"), &[e * k], GgmlType::F32, scale(k))?;
        t.matrix(&n("ssm_out"), &[e, e], self.ty, scale(e))?;
        Ok(true)
    }

    fn arch_keys(&self, w: &mut GgufWriter) {
        if self.arch.name() == "toyconv" {
            w.metadata("toyconv.conv_kernel", Value::U32(Self::CONV_KERNEL as u32));
        }
    }
}

#[cfg(not(feature = "testing"))]
impl Synthetic {
    fn conv_block(&self, _: &mut Tensors, _: usize) -> Result<bool> {
        Ok(false)
    }

    fn arch_keys(&self, _: &mut GgufWriter) {}
}

/// The tokenizer a synthetic model is written with: its `tokenizer.*` keys and the number
/// of its tokens (the rows of the embeddings and the output head).
#[derive(Debug, Clone, PartialEq)]
pub struct Vocab {
    keys: Vec<(String, Value)>,
    n_vocab: usize,
}

impl Vocab {
    /// Every `tokenizer.*` key of `tokenizer`, chat template included.
    pub fn copied(tokenizer: &GgufFile) -> Result<Vocab> {
        let md = &tokenizer.header.metadata;
        let n_vocab = md.array("tokenizer.ggml.tokens")?.len();
        let keys = md
            .iter()
            .filter(|(k, _)| k.starts_with("tokenizer."))
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect();
        Ok(Vocab { keys, n_vocab })
    }

    /// The tokenizer of `tokenizer` cut to its first `n_vocab` tokens and the merges among
    /// them (a byte-level BPE tokenizer whose first tokens are its specials and bytes
    /// still encodes any text, in more tokens): small golden logits over a real tokenizer.
    /// Errors when `n_vocab` is 0 or more than the tokenizer has, or a special token's id
    /// lies past it.
    pub fn cut(tokenizer: &GgufFile, n_vocab: usize) -> Result<Vocab> {
        let md = &tokenizer.header.metadata;
        let bad = |problem: String| Error::Synthetic(problem);
        let tokens = md.array("tokenizer.ggml.tokens")?;
        if n_vocab == 0 || n_vocab > tokens.len() {
            return Err(bad(format!(
                "a vocabulary of {n_vocab} of {} tokens",
                tokens.len()
            )));
        }
        let kept: std::collections::HashSet<&str> = tokens[..n_vocab]
            .iter()
            .filter_map(|t| t.as_str())
            .collect();
        let mut keys = Vec::new();
        for (k, v) in md.iter().filter(|(k, _)| k.starts_with("tokenizer.")) {
            let v = match v {
                Value::Array(ty, items) if k == "tokenizer.ggml.merges" => {
                    let within = |m: &&Value| {
                        let m = m.as_str().unwrap_or("");
                        let (a, b) = m.split_once(' ').unwrap_or((m, ""));
                        kept.contains(a)
                            && kept.contains(b)
                            && kept.contains(format!("{a}{b}").as_str())
                    };
                    Value::Array(*ty, items.iter().filter(within).cloned().collect())
                }
                Value::Array(ty, items) if items.len() == tokens.len() => {
                    Value::Array(*ty, items[..n_vocab].to_vec())
                }
                v if k.ends_with("_token_id") => {
                    if v.as_integer().is_some_and(|id| id >= n_vocab as i128) {
                        return Err(bad(format!("{k} {v:?} lies past {n_vocab} tokens")));
                    }
                    v.clone()
                }
                v => v.clone(),
            };
            keys.push((k.to_string(), v));
        }
        Ok(Vocab { keys, n_vocab })
    }

    /// A placeholder vocabulary of `n_vocab` tokens (`<0>`, `<1>`, …; no merges, no
    /// template): for benchmarks of a real model's shape where that model is not at hand
    /// (they run on token ids; no text can be encoded).
    pub fn placeholder(n_vocab: usize) -> Vocab {
        let tokens = (0..n_vocab)
            .map(|i| Value::String(format!("<{i}>")))
            .collect();
        let keys = vec![
            ("tokenizer.ggml.model".into(), Value::String("none".into())),
            (
                "tokenizer.ggml.tokens".into(),
                Value::Array(gguf::ValueType::String, tokens),
            ),
        ];
        Vocab { keys, n_vocab }
    }

    pub fn n_vocab(&self) -> usize {
        self.n_vocab
    }

    /// A writer holding the general keys of a synthetic model of architecture `arch` and
    /// these tokenizer keys.
    pub(crate) fn writer(&self, arch: &str) -> GgufWriter {
        let mut w = GgufWriter::new();
        w.metadata("general.architecture", Value::String(arch.into()));
        w.metadata("general.name", Value::String(format!("synthetic {arch}")));
        for (k, v) in &self.keys {
            w.metadata(k, v.clone());
        }
        w
    }
}

/// The keys a synthetic drafter of a target's features writes: `{arch}.{k}` of `keys`, its
/// RMS epsilon and RoPE base, and the target blocks whose inputs it reads.
pub(crate) fn drafter_keys(
    w: &mut GgufWriter,
    arch: &str,
    keys: &[(&str, usize)],
    target_layers: &[usize],
) {
    for &(k, v) in keys {
        w.metadata(&format!("{arch}.{k}"), Value::U32(v as u32));
    }
    w.metadata(
        &format!("{arch}.attention.layer_norm_rms_epsilon"),
        Value::F32(1e-6),
    );
    w.metadata(&format!("{arch}.rope.freq_base"), Value::F32(10_000.0));
    let layers = target_layers.iter().map(|&l| Value::I32(l as i32));
    w.metadata(
        &format!("{arch}.target_layers"),
        Value::Array(gguf::ValueType::I32, layers.collect()),
    );
}

/// A synthetic drafter's head: where it has its own, its embeddings (`n_vocab` rows of
/// `e`) and output head, over `draft_vocab` tokens spread over the vocabulary where given
/// (their ids in `d2t`); its output norm, all `norm`.
pub(crate) fn drafter_head(
    t: &mut Tensors,
    [e, n_vocab]: [usize; 2],
    ty: GgmlType,
    (own_head, draft_vocab): (bool, Option<usize>),
    norm: f32,
) -> Result<()> {
    if own_head {
        t.matrix("token_embd.weight", &[e, n_vocab], ty, 1.0)?;
        let rows = draft_vocab.unwrap_or(n_vocab);
        t.matrix("output.weight", &[e, rows], ty, 4.0 * scale(e))?;
        if let Some(n) = draft_vocab {
            let ids = (0..n).flat_map(|i| ((i * n_vocab / n) as i64).to_le_bytes());
            t.w.tensor("d2t", &[n as u64], GgmlType::I64, ids.collect());
        }
    }
    t.vector("output_norm.weight", vec![norm; e]);
    Ok(())
}

/// Checks that `n_head` heads, `n_head_kv` of them for keys and values, divide `n_embd`.
pub(crate) fn check_heads(n_embd: usize, n_head: usize, n_head_kv: usize) -> Result<()> {
    if n_head == 0
        || n_head_kv == 0
        || !n_embd.is_multiple_of(n_head)
        || !n_head.is_multiple_of(n_head_kv)
    {
        return Err(Error::Synthetic(format!(
            "{n_head} heads ({n_head_kv} for keys and values) do not divide n_embd {n_embd}"
        )));
    }
    Ok(())
}

pub(crate) fn write_file(w: &GgufWriter, path: &Path) -> Result<()> {
    w.write(path)
        .map_err(|e| Error::Synthetic(format!("{}: {e}", path.display())))
}

/// Uniform values of variance `1 / cols`: a product with a unit-variance input has unit
/// variance.
pub(crate) fn scale(cols: usize) -> f32 {
    (3.0 / cols as f32).sqrt()
}

pub(crate) struct Tensors<'a> {
    pub(crate) w: &'a mut GgufWriter,
    pub(crate) rng: Rng,
}

impl Tensors<'_> {
    /// A tensor of GGUF dims `dims` (row length first) of values uniform in `[-a, a)`.
    pub(crate) fn matrix(
        &mut self,
        name: &str,
        dims: &[usize],
        ty: GgmlType,
        a: f32,
    ) -> Result<()> {
        let cols = dims[0];
        let n: usize = dims.iter().product();
        let rb = ty
            .row_bytes(cols as u64)
            .ok_or_else(|| Error::Synthetic(format!("{name}: rows of {cols} in {ty}")))?
            as usize;
        let mut bytes = vec![0u8; n / cols * rb];
        let mut row = vec![0f32; cols];
        for out in bytes.chunks_exact_mut(rb) {
            row.iter_mut().for_each(|v| *v = self.rng.uniform() * a);
            device::formats::quantize_row(ty, &row, out)
                .map_err(|e| Error::Synthetic(format!("{name}: {e}")))?;
        }
        let dims: Vec<u64> = dims.iter().map(|&d| d as u64).collect();
        self.w.tensor(name, &dims, ty, bytes);
        Ok(())
    }

    /// A matrix of rows of `cols` given by `rows`, the second half of each row (past
    /// `cols / 2`) filled uniform in `[-a, a)`.
    fn rows(
        &mut self,
        name: &str,
        cols: usize,
        rows: impl Iterator<Item = Vec<f32>>,
        ty: GgmlType,
        a: f32,
    ) -> Result<()> {
        let rb = ty
            .row_bytes(cols as u64)
            .ok_or_else(|| Error::Synthetic(format!("{name}: rows of {cols} in {ty}")))?
            as usize;
        let mut bytes = Vec::new();
        let mut n_rows = 0;
        for mut row in rows {
            row[cols / 2..]
                .iter_mut()
                .for_each(|v| *v = self.rng.uniform() * a);
            let at = bytes.len();
            bytes.resize(at + rb, 0);
            device::formats::quantize_row(ty, &row, &mut bytes[at..])
                .map_err(|e| Error::Synthetic(format!("{name}: {e}")))?;
            n_rows += 1;
        }
        self.w.tensor(name, &[cols as u64, n_rows], ty, bytes);
        Ok(())
    }

    pub(crate) fn vector(&mut self, name: &str, values: Vec<f32>) {
        let n = values.len();
        self.shaped(name, &[n], values);
    }

    /// F32 `values` as a tensor of GGUF dims `dims` (row length first).
    pub(crate) fn shaped(&mut self, name: &str, dims: &[usize], values: Vec<f32>) {
        assert_eq!(dims.iter().product::<usize>(), values.len(), "{name}");
        let bytes = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        let dims: Vec<u64> = dims.iter().map(|&d| d as u64).collect();
        self.w.tensor(name, &dims, GgmlType::F32, bytes);
    }

    pub(crate) fn ones(&mut self, name: &str, n: usize) {
        self.vector(name, vec![1.0; n]);
    }

    fn zeros(&mut self, name: &str, n: usize) {
        self.vector(name, vec![0.0; n]);
    }
}

/// xorshift64: the same values on every platform.
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    fn step(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// Uniform in `[-1, 1)`.
    pub(crate) fn uniform(&mut self) -> f32 {
        (self.step() >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
    }

    /// Uniform in `0..n` (`n > 0`; up to a bias of `n / 2^32`).
    pub(crate) fn below(&mut self, n: usize) -> usize {
        (((self.step() >> 32) * n as u64) >> 32) as usize
    }
}
