//! Hyper-parameters: the keys every architecture of the transformer family shares, read
//! once for all recipes as each recipe's [`Traits`] direct; a recipe adjusts what is its
//! own ([`crate::arch::Recipe::hparams`]).

use device::RopeMode;
use gguf::Metadata;

use crate::rope::{RopeOverrides, RopeParams};
use crate::{Error, Result};

/// What the shared reading of hyper-parameters needs to know of an architecture.
#[derive(Debug, Clone, Copy)]
pub struct Traits {
    pub rope_mode: RopeMode,
    pub experts: Experts,
    /// Sliding-window attention when the file gives `attention.sliding_window`.
    pub sliding: Option<SlidingPattern>,
    /// Embeddings are multiplied by `√n_embd`.
    pub scaled_embeddings: bool,
}

/// The traits most architectures share: RoPE on adjacent pairs, dense, no window, plain
/// embeddings.
pub const PLAIN: Traits = Traits {
    rope_mode: RopeMode::Normal,
    experts: Experts::Never,
    sliding: None,
    scaled_embeddings: false,
};

/// Which blocks attend through a sliding window, and their RoPE base.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SlidingPattern {
    /// `Some(p)`: of every `p` blocks, the last attends globally and the others through the
    /// window; `None`: every block attends through it.
    pub global_every: Option<usize>,
    /// RoPE base of the windowed blocks when not `rope.freq_base`.
    pub rope_freq_base: Option<f32>,
}

impl SlidingPattern {
    /// Whether block `il` attends through the window.
    pub fn windowed(&self, il: usize) -> bool {
        self.global_every.is_none_or(|p| il % p < p - 1)
    }
}

/// Whether the feed-forward blocks are mixtures of experts, and the routing the
/// architecture implies where its metadata is silent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Experts {
    /// Dense feed-forward blocks only.
    Never,
    /// A mixture when the metadata gives `{arch}.expert_count`, dense otherwise.
    IfCounted(RoutingDefaults),
    /// Always a mixture.
    Always(RoutingDefaults),
}

/// What an architecture's mixture does unless `{arch}.expert_*` keys say otherwise.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RoutingDefaults {
    /// The chosen experts' weights are divided by their sum.
    pub norm_weights: bool,
    /// A shared expert (`ffn_*_shexp`) scaled by `sigmoid(ffn_gate_inp_shexp · x)` is added.
    pub gated_shared_expert: bool,
    /// An expert's width when `{arch}.expert_feed_forward_length` is absent.
    pub expert_width: ExpertWidth,
}

/// Where an expert's width comes from when the metadata does not give it (llama.cpp's
/// reading of each architecture).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExpertWidth {
    /// `feed_forward_length` (Mixtral).
    FeedForward,
    /// `feed_forward_length / expert_used_count` (qwen2moe, qwen3moe).
    FeedForwardPerUsed,
}

/// Hyper-parameters read from GGUF metadata (`{arch}.*` keys).
#[derive(Debug, Clone, PartialEq)]
pub struct HParams {
    /// `general.architecture`: the prefix of the keys.
    pub arch: &'static str,
    pub n_vocab: usize,
    pub n_embd: usize,
    pub n_layer: usize,
    pub n_head: usize,
    pub n_head_kv: usize,
    pub head_dim: usize,
    pub n_ff: usize,
    /// Dimensions of each head that RoPE rotates.
    pub n_rot: usize,
    pub rope_mode: RopeMode,
    pub rope_freq_base: f32,
    /// RoPE scaling past the training context.
    pub rope: RopeParams,
    pub rms_eps: f32,
    pub n_ctx_train: usize,
    /// The mixture of experts, for architectures and files that have one.
    pub moe: Option<MoeParams>,
    /// Factor on the attention scores (`1/√head_dim` unless the architecture says otherwise).
    pub attn_scale: f32,
    /// Factor on the embeddings (`√n_embd` where the architecture scales them).
    pub embed_scale: Option<f32>,
    /// Sliding-window attention on some blocks.
    pub sliding: Option<Sliding>,
    /// Residual streams the blocks pass each other (hyper-connections; 1 for a plain
    /// residual): the hidden state between blocks is `[rows, streams · n_embd]`.
    pub streams: usize,
    /// Multi-token-prediction blocks stored after the `n_layer` blocks
    /// (`nextn_predict_layers`): a drafter's ([`crate::Part::Nextn`]), never run by the
    /// model's own forward.
    pub n_nextn: usize,
    /// For a drafter of a target's features (EAGLE-3, DFlash), what it reads of the target.
    pub target: Option<TargetFeatures>,
}

