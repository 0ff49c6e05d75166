//! `tandem synth`: a random-weight model of a given shape, for tests and benchmarks of
//! shapes no downloadable model has. The defaults make the ~0.5B mixture of the MoE
//! verify-cost benchmark: qwen3moe, 8 of 64 experts, Q4_K. `--arch deepseek4` has
//! defaults of its own: a small DeepSeek-V4 with every feature on
//! ([`Dsv4Shape::default`]) and one NextN block, Q8_0. `--arch eagle3` writes an EAGLE-3 drafter for a target
//! of the same tokenizer (`--target-layers`, `--target-n-embd`), `--arch dflash` a DFlash
//! block drafter (`--target-layers`, `--dflash-block`; DSpark with `--dspark-rank`, DFlash 2
//! with `--dflash2`; stages of DeepSeek-V4 blocks with `--backbone deepseek4`, shaped as
//! `--arch deepseek4`), `--arch nemotron_h` a Nemotron-H hybrid (`--hybrid-pattern`,
//! `--ssm-*`). `--mmproj MODEL` writes a vision tower for a text model instead.

use std::path::PathBuf;

use clap::Args;
use gguf::{GgmlType, GgufFile};
use model::layers::gated_delta_net::DeltaShape;
use model::layers::mamba2::Mamba2Shape;
use model::synthetic::deepseek4::{Dsv4Shape, DEFAULT_RATIOS};
use model::synthetic::dflash::{Dflash2, DflashShape, Dspark};
use model::synthetic::eagle3::Eagle3Shape;
use model::synthetic::mmproj::{MmprojShape, TowerKind};
use model::synthetic::nemotron_h::{default_pattern, NemotronShape};
use model::synthetic::{ExpertShape, Synthetic, Vocab};
use model::Arch;

use crate::cli::CacheArgs;
use crate::pull::{self, DEFAULT_MODEL};
use crate::CliError;

