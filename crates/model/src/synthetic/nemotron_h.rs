//! Random-weight Nemotron-H models (`nemotron_h`), written with the metadata keys and
//! tensors llama.cpp's loader reads: Mamba-2 blocks (grouped B and C, a biased
//! convolution, the grouped norm with random weights), attention blocks without RoPE, and
//! squared-ReLU feed-forward blocks, in the order a pattern of Nemotron's
//! `hybrid_override_pattern` gives (`M` Mamba-2, `*` attention, `-` feed-forward). With
//! experts, `nemotron_h_moe` (Nemotron 3): each feed-forward block a mixture of
//! squared-ReLU experts with a bias on their choice and a shared expert (`E` in its
//! pattern).

use std::path::Path;

use gguf::{GgmlType, Value, ValueType};

use super::{check_heads, scale, write_file, ExpertShape, Rng, Tensors, Vocab};
use crate::layers::mamba2::Mamba2Shape;
use crate::{Error, Result};

/// The shape of a synthetic Nemotron-H model.
#[derive(Debug, Clone, PartialEq)]
pub struct NemotronShape {
    pub n_embd: usize,
    /// Block kinds, one character a block (`M`, `*`, `-`).
    pub pattern: String,
    pub n_head: usize,
    pub n_head_kv: usize,
    /// Width of the feed-forward blocks, and of a mixture's shared expert.
    pub n_ff: usize,
    /// The mixture of every feed-forward block (`nemotron_h_moe`), for `E` blocks.
    pub experts: Option<ExpertShape>,
    pub mamba: Mamba2Shape,
    /// Type of every matrix but the embeddings (Q8_0); its block size must divide `n_embd`,
    /// `n_ff`, the query width and the Mamba-2 inner width.
    pub ty: GgmlType,
    pub seed: u64,
}

/// Nemotron-H's pattern of `n_layer` blocks: Mamba-2 and feed-forward blocks (mixtures
/// where `moe`) in turn, every fourth an attention block.
pub fn default_pattern(n_layer: usize, moe: bool) -> String {
    let cycle = if moe { "MEM*" } else { "M-M*" };
    cycle.chars().cycle().take(n_layer).collect()
}

impl NemotronShape {
    fn head_dim(&self) -> usize {
        self.n_embd / self.n_head
    }

    fn check(&self) -> Result<()> {
        let bad = |problem: String| Err(Error::Synthetic(problem));
        let kinds = if self.experts.is_some() { "M*E" } else { "M*-" };
        if self.pattern.is_empty() || self.pattern.chars().any(|c| !kinds.contains(c)) {
            return bad(format!(
                "pattern {:?}: one of {kinds} a block",
                self.pattern
            ));
        }
        if let Some(x) = self.experts {
            if x.n_expert_used == 0 || x.n_expert_used > x.n_expert {
                return bad(format!(
                    "{} experts used of {}",
                    x.n_expert_used, x.n_expert
                ));
            }
        }
        check_heads(self.n_embd, self.n_head, self.n_head_kv)?;
        let m = self.mamba;
        if !m.d_inner.is_multiple_of(m.n_head) || !m.n_head.is_multiple_of(m.n_group) {
            return bad(format!(
                "Mamba-2: {} heads in groups of {} do not divide the inner width {}",
                m.n_head, m.n_group, m.d_inner
            ));
        }
        let block = self.ty.block_size() as usize;
        let expert = self.experts.map_or(self.n_ff, |x| x.n_ff_exp);
        for w in [self.n_embd, self.n_ff, m.d_inner, expert] {
            if w == 0 || !w.is_multiple_of(block) {
                return bad(format!("width {w} is not whole blocks of {}", self.ty));
            }
        }
        Ok(())
    }