/// What a drafter of a target's features reads of its target: the inputs of blocks
/// `layers` (llama.cpp's `target_layers`; the input of block `l` is the state after block
/// `l - 1`), each `[n_embd]` wide, concatenated in that order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TargetFeatures {
    pub layers: Vec<usize>,
    pub n_embd: usize,
    /// A block drafter's block (DFlash's `block_size`: its last token and the mask rows it
    /// drafts); 0 for a drafter of one token a forward.
    pub block: usize,
}

/// Sliding-window attention: the windowed blocks see the last `window` positions up to
/// their own, and turn RoPE with their own base.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sliding {
    pub window: usize,
    pub pattern: SlidingPattern,
}

/// How a mixture-of-experts block routes each row (`{arch}.expert_*` keys).
#[derive(Debug, Clone, PartialEq)]
pub struct MoeParams {
    pub n_expert: usize,
    /// Experts chosen per row (top-k).
    pub n_expert_used: usize,
    /// Hidden width of one expert.
    pub n_ff_exp: usize,
    pub gating: Gating,
    /// The chosen experts' weights are divided by their sum.
    pub norm_weights: bool,
    /// Factor on the chosen experts' weights (1 when the file gives none).
    pub weights_scale: f32,
    pub shared: Option<SharedExpert>,
    /// Blocks `0..n_dense_lead` are dense (`leading_dense_block_count`, DeepSeek-style).
    pub n_dense_lead: usize,
}

pub use device::Gating;

impl MoeParams {
    /// How [`device::Device::moe`] routes each row of this mixture.
    pub fn routing(&self) -> device::Routing {
        device::Routing {
            n_expert: self.n_expert,
            k: self.n_expert_used,
            gating: self.gating,
            norm_weights: self.norm_weights,
            weights_scale: self.weights_scale,
        }
    }
}

/// An expert every row goes through besides its chosen ones (`ffn_*_shexp`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SharedExpert {
    pub n_ff: usize,
    /// Scaled by `sigmoid(ffn_gate_inp_shexp · x)` (qwen2moe); otherwise added as it is
    /// (DeepSeek's shared experts, `expert_shared_count` of them fused into one).
    pub gated: bool,
}