#[derive(Args)]
pub struct SynthArgs {
    /// Where to write the GGUF file.
    #[arg(short = 'o', long = "out")]
    pub out: PathBuf,
    /// llama, qwen2, qwen3 (dense), qwen2moe, qwen3moe, qwen35 (hybrid; with --experts 0),
    /// qwen35moe, llama with --experts (Mixtral), deepseek4 (DeepSeek-V4; shaped
    /// further by the --dsv4-* flags), eagle3 (an EAGLE-3 drafter: one block, --n-embd
    /// wide, for a target shaped by --target-layers and --target-n-embd) or dflash (a
    /// DFlash block drafter as wide as its target: --target-layers, --dflash-block).
    #[arg(long, default_value = "qwen3moe")]
    pub arch: String,
    /// [default: 1024; deepseek4: 256]
    #[arg(long)]
    pub n_embd: Option<usize>,
    /// [default: 8; deepseek4: 6]
    #[arg(long)]
    pub n_layer: Option<usize>,
    /// [default: 16; deepseek4: 8]
    #[arg(long)]
    pub n_head: Option<usize>,
    /// [default: 4; deepseek4 has one key-and-value head]
    #[arg(long)]
    pub n_head_kv: Option<usize>,
    /// Dense feed-forward width (qwen2moe: the shared expert's) [default: 2816; deepseek4:
    /// none, its shared experts are --n-ff-exp wide].
    #[arg(long)]
    pub n_ff: Option<usize>,
    /// Experts per block (0: a dense model) [default: 64; deepseek4: 16].
    #[arg(long)]
    pub experts: Option<usize>,
    /// Experts chosen per token [default: 8; deepseek4: 4].
    #[arg(long)]
    pub experts_used: Option<usize>,
    /// Hidden width of one expert [default: 256; deepseek4: 128].
    #[arg(long)]
    pub n_ff_exp: Option<usize>,
    /// qwen35, qwen35moe: taps of the Gated DeltaNet blocks' convolution; nemotron_h: of
    /// the Mamba-2 blocks' [default: 4].
    #[arg(long)]
    pub ssm_conv_kernel: Option<usize>,
    /// qwen35, qwen35moe: width of a delta-rule head (`ssm.state_size`) [default: 128];
    /// nemotron_h: Mamba-2's state per head dimension [default: 64].
    #[arg(long)]
    pub ssm_state_size: Option<usize>,
    /// qwen35, qwen35moe: query and key heads of the delta rule (`ssm.group_count`)
    /// [default: 16]; nemotron_h: groups of Mamba-2's B and C [default: 2].
    #[arg(long)]
    pub ssm_group_count: Option<usize>,
    /// qwen35, qwen35moe: value heads of the delta rule (`ssm.time_step_rank`) [default:
    /// 16]; nemotron_h: Mamba-2's heads [default: 8].
    #[arg(long)]
    pub ssm_time_step_rank: Option<usize>,
    /// nemotron_h: Mamba-2's inner width (`ssm.inner_size`) [default: 2 · --n-embd].
    #[arg(long)]
    pub ssm_inner_size: Option<usize>,
    /// nemotron_h: the blocks' kinds, one character each (`M` Mamba-2, `*` attention, `-`
    /// feed-forward), as Nemotron's `hybrid_override_pattern` [default: M-M* repeated to
    /// --n-layer].
    #[arg(long)]
    pub hybrid_pattern: Option<String>,
    /// qwen35, qwen35moe, deepseek4: multi-token-prediction (NextN) blocks after the
    /// --n-layer, for `--spec-type draft-mtp` [default: 0; deepseek4: 1].
    #[arg(long)]
    pub nextn: Option<usize>,
    /// Type of the matrices: any type `tandem quantize` writes (the IQ types quantized as
    /// if every importance were 1) [default: q4_k; deepseek4: q8_0, whose blocks of 32
    /// divide its narrow rows].
    #[arg(long = "type", value_parser = parse_type)]
    pub ty: Option<GgmlType>,
    /// The model whose tokenizer and chat template are copied (a path or a known name).
    #[arg(long, default_value = DEFAULT_MODEL)]
    pub tokenizer: String,
    /// Instead of a tokenizer, a placeholder vocabulary of this many tokens: for
    /// benchmarks of a real model's shape where no model is at hand to copy one from.
    #[arg(long = "placeholder-vocab", conflicts_with = "tokenizer")]
    pub placeholder_vocab: Option<usize>,
    /// Keep only the tokenizer's first N tokens and the merges among them (a real
    /// byte-level tokenizer, small: for golden logits over every token).
    #[arg(long = "vocab", conflicts_with = "placeholder_vocab")]
    pub vocab: Option<usize>,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Instead of a model, a random LoRA adapter for this model (a path or a known name):
    /// f32 factors for its blocks' attention and feed-forward matrices (`--lora`).
    #[arg(long = "lora-of")]
    pub lora_of: Option<String>,
    /// The adapter's rank.
    #[arg(long = "lora-rank", default_value_t = 8, requires = "lora_of")]
    pub lora_rank: usize,
    /// The adapter's `adapter.lora.alpha`.
    #[arg(long = "lora-alpha", default_value_t = 16.0, requires = "lora_of")]
    pub lora_alpha: f32,
    /// eagle3, dflash: the target blocks whose inputs the drafter reads (eagle3: three)
    /// [default: 1,2,3].
    #[arg(long, value_delimiter = ',')]
    pub target_layers: Option<Vec<usize>>,
    /// eagle3: the target's hidden width [default: --n-embd].
    #[arg(long)]
    pub target_n_embd: Option<usize>,
    /// eagle3, dflash: write no embeddings or output head; the drafter uses the target's,
    /// as many published drafters do.
    #[arg(long)]
    pub target_head: bool,
    /// eagle3, dflash: an output head of its own over this many tokens spread over the
    /// vocabulary (`d2t`, a reduced draft vocabulary).
    #[arg(long, conflicts_with = "target_head")]
    pub draft_vocab: Option<usize>,
    /// dflash: the block size (`dflash.block_size`) [default: 16].
    #[arg(long)]
    pub dflash_block: Option<usize>,
    /// dflash: a DSpark drafter, with a Markov head of this rank.
    #[arg(long)]
    pub dspark_rank: Option<usize>,
    /// dflash: DSpark's confidence head too.
    #[arg(long, requires = "dspark_rank")]
    pub dspark_confidence: bool,
    /// dflash: a DSpark block whose first row drafts nothing (a bonus anchor,
    /// `dflash.sample_from_anchor` false).
    #[arg(long, requires = "dspark_rank")]
    pub dspark_bonus_anchor: bool,
    /// dflash: a DFlash 2 drafter (block convolutions of 3 taps over groups of 32
    /// channels, a selector of rank 16 over 4 candidates).
    #[arg(long, conflicts_with = "dspark_rank")]
    pub dflash2: bool,
    /// dflash: stages of DeepSeek-V4 blocks (`deepseek4`; uncompressed, routed by score),
    /// shaped by --n-embd, --n-layer, --n-head, the --experts flags and --dsv4-* as a
    /// deepseek4 model, for a DeepSeek-V4 target (llama.cpp's DSpark over DSV4).
    #[arg(long, conflicts_with = "dflash2", value_parser = ["deepseek4"])]
    pub backbone: Option<String>,
    /// Instead of a model, a vision tower (an mmproj file, --projector) for this text model
    /// (a path or a known name), shaped by --n-embd [128], --n-layer [2], --n-head [4],
    /// --n-ff [512], --type [f16] and the --image-* flags.
    #[arg(long = "mmproj")]
    pub mmproj: Option<String>,
    #[command(flatten)]
    pub tower: Box<TowerArgs>,
    #[command(flatten)]
    pub dsv4: Box<Dsv4Args>,
    #[command(flatten)]
    pub cache: CacheArgs,
}