    /// Parameters of the model with a vocabulary of `n_vocab`.
    pub fn n_params(&self, n_vocab: usize) -> u64 {
        let (e, m) = (self.n_embd, self.mamba);
        let (q, kv) = (
            self.n_head * self.head_dim(),
            self.n_head_kv * self.head_dim(),
        );
        let conv = m.d_inner + 2 * m.n_group * m.d_state;
        let block = |c: char| match c {
            'M' => e * (m.d_inner + conv + m.n_head) + m.conv_kernel * conv + m.d_inner * e,
            '*' => 2 * e * q + 2 * e * kv,
            'E' => {
                let x = self.experts.expect("E blocks have experts");
                x.n_expert * (2 * e * x.n_ff_exp + 1) + e * x.n_expert + 2 * e * self.n_ff
            }
            _ => 2 * e * self.n_ff,
        };
        (2 * n_vocab * e + self.pattern.chars().map(block).sum::<usize>()) as u64
    }

    /// Writes the model to `path` with the tokenizer `vocab`.
    pub fn write_vocab(&self, vocab: &Vocab, path: &Path) -> Result<()> {
        self.check()?;
        let a = match self.experts {
            None => "nemotron_h",
            Some(_) => "nemotron_h_moe",
        };
        let mut w = vocab.writer(a);
        let m = self.mamba;
        let keys = [
            ("embedding_length", self.n_embd),
            ("block_count", self.pattern.len()),
            ("attention.head_count", self.n_head),
            ("attention.key_length", self.head_dim()),
            ("attention.value_length", self.head_dim()),
            ("context_length", 4096),
            ("ssm.conv_kernel", m.conv_kernel),
            ("ssm.inner_size", m.d_inner),
            ("ssm.state_size", m.d_state),
            ("ssm.time_step_rank", m.n_head),
            ("ssm.group_count", m.n_group),
        ];
        for (k, v) in keys {
            w.metadata(&format!("{a}.{k}"), Value::U32(v as u32));
        }
        let per_block = |f: &dyn Fn(char) -> usize| {
            let v = self.pattern.chars().map(|c| Value::U32(f(c) as u32));
            Value::Array(ValueType::U32, v.collect())
        };
        let kv = per_block(&|c| if c == '*' { self.n_head_kv } else { 0 });
        let ff_width = self.experts.map_or(self.n_ff, |x| x.n_ff_exp);
        let ff = per_block(&|c| if "-E".contains(c) { ff_width } else { 0 });
        w.metadata(&format!("{a}.attention.head_count_kv"), kv);
        w.metadata(&format!("{a}.feed_forward_length"), ff);
        for k in ["layer_norm_epsilon", "layer_norm_rms_epsilon"] {
            w.metadata(&format!("{a}.attention.{k}"), Value::F32(1e-5));
        }
        if let Some(x) = self.experts {
            let keys = [
                ("expert_count", x.n_expert),
                ("expert_used_count", x.n_expert_used),
                ("expert_feed_forward_length", x.n_ff_exp),
                ("expert_shared_feed_forward_length", self.n_ff),
                ("expert_shared_count", 1),
            ];
            for (k, v) in keys {
                w.metadata(&format!("{a}.{k}"), Value::U32(v as u32));
            }
            w.metadata(&format!("{a}.expert_weights_norm"), Value::Bool(true));
            w.metadata(&format!("{a}.expert_weights_scale"), Value::F32(2.5));
        }
        let mut t = Tensors {
            w: &mut w,
            rng: Rng::new(self.seed),
        };
        self.tensors(&mut t, vocab.n_vocab())?;
        write_file(&w, path)
    }

