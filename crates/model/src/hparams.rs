use gguf::Metadata;

use crate::arch::Arch;
use crate::{Error, Result};

/// Hyper-parameters read from GGUF metadata (`{arch}.*` keys).
#[derive(Debug, Clone, PartialEq)]
pub struct HParams {
    pub arch: Arch,
    pub n_vocab: usize,
    pub n_embd: usize,
    pub n_layer: usize,
    pub n_head: usize,
    pub n_head_kv: usize,
    pub head_dim: usize,
    pub n_ff: usize,
    /// Dimensions of each head that RoPE rotates.
    pub n_rot: usize,
    pub rope_freq_base: f32,
    pub rms_eps: f32,
    pub n_ctx_train: usize,
}

fn positive(key: &str, v: u32) -> Result<usize> {
    if v == 0 {
        return Err(Error::BadHParam {
            key: key.to_string(),
            problem: "must be positive".into(),
        });
    }
    Ok(v as usize)
}

impl HParams {
    /// Reads and checks the hyper-parameters; `n_vocab` comes from the token list when
    /// `{arch}.vocab_size` is absent.
    pub fn from_metadata(md: &Metadata) -> Result<HParams> {
        let arch = Arch::from_name(md.str("general.architecture")?)?;
        let a = arch.name();
        let key = |k: &str| format!("{a}.{k}");
        let req = |k: &str| -> Result<usize> { positive(&key(k), md.u32(&key(k))?) };
        let n_embd = req("embedding_length")?;
        let n_head = req("attention.head_count")?;
        let n_head_kv = match md.opt_u32(&key("attention.head_count_kv"))? {
            Some(v) => positive(&key("attention.head_count_kv"), v)?,
            None => n_head,
        };
        let head_dim = match md.opt_u32(&key("attention.key_length"))? {
            Some(v) => positive(&key("attention.key_length"), v)?,
            None => n_embd / n_head,
        };
        let n_vocab = match md.opt_u32(&key("vocab_size"))? {
            Some(v) => positive(&key("vocab_size"), v)?,
            None => md.array("tokenizer.ggml.tokens")?.len(),
        };
        let hp = HParams {
            arch,
            n_vocab,
            n_embd,
            n_layer: req("block_count")?,
            n_head,
            n_head_kv,
            head_dim,
            n_ff: req("feed_forward_length")?,
            n_rot: md
                .opt_u32(&key("rope.dimension_count"))?
                .map_or(head_dim, |v| v as usize),
            rope_freq_base: md.opt_f32(&key("rope.freq_base"))?.unwrap_or(10_000.0),
            rms_eps: md.f32(&key("attention.layer_norm_rms_epsilon"))?,
            n_ctx_train: md.opt_u32(&key("context_length"))?.unwrap_or(2048) as usize,
        };
        let bad = |k: &str, problem: String| Error::BadHParam {
            key: key(k),
            problem,
        };
        if n_head % n_head_kv != 0 {
            return Err(bad(
                "attention.head_count_kv",
                format!("{n_head_kv} does not divide head_count {n_head}"),
            ));
        }
        if hp.n_rot > head_dim || !hp.n_rot.is_multiple_of(2) {
            return Err(bad(
                "rope.dimension_count",
                format!("{} must be even and at most head_dim {head_dim}", hp.n_rot),
            ));
        }
        if let Some(s) = md.opt_str(&key("rope.scaling.type"))? {
            if s != "none" && md.opt_f32(&key("rope.scaling.factor"))?.unwrap_or(1.0) != 1.0 {
                return Err(bad(
                    "rope.scaling.type",
                    format!("'{s}' is not supported yet"),
                ));
            }
        }
        Ok(hp)
    }

    /// Width of all query heads together.
    pub fn q_dim(&self) -> usize {
        self.n_head * self.head_dim
    }

    /// Width of all key (or value) heads together.
    pub fn kv_dim(&self) -> usize {
        self.n_head_kv * self.head_dim
    }
}