/// The shape of a `--mmproj` vision tower beyond the common flags.
#[derive(Args)]
pub struct TowerArgs {
    /// --mmproj: the square side images (idefics3: tiles) are made, in pixels [default:
    /// 896; llava: 336; idefics3: 512].
    #[arg(long, requires = "mmproj")]
    pub image_size: Option<usize>,
    /// --mmproj: the side of a patch, in pixels [default: 14; idefics3: 16].
    #[arg(long, requires = "mmproj")]
    pub image_patch: Option<usize>,
    /// --mmproj: patches merged per side into one embedding [default: 4; llava: 1].
    #[arg(long, requires = "mmproj")]
    pub image_merge: Option<usize>,
    /// --mmproj idefics3: the longer edge images are resized to before they are tiled (0:
    /// none written, as older files have) [default: 2048].
    #[arg(long, requires = "mmproj")]
    pub image_longest_edge: Option<usize>,
    /// --mmproj llava: LLaVA 1.6's tiling, the sizes images larger than a tile are fitted
    /// into, as width,height pairs of whole tiles (e.g. 672,336,336,672,672,672).
    #[arg(long, requires = "mmproj", value_delimiter = ',')]
    pub image_grid_pinpoints: Vec<usize>,
    /// --mmproj llava: the block whose input the projector reads
    /// (`clip.vision.feature_layer`) [default: none, the last block's].
    #[arg(long, requires = "mmproj")]
    pub image_feature_layer: Option<usize>,
    /// --mmproj: gemma3 (SigLIP, Gemma 3's projector), llava (CLIP, LLaVA 1.5's MLP) or
    /// idefics3 (SigLIP, SmolVLM's pixel shuffle; its text model needs the tokens
    /// `<fake_token_around_image>` and `<global-img>`, as SmolVLM's has).
    #[arg(long, requires = "mmproj", default_value = "gemma3")]
    pub projector: String,
}