/// The integer above 0 at metadata key `key` (an error naming the key where it is missing
/// or 0).
pub(crate) fn required(md: &Metadata, key: &str) -> Result<usize> {
    positive(key, md.u32(key)?)
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
    /// Reads and checks the hyper-parameters of an architecture `arch` with `traits`;
    /// `n_vocab` comes from the token list when `{arch}.vocab_size` is absent.
    pub fn read(md: &Metadata, arch: &'static str, traits: &Traits) -> Result<HParams> {
        let a = arch;
        let key = |k: &str| format!("{a}.{k}");
        let req = |k: &str| required(md, &key(k));
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
        let n_ctx_train = md.opt_u32(&key("context_length"))?.unwrap_or(2048) as usize;
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
            rope_mode: traits.rope_mode,
            rope_freq_base: md.opt_f32(&key("rope.freq_base"))?.unwrap_or(10_000.0),
            rope: RopeParams::from_metadata(md, arch, n_ctx_train)?,
            rms_eps: md.f32(&key("attention.layer_norm_rms_epsilon"))?,
            n_ctx_train,
            moe: None,
            attn_scale: 1.0 / (head_dim as f32).sqrt(),
            embed_scale: traits.scaled_embeddings.then(|| (n_embd as f32).sqrt()),
            sliding: None,
            streams: 1,
            n_nextn: 0,
            target: None,
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
        let moe = MoeParams::from_metadata(md, arch, traits.experts, [hp.n_ff, hp.n_layer])?;
        let window = match traits.sliding {
            Some(_) => md.opt_u32(&key("attention.sliding_window"))?,
            None => None,
        };
        let sliding = traits
            .sliding
            .zip(window.filter(|&w| w > 0))
            .map(|(pattern, w)| Sliding {
                window: w as usize,
                pattern,
            });
        Ok(HParams { moe, sliding, ..hp })
    }

    /// Floats per row of the hidden state between blocks ([`HParams::streams`]).
    pub fn hidden_width(&self) -> usize {
        self.streams * self.n_embd
    }

    /// The window block `il` attends through, if it is a windowed block.
    pub fn window(&self, il: usize) -> Option<usize> {
        let s = self.sliding?;
        s.pattern.windowed(il).then_some(s.window)
    }

    /// The RoPE base of block `il`.
    pub fn rope_base(&self, il: usize) -> f32 {
        match (self.window(il), self.sliding) {
            (Some(_), Some(s)) => s.pattern.rope_freq_base.unwrap_or(self.rope_freq_base),
            _ => self.rope_freq_base,
        }
    }

    /// The RoPE scaling of block `il`.
    pub fn rope_scaling(&self, il: usize) -> device::RopeScaling {
        self.rope
            .scaling(self.rope_base(il), self.n_rot, self.window(il).is_some())
    }

    /// Puts the flags' RoPE settings over the file's.
    pub fn apply_rope(&mut self, o: &RopeOverrides) {
        self.rope = self.rope.with(o);
        if let Some(b) = o.freq_base {
            self.rope_freq_base = b;
        }
    }

    /// Whether block `il` is a mixture of experts.
    pub fn is_moe_layer(&self, il: usize) -> bool {
        self.moe.as_ref().is_some_and(|m| il >= m.n_dense_lead)
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

impl MoeParams {
    /// The mixture `md` describes for an architecture `arch` whose mixtures are
    /// `experts`, or `None` for a dense model. `n_ff` is the feed-forward length, from
    /// which expert widths follow when the file does not give them, as llama.cpp reads
    /// them.
    fn from_metadata(
        md: &Metadata,
        arch: &str,
        experts: Experts,
        [n_ff, n_layer]: [usize; 2],
    ) -> Result<Option<MoeParams>> {
        let a = arch;
        let key = |k: &str| format!("{a}.{k}");
        let bad = |k: &str, problem: String| Error::BadHParam {
            key: key(k),
            problem,
        };
        let count = md.opt_u32(&key("expert_count"))?.unwrap_or(0) as usize;
        let defaults = match experts {
            Experts::Never => return Ok(None),
            Experts::IfCounted(_) if count == 0 => return Ok(None),
            Experts::Always(_) if count == 0 => {
                return Err(bad("expert_count", "must be positive".into()));
            }
            Experts::IfCounted(d) | Experts::Always(d) => d,
        };
        let n_expert_used = md.u32(&key("expert_used_count"))? as usize;
        if n_expert_used == 0 || n_expert_used > count {
            return Err(bad(
                "expert_used_count",
                format!("{n_expert_used} must be between 1 and expert_count {count}"),
            ));
        }
        let n_ff_exp = match md.opt_u32(&key("expert_feed_forward_length"))? {
            Some(v) => positive(&key("expert_feed_forward_length"), v)?,
            None => match defaults.expert_width {
                ExpertWidth::FeedForward => n_ff,
                ExpertWidth::FeedForwardPerUsed => n_ff / n_expert_used,
            },
        };
        let gating = match md.opt_u32(&key("expert_gating_func"))? {
            None | Some(1) => Gating::Softmax,
            Some(2) => Gating::Sigmoid,
            Some(v) => {
                return Err(bad(
                    "expert_gating_func",
                    format!("{v} is not 1 (softmax) or 2 (sigmoid)"),
                ))
            }
        };
        let shared_count = md.opt_u32(&key("expert_shared_count"))?.unwrap_or(0) as usize;
        let shared = if defaults.gated_shared_expert {
            let n_ff = match md.opt_u32(&key("expert_shared_feed_forward_length"))? {
                Some(v) => positive(&key("expert_shared_feed_forward_length"), v)?,
                None => n_ff,
            };
            Some(SharedExpert { n_ff, gated: true })
        } else if shared_count > 0 {
            Some(SharedExpert {
                n_ff: shared_count * n_ff_exp,
                gated: false,
            })
        } else {
            None
        };
        let n_dense_lead = md.opt_u32(&key("leading_dense_block_count"))?.unwrap_or(0) as usize;
        if n_dense_lead > n_layer {
            return Err(bad(
                "leading_dense_block_count",
                format!("{n_dense_lead} exceeds block_count {n_layer}"),
            ));
        }
        let weights_scale = match md.opt_f32(&key("expert_weights_scale"))? {
            Some(s) if s != 0.0 => s,
            _ => 1.0,
        };
        Ok(Some(MoeParams {
            n_expert: count,
            n_expert_used,
            n_ff_exp,
            gating,
            norm_weights: md
                .opt_bool(&key("expert_weights_norm"))?
                .unwrap_or(defaults.norm_weights),
            weights_scale,
            shared,
            n_dense_lead,
        }))
    }
}

/// The integer above 0 at metadata key `key`, which `what` needs: an error naming the key
/// where it is missing or 0.
pub(crate) fn positive_key(md: &Metadata, key: &str, what: &str) -> Result<usize> {
    match md.opt_u32(key)? {
        Some(v) => positive(key, v),
        None => Err(Error::BadHParam {
            key: key.to_string(),
            problem: format!("missing: {what} needs it"),
        }),
    }
}