    fn tensors(&self, t: &mut Tensors, n_vocab: usize) -> Result<()> {
        let (e, ty) = (self.n_embd, self.ty);
        t.matrix("token_embd.weight", &[e, n_vocab], GgmlType::Q8_0, 1.0)?;
        // A head twice as strong: logits of standard deviation ~2.
        t.matrix("output.weight", &[e, n_vocab], ty, 2.0 * scale(e))?;
        t.ones("output_norm.weight", e);
        for (il, kind) in self.pattern.chars().enumerate() {
            let n = |s: &str| format!("blk.{il}.{s}");
            t.ones(&n("attn_norm.weight"), e);
            match kind {
                'M' => self.mamba(t, il)?,
                '*' => {
                    let (q, kv) = (
                        self.n_head * self.head_dim(),
                        self.n_head_kv * self.head_dim(),
                    );
                    t.matrix(&n("attn_q.weight"), &[e, q], ty, scale(e))?;
                    t.matrix(&n("attn_k.weight"), &[e, kv], ty, scale(e))?;
                    t.matrix(&n("attn_v.weight"), &[e, kv], ty, scale(e))?;
                    t.matrix(&n("attn_output.weight"), &[q, e], ty, scale(q))?;
                }
                'E' => self.mixture(t, il)?,
                _ => {
                    // relu(x)² of unit-variance x has a second moment of 3/2.
                    t.matrix(&n("ffn_up.weight"), &[e, self.n_ff], ty, scale(e))?;
                    let down = scale(self.n_ff) * (2.0f32 / 3.0).sqrt();
                    t.matrix(&n("ffn_down.weight"), &[self.n_ff, e], ty, down)?;
                }
            }
        }
        Ok(())
    }

    /// Block `il`'s mixture: a router, biases on the choice in `[-0.5, 0.5)`, the experts
    /// and the shared expert, each scaled as a feed-forward block.
    fn mixture(&self, t: &mut Tensors, il: usize) -> Result<()> {
        let (e, ty) = (self.n_embd, self.ty);
        let x = self.experts.expect("E blocks have experts");
        let (ne, ff) = (x.n_expert, x.n_ff_exp);
        let n = |s: &str| format!("blk.{il}.{s}");
        let down = |ff: usize| scale(ff) * (2.0f32 / 3.0).sqrt();
        t.matrix(&n("ffn_gate_inp.weight"), &[e, ne], GgmlType::F32, scale(e))?;
        t.matrix(&n("exp_probs_b.bias"), &[ne], GgmlType::F32, 0.5)?;
        t.matrix(&n("ffn_up_exps.weight"), &[e, ff, ne], ty, scale(e))?;
        t.matrix(&n("ffn_down_exps.weight"), &[ff, e, ne], ty, down(ff))?;
        t.matrix(&n("ffn_up_shexp.weight"), &[e, self.n_ff], ty, scale(e))?;
        t.matrix(
            &n("ffn_down_shexp.weight"),
            &[self.n_ff, e],
            ty,
            down(self.n_ff),
        )
    }

    /// Block `il`'s Mamba-2 mixer: decay rates `-exp(A_log)` in `[-1.5, -1)`, step biases
    /// and skips in `[-1, 1)`, convolution biases in `[-0.5, 0.5)`, norm weights in
    /// `[0.5, 1.5)`.
    fn mamba(&self, t: &mut Tensors, il: usize) -> Result<()> {
        let (e, ty, m) = (self.n_embd, self.ty, self.mamba);
        let n = |s: &str| format!("blk.{il}.{s}");
        let conv = m.d_inner + 2 * m.n_group * m.d_state;
        let d_in_proj = m.d_inner + conv + m.n_head;
        t.matrix(&n("ssm_in.weight"), &[e, d_in_proj], ty, scale(e))?;
        let k = m.conv_kernel;
        t.matrix(&n("ssm_conv1d.weight"), &[k, conv], GgmlType::F32, scale(k))?;
        t.matrix(&n("ssm_conv1d.bias"), &[conv], GgmlType::F32, 0.5)?;
        t.matrix(&n("ssm_dt.bias"), &[m.n_head], GgmlType::F32, 1.0)?;
        let a = (0..m.n_head)
            .map(|_| -1.25 - 0.25 * t.rng.uniform())
            .collect();
        t.shaped(&n("ssm_a"), &[1, m.n_head], a);
        t.matrix(&n("ssm_d"), &[1, m.n_head], GgmlType::F32, 1.0)?;
        let group = m.d_inner / m.n_group;
        let norm = (0..m.d_inner)
            .map(|_| 1.0 + 0.5 * t.rng.uniform())
            .collect();
        t.shaped(&n("ssm_norm.weight"), &[group, m.n_group], norm);
        t.matrix(&n("ssm_out.weight"), &[m.d_inner, e], ty, scale(m.d_inner))
    }
}