/// The shape of a DeepSeek-V4 beyond the common flags; refused for other architectures.
#[derive(Args)]
pub struct Dsv4Args {
    /// deepseek4: compression ratio of each block, 0, 4 or 128 (at least --n-layer of
    /// them) [default: 4,128,4,0,4,128, repeated to --n-layer].
    #[arg(long, value_delimiter = ',')]
    pub dsv4_ratios: Option<Vec<u32>>,
    /// deepseek4: keys each query sees in the raw sliding window [default: 16].
    #[arg(long)]
    pub dsv4_window: Option<usize>,
    /// deepseek4: compressed blocks the lightning indexer picks per query [default: 8].
    #[arg(long)]
    pub dsv4_top_k: Option<usize>,
    /// deepseek4: leading blocks that route tokens by id hash [default: 2, at most
    /// --n-layer].
    #[arg(long)]
    pub dsv4_hash_layers: Option<usize>,
    /// deepseek4: residual streams of the hyper-connections (llama.cpp runs only 4)
    /// [default: 4].
    #[arg(long)]
    pub dsv4_streams: Option<usize>,
    /// deepseek4: width of a head, query and key alike (`attention.key_length`)
    /// [default: 64].
    #[arg(long)]
    pub dsv4_head_dim: Option<usize>,
    /// deepseek4: trailing dims of each head that RoPE turns [default: 16].
    #[arg(long)]
    pub dsv4_rope_dim: Option<usize>,
    /// deepseek4: rank of the low-rank query projection [default: 64].
    #[arg(long)]
    pub dsv4_q_lora: Option<usize>,
    /// deepseek4: head groups of the low-rank output projection [default: 2].
    #[arg(long)]
    pub dsv4_o_groups: Option<usize>,
    /// deepseek4: rank of each group's output projection [default: 32].
    #[arg(long)]
    pub dsv4_o_lora: Option<usize>,
    /// deepseek4: lightning-indexer heads [default: 16; with few, many blocks tie at 0].
    #[arg(long)]
    pub dsv4_indexer_heads: Option<usize>,
    /// deepseek4: width of an indexer head, a multiple of 64 [default: 128].
    #[arg(long)]
    pub dsv4_indexer_dim: Option<usize>,
    /// deepseek4: shared experts [default: 1].
    #[arg(long)]
    pub dsv4_shared_experts: Option<usize>,
}

impl Dsv4Args {
    fn any(&self) -> bool {
        self.dsv4_ratios.is_some()
            || [
                self.dsv4_window,
                self.dsv4_top_k,
                self.dsv4_hash_layers,
                self.dsv4_streams,
                self.dsv4_head_dim,
                self.dsv4_rope_dim,
                self.dsv4_q_lora,
                self.dsv4_o_groups,
                self.dsv4_o_lora,
                self.dsv4_indexer_heads,
                self.dsv4_indexer_dim,
                self.dsv4_shared_experts,
            ]
            .iter()
            .any(Option::is_some)
    }
}

fn parse_type(s: &str) -> Result<GgmlType, String> {
    let writable = model::quant::writable_types();
    writable
        .iter()
        .copied()
        .find(|t| t.to_string().eq_ignore_ascii_case(s))
        .ok_or_else(|| {
            let names: Vec<String> = writable.iter().map(|t| t.to_string()).collect();
            format!("'{s}' is not a type tandem writes ({})", names.join(", "))
        })
}

/// The Gated DeltaNet shape of a hybrid; the `--ssm-*` flags refused for other
/// architectures, which have no such blocks.
fn delta_shape(a: &SynthArgs) -> Result<Option<DeltaShape>, CliError> {
    let flags = [
        a.ssm_conv_kernel,
        a.ssm_state_size,
        a.ssm_group_count,
        a.ssm_time_step_rank,
    ];
    if !a.arch.starts_with("qwen35") {
        if a.arch != "nemotron_h" && flags.iter().any(Option::is_some) {
            return Err(CliError::Usage(format!(
                "--ssm-* shape a hybrid's Gated DeltaNet blocks; {} has none",
                a.arch
            )));
        }
        return Ok(None);
    }
    Ok(Some(DeltaShape {
        conv_kernel: a.ssm_conv_kernel.unwrap_or(4),
        head_dim: a.ssm_state_size.unwrap_or(128),
        n_k_heads: a.ssm_group_count.unwrap_or(16),
        n_v_heads: a.ssm_time_step_rank.unwrap_or(16),
    }))
}

/// A shape of an architecture with a recipe, of DeepSeek-V4, or of a drafter of a target's
/// features.
enum Shape {
    Recipe(Synthetic),
    Dsv4(Dsv4Shape),
    Eagle3(Eagle3Shape),
    Dflash(DflashShape),
    Nemotron(NemotronShape),
}

fn nemotron_shape(a: &SynthArgs) -> Result<NemotronShape, CliError> {
    let moe = a.arch == "nemotron_h_moe";
    let refused = [
        ("--experts 0", moe && a.experts == Some(0)),
        ("--experts", !moe && a.experts.unwrap_or(0) > 0),
        ("--nextn", a.nextn.is_some()),
        ("--dsv4-*", a.dsv4.any()),
    ];
    if let Some((flag, _)) = refused.iter().find(|r| r.1) {
        return Err(CliError::Usage(format!(
            "{flag} does not shape {} (Mamba-2, attention and {} blocks)",
            a.arch,
            if moe { "mixture" } else { "dense" }
        )));
    }
    let n_embd = a.n_embd.unwrap_or(1024);
    let pattern = match (&a.hybrid_pattern, a.n_layer) {
        (Some(p), Some(n)) if p.chars().count() != n => {
            return Err(CliError::Usage(format!(
                "--hybrid-pattern {p:?} has not --n-layer {n} blocks"
            )))
        }
        (Some(p), _) => p.clone(),
        (None, n) => default_pattern(n.unwrap_or(8), moe),
    };
    Ok(NemotronShape {
        n_embd,
        pattern,
        n_head: a.n_head.unwrap_or(16),
        n_head_kv: a.n_head_kv.unwrap_or(4),
        n_ff: a.n_ff.unwrap_or(2816),
        experts: moe.then(|| ExpertShape {
            n_expert: a.experts.unwrap_or(64),
            n_expert_used: a.experts_used.unwrap_or(8),
            n_ff_exp: a.n_ff_exp.unwrap_or(256),
        }),
        mamba: Mamba2Shape {
            conv_kernel: a.ssm_conv_kernel.unwrap_or(4),
            d_inner: a.ssm_inner_size.unwrap_or(2 * n_embd),
            d_state: a.ssm_state_size.unwrap_or(64),
            n_head: a.ssm_time_step_rank.unwrap_or(8),
            n_group: a.ssm_group_count.unwrap_or(2),
        },
        ty: a.ty.unwrap_or(GgmlType::Q4_K),
        seed: a.seed,
    })
}

fn dflash_shape(a: &SynthArgs) -> Result<DflashShape, CliError> {
    let dsv4 = a.backbone.is_some();
    let f = &a.dsv4;
    let refused = [
        ("--experts", !dsv4 && a.experts.unwrap_or(0) > 0),
        ("--nextn", a.nextn.is_some()),
        ("--target-n-embd", a.target_n_embd.is_some()),
        ("--dsv4-*", !dsv4 && f.any()),
        (
            "--dsv4-ratios, --dsv4-hash-layers, --dsv4-top-k, --dsv4-indexer-*",
            dsv4 && (f.dsv4_ratios.is_some()
                || f.dsv4_hash_layers.is_some()
                || f.dsv4_top_k.is_some()
                || f.dsv4_indexer_heads.is_some()
                || f.dsv4_indexer_dim.is_some()),
        ),
    ];
    if let Some((flag, _)) = refused.iter().find(|r| r.1) {
        return Err(CliError::Usage(format!(
            "{flag} does not shape dflash (dense blocks as wide as the target, or with \
             --backbone deepseek4 uncompressed deepseek4 blocks routed by score)"
        )));
    }
    delta_shape(a)?;
    let backbone = match dsv4 {
        true => Some(dsv4_shape(a)?),
        false => None,
    };
    let d = DflashShape {
        n_embd: a.n_embd.unwrap_or(1024),
        n_layer: a.n_layer.unwrap_or(2),
        n_head: a.n_head.unwrap_or(16),
        n_head_kv: a.n_head_kv.unwrap_or(4),
        n_ff: a.n_ff.unwrap_or(2816),
        target_layers: a.target_layers.clone().unwrap_or(vec![1, 2, 3]),
        block: a.dflash_block.unwrap_or(16),
        own_head: !a.target_head,
        draft_vocab: a.draft_vocab,
        ty: a.ty.unwrap_or(GgmlType::Q8_0),
        seed: a.seed,
        dspark: a.dspark_rank.map(|rank| Dspark {
            rank,
            confidence: a.dspark_confidence,
            from_anchor: !a.dspark_bonus_anchor,
        }),
        dflash2: a.dflash2.then_some(Dflash2 {
            kernel: 3,
            group: 32,
            rank: 16,
            top_k: 4,
        }),
        backbone: None,
    };
    Ok(match backbone {
        Some(b) => DflashShape {
            n_embd: b.n_embd,
            n_layer: b.n_layer,
            n_head: b.n_head,
            n_head_kv: 1,
            ty: a.ty.unwrap_or(b.ty),
            backbone: Some(b),
            ..d
        },
        None => d,
    })
}

fn eagle3_shape(a: &SynthArgs) -> Result<Eagle3Shape, CliError> {
    let refused = [
        ("--n-layer", a.n_layer.is_some()),
        ("--experts", a.experts.unwrap_or(0) > 0),
        ("--nextn", a.nextn.is_some()),
        ("--dsv4-*", a.dsv4.any()),
        ("--dflash-block", a.dflash_block.is_some()),
        ("--dspark-rank", a.dspark_rank.is_some()),
        ("--dflash2", a.dflash2),
        ("--backbone", a.backbone.is_some()),
    ];
    if let Some((flag, _)) = refused.iter().find(|r| r.1) {
        return Err(CliError::Usage(format!(
            "{flag} does not shape eagle3 (one dense block)"
        )));
    }
    delta_shape(a)?;
    let layers = a.target_layers.clone().unwrap_or(vec![1, 2, 3]);
    let target_layers: [usize; 3] = layers.try_into().map_err(|l: Vec<usize>| {
        CliError::Usage(format!(
            "--target-layers: EAGLE-3 reads three blocks, not {l:?}"
        ))
    })?;
    let n_embd = a.n_embd.unwrap_or(1024);
    Ok(Eagle3Shape {
        n_embd,
        n_head: a.n_head.unwrap_or(16),
        n_head_kv: a.n_head_kv.unwrap_or(4),
        n_ff: a.n_ff.unwrap_or(2816),
        target_layers,
        target_n_embd: a.target_n_embd.unwrap_or(n_embd),
        norm_before_fc: false,
        norm_before_residual: false,
        own_head: !a.target_head,
        draft_vocab: a.draft_vocab,
        ty: a.ty.unwrap_or(GgmlType::Q8_0),
        seed: a.seed,
    })
}

fn recipe_shape(a: &SynthArgs) -> Result<Synthetic, CliError> {
    if a.dsv4.any() {
        return Err(CliError::Usage(format!(
            "--dsv4-* shape a deepseek4 model; not {}",
            a.arch
        )));
    }
    if a.hybrid_pattern.is_some() || a.ssm_inner_size.is_some() {
        return Err(CliError::Usage(format!(
            "--hybrid-pattern and --ssm-inner-size shape a nemotron_h model; not {}",
            a.arch
        )));
    }
    let experts = a.experts.unwrap_or(64);
    Ok(Synthetic {
        arch: Arch::from_name(&a.arch)?,
        n_embd: a.n_embd.unwrap_or(1024),
        n_layer: a.n_layer.unwrap_or(8),
        n_head: a.n_head.unwrap_or(16),
        n_head_kv: a.n_head_kv.unwrap_or(4),
        n_ff: a.n_ff.unwrap_or(2816),
        experts: (experts > 0).then_some(ExpertShape {
            n_expert: experts,
            n_expert_used: a.experts_used.unwrap_or(8),
            n_ff_exp: a.n_ff_exp.unwrap_or(256),
        }),
        delta: delta_shape(a)?,
        nextn: a.nextn.unwrap_or(0),
        window: None,
        ty: a.ty.unwrap_or(GgmlType::Q4_K),
        seed: a.seed,
    })
}

fn dsv4_shape(a: &SynthArgs) -> Result<Dsv4Shape, CliError> {
    let refused = [
        (
            "--n-head-kv",
            a.n_head_kv.is_some(),
            "one key-and-value head",
        ),
        ("--n-ff", a.n_ff.is_some(), "shared experts --n-ff-exp wide"),
    ];
    if let Some((flag, _, why)) = refused.iter().find(|r| r.1) {
        return Err(CliError::Usage(format!(
            "{flag} does not shape deepseek4 ({why})"
        )));
    }
    delta_shape(a)?;
    let d = Dsv4Shape::default();
    let x = d.experts;
    let n_layer = a.n_layer.unwrap_or(d.n_layer);
    let f = &a.dsv4;
    Ok(Dsv4Shape {
        n_embd: a.n_embd.unwrap_or(d.n_embd),
        n_layer,
        n_head: a.n_head.unwrap_or(d.n_head),
        head_dim: f.dsv4_head_dim.unwrap_or(d.head_dim),
        n_rot: f.dsv4_rope_dim.unwrap_or(d.n_rot),
        q_lora_rank: f.dsv4_q_lora.unwrap_or(d.q_lora_rank),
        o_groups: f.dsv4_o_groups.unwrap_or(d.o_groups),
        o_lora_rank: f.dsv4_o_lora.unwrap_or(d.o_lora_rank),
        window: f.dsv4_window.unwrap_or(d.window),
        compress_ratios: f.dsv4_ratios.clone().unwrap_or_else(|| {
            DEFAULT_RATIOS
                .iter()
                .copied()
                .cycle()
                .take(n_layer)
                .collect()
        }),
        indexer_heads: f.dsv4_indexer_heads.unwrap_or(d.indexer_heads),
        indexer_head_dim: f.dsv4_indexer_dim.unwrap_or(d.indexer_head_dim),
        indexer_top_k: f.dsv4_top_k.unwrap_or(d.indexer_top_k),
        hc_streams: f.dsv4_streams.unwrap_or(d.hc_streams),
        sinkhorn_iters: d.sinkhorn_iters,
        hash_layers: f.dsv4_hash_layers.unwrap_or(d.hash_layers.min(n_layer)),
        experts: ExpertShape {
            n_expert: a.experts.unwrap_or(x.n_expert),
            n_expert_used: a.experts_used.unwrap_or(x.n_expert_used),
            n_ff_exp: a.n_ff_exp.unwrap_or(x.n_ff_exp),
        },
        n_shared: f.dsv4_shared_experts.unwrap_or(d.n_shared),
        nextn: a.nextn.unwrap_or(1),
        ty: a.ty.unwrap_or(d.ty),
        seed: a.seed,
    })
}

fn vocab(a: &SynthArgs) -> Result<Vocab, CliError> {
    if let Some(n) = a.placeholder_vocab {
        return Ok(Vocab::placeholder(n));
    }
    let tokenizer = GgufFile::open(pull::resolve(&a.tokenizer, a.cache.dir.as_deref())?)?;
    Ok(match a.vocab {
        Some(n) => Vocab::cut(&tokenizer, n)?,
        None => Vocab::copied(&tokenizer)?,
    })
}

/// `--mmproj`: a tower for the text model `of`, as wide as its embeddings.
fn write_mmproj(a: &SynthArgs, of: &str) -> Result<(), CliError> {
    let text = GgufFile::open(pull::resolve(of, a.cache.dir.as_deref())?)?;
    let meta = &text.header.metadata;
    let n_embd_out = meta.u32(&format!("{}.embedding_length", text.header.architecture()?))?;
    let d = MmprojShape::gemma3(n_embd_out as usize);
    let (kind, image_size, patch, merge) = match a.tower.projector.as_str() {
        "gemma3" => (TowerKind::Gemma3, d.image_size, d.patch_size, d.n_merge),
        "llava" => (TowerKind::Llava, 336, d.patch_size, 1),
        "idefics3" => (TowerKind::Idefics3, 512, 16, 4),
        other => {
            return Err(CliError::Usage(format!(
                "--projector: '{other}' is not gemma3, llava or idefics3"
            )))
        }
    };
    if a.tower.image_longest_edge.is_some() && kind != TowerKind::Idefics3 {
        return Err(CliError::Usage(
            "--image-longest-edge: only an idefics3 tower tiles images".into(),
        ));
    }
    if !a.tower.image_grid_pinpoints.len().is_multiple_of(2) {
        return Err(CliError::Usage(
            "--image-grid-pinpoints: width,height pairs".into(),
        ));
    }
    let shape = MmprojShape {
        kind,
        image_size: a.tower.image_size.unwrap_or(image_size),
        patch_size: a.tower.image_patch.unwrap_or(patch),
        n_embd: a.n_embd.unwrap_or(d.n_embd),
        n_head: a.n_head.unwrap_or(d.n_head),
        n_ff: a.n_ff.unwrap_or(d.n_ff),
        n_layer: a.n_layer.unwrap_or(d.n_layer),
        n_merge: a.tower.image_merge.unwrap_or(merge),
        pinpoints: a
            .tower
            .image_grid_pinpoints
            .chunks(2)
            .map(|p| (p[0], p[1]))
            .collect(),
        feature_layer: a.tower.image_feature_layer,
        longest_edge: match kind {
            TowerKind::Idefics3 => a.tower.image_longest_edge.unwrap_or(2048),
            TowerKind::Gemma3 | TowerKind::Llava => 0,
        },
        ty: a.ty.unwrap_or(d.ty),
        seed: a.seed,
        ..d
    };
    shape.write(&a.out)?;
    eprintln!(
        "tandem synth: a {} vision tower ({:.1}M parameters) written to {}",
        a.tower.projector,
        shape.n_params() as f64 / 1e6,
        a.out.display()
    );
    Ok(())
}

pub fn execute(a: SynthArgs) -> Result<(), CliError> {
    if let Some(of) = &a.mmproj {
        return write_mmproj(&a, of);
    }
    if let Some(base) = &a.lora_of {
        let base = GgufFile::open(pull::resolve(base, a.cache.dir.as_deref())?)?;
        model::synthetic::lora::write_adapter(&base, a.lora_rank, a.lora_alpha, a.seed, &a.out)?;
        eprintln!(
            "tandem synth: a rank-{} LoRA adapter written to {}",
            a.lora_rank,
            a.out.display()
        );
        return Ok(());
    }
    let shape = match a.arch.as_str() {
        "deepseek4" => Shape::Dsv4(dsv4_shape(&a)?),
        "eagle3" => Shape::Eagle3(eagle3_shape(&a)?),
        "dflash" => Shape::Dflash(dflash_shape(&a)?),
        "nemotron_h" | "nemotron_h_moe" => Shape::Nemotron(nemotron_shape(&a)?),
        _ if a.target_layers.is_some()
            || a.target_n_embd.is_some()
            || a.target_head
            || a.draft_vocab.is_some()
            || a.dflash_block.is_some()
            || a.dspark_rank.is_some()
            || a.dflash2
            || a.backbone.is_some() =>
        {
            return Err(CliError::Usage(format!(
                "--target-*, --dflash-block, --dspark-* and --backbone shape a drafter (eagle3, dflash); not {}",
                a.arch
            )))
        }
        _ => Shape::Recipe(recipe_shape(&a)?),
    };
    let vocab = vocab(&a)?;
    let n_params = match &shape {
        Shape::Recipe(s) => {
            s.write_vocab(&vocab, &a.out)?;
            s.n_params(vocab.n_vocab())
        }
        Shape::Dsv4(s) => {
            s.write(&vocab, &a.out)?;
            s.n_params(vocab.n_vocab())
        }
        Shape::Eagle3(s) => {
            s.write(&vocab, &a.out)?;
            s.n_params(vocab.n_vocab())
        }
        Shape::Dflash(s) => {
            s.write(&vocab, &a.out)?;
            s.n_params(vocab.n_vocab())
        }
        Shape::Nemotron(s) => {
            s.write_vocab(&vocab, &a.out)?;
            s.n_params(vocab.n_vocab())
        }
    };
    eprintln!(
        "tandem synth: {} ({:.3}B parameters) written to {}",
        a.arch,
        n_params as f64 / 1e9,
        a.out.display()
    );
    Ok(())
}
