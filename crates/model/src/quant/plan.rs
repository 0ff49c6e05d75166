//! The type each tensor gets when a model is quantized, chosen as llama.cpp's
//! `llama-quantize` chooses it (`src/llama-quant.cpp`) for the types tandem writes.
//!
//! A tensor is re-encoded when it is a matrix (2-D or more) whose name ends in `weight`
//! and is none of llama.cpp's exceptions (norms, MoE gates, position embeddings, …);
//! everything else is copied as it is. A re-encoded tensor gets, in order:
//! 1. the type of the first `--tensor-type` pattern that matches its name (a regex
//!    searched anywhere in the name, case-insensitively), else the target type changed
//!    by llama.cpp's mixture for that target unless `--pure` ([`mixture`]);
//! 2. llama.cpp's fallback where its row length is not a whole number of that type's
//!    blocks (256-element types to a 32-element one, then F16), and for Q1_0 and NVFP4,
//!    where llama.cpp defines none and stops, Q4_0 and MXFP4 ([`fallback`]);
//!
//! A tensor that would become a type of [`NEED_IMATRIX`] (other than the embedding and
//! the output head) is an error without an importance matrix, as in llama.cpp.

use gguf::{GgmlType, Metadata, TensorInfo, Value};
use regex::Regex;

use crate::{Error, Result};

use GgmlType::*;

/// Each type tandem writes with the `general.file_type` (llama.cpp's `llama_ftype`) of a
/// model quantized to it: Q3_K, Q4_K and Q5_K are llama.cpp's Q3_K_M, Q4_K_M and Q5_K_M,
/// MXFP4 its MXFP4_MOE.
const FILE_TYPES: &[(GgmlType, u32)] = &[
    (F32, 0),
    (F16, 1),
    (Q4_0, 2),
    (Q4_1, 3),
    (Q8_0, 7),
    (Q5_0, 8),
    (Q5_1, 9),
    (Q2_K, 10),
    (Q3_K, 12),
    (Q4_K, 15),
    (Q5_K, 17),
    (Q6_K, 18),
    (IQ2_XXS, 19),
    (IQ2_XS, 20),
    (IQ3_XXS, 23),
    (IQ1_S, 24),
    (IQ3_S, 26),
    (IQ2_S, 28),
    (IQ4_NL, 25),
    (IQ4_XS, 30),
    (BF16, 32),
    (TQ1_0, 36),
    (TQ2_0, 37),
    (MXFP4, 38),
    (NVFP4, 39),
    (Q1_0, 40),
    (Q2_0, 41),
];

/// llama.cpp's names of its mixtures that are tandem's targets.
const ALIASES: &[(&str, GgmlType)] = &[
    ("Q3_K_M", Q3_K),
    ("Q4_K_M", Q4_K),
    ("Q5_K_M", Q5_K),
    ("MXFP4_MOE", MXFP4),
];

/// The types llama.cpp quantizes only with an importance matrix (`llama-quant.cpp`'s
/// `tensor_requires_imatrix`, which holds ggml's `ggml_quantize_requires_imatrix`).
pub const NEED_IMATRIX: [GgmlType; 6] = [IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS];

/// The types `tandem quantize` writes: a quantizer in `device::formats` and a file type.
pub fn writable_types() -> Vec<GgmlType> {
    device::formats::FORMATS
        .iter()
        .filter(|f| f.quantize.is_some() && file_type(f.ty).is_some())
        .map(|f| f.ty)
        .collect()
}

fn writable(ty: GgmlType) -> bool {
    device::formats::is_quantize_supported(ty) && file_type(ty).is_some()
}

/// The `general.file_type` llama.cpp writes for a model quantized to `target`.
pub fn file_type(target: GgmlType) -> Option<u32> {
    FILE_TYPES.iter().find(|f| f.0 == target).map(|f| f.1)
}

/// A type name as `--type` and `--tensor-type` take it: a GGML type tandem writes, in
/// any case, or llama.cpp's Q3_K_M, Q4_K_M, Q5_K_M or MXFP4_MOE. Errors list the types tandem writes,
/// and say which types llama.cpp quantizes only with an importance matrix.
pub fn parse_type(s: &str) -> Result<GgmlType> {
    type_named(s).map_err(Error::Quantize)
}

fn type_named(s: &str) -> std::result::Result<GgmlType, String> {
    let known = (0..64)
        .filter_map(GgmlType::from_id)
        .find(|t| t.to_string().eq_ignore_ascii_case(s))
        .or_else(|| {
            ALIASES
                .iter()
                .find(|a| a.0.eq_ignore_ascii_case(s))
                .map(|a| a.1)
        });
    let list = writable_types()
        .iter()
        .map(|t| t.to_string())
        .collect::<Vec<_>>()
        .join(", ");
    match known {
        None => Err(format!("unknown type '{s}' (tandem writes {list})")),
        Some(t) if !writable(t) => {
            let imatrix = if NEED_IMATRIX.contains(&t) {
                format!("; llama.cpp quantizes {t} only with an importance matrix (--imatrix)")
            } else {
                String::new()
            };
            Err(format!(
                "tandem does not write {t} (it writes {list}){imatrix}"
            ))
        }
        Some(t) => Ok(t),
    }
}

/// `--tensor-type PATTERN=TYPE`: tensors whose names match `pattern` get `ty`.
#[derive(Debug, Clone)]
pub struct TensorTypeOverride {
    pub text: String,
    pub pattern: Regex,
    pub ty: GgmlType,
}

impl TensorTypeOverride {
    /// Parses `PATTERN=TYPE` (split at the first `=`). Errors name the argument and
    /// what is wrong: no `=`, an empty side, a bad regex, a type tandem does not write.
    pub fn parse(arg: &str) -> Result<TensorTypeOverride> {
        let bad = |what: String| Error::Quantize(format!("--tensor-type '{arg}': {what}"));
        let (pattern, ty) = arg
            .split_once('=')
            .ok_or_else(|| bad("expected PATTERN=TYPE".into()))?;
        if pattern.is_empty() {
            return Err(bad("the pattern is empty".into()));
        }
        if ty.is_empty() {
            return Err(bad("the type is empty".into()));
        }
        let regex = Regex::new(&format!("(?i){pattern}"))
            .map_err(|e| bad(format!("bad pattern: {}", first_line(&e.to_string()))))?;
        let ty = type_named(ty).map_err(bad)?;
        Ok(TensorTypeOverride {
            text: arg.to_string(),
            pattern: regex,
            ty,
        })
    }
}

fn first_line(s: &str) -> String {
    s.lines()
        .rfind(|l| !l.trim().is_empty())
        .unwrap_or(s)
        .trim()
        .to_string()
}

/// What a quantization is asked for: `tandem quantize`'s flags.
#[derive(Debug, Clone)]
pub struct QuantSpec {
    /// The type of the weight matrices; one of [`writable_types`].
    pub target: GgmlType,
    /// `--tensor-type`, the first match winning.
    pub overrides: Vec<TensorTypeOverride>,
    /// Every matrix in `target` (or an override's type): no mixture.
    pub pure: bool,
    /// Whether an importance matrix is given (some of llama.cpp's choices depend on it).
    pub has_imatrix: bool,
    /// Whether tensors already quantized may be quantized again.
    pub allow_requantize: bool,
}

/// The type one tensor is written in, and why where it is not the target.
#[derive(Debug, Clone, PartialEq)]
pub struct Choice {
    pub ty: GgmlType,
    /// Whether it is re-encoded (else its bytes are copied).
    pub convert: bool,
    /// The steps that made `ty` differ from the target, for the log.
    pub why: Vec<String>,
    /// Whether the row length forced another type than the one chosen.
    pub fell_back: bool,
}

/// The category of a tensor for the mixture, by name as llama.cpp tells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Category {
    Output,
    TokenEmbd,
    AttnQkv,
    AttnKvB,
    AttnV,
    AttnK,
    AttnQ,
    AttnOutput,
    FfnDown,
    Other,
}

fn category(name: &str) -> Category {
    use Category::*;
    if name == "output.weight" {
        return Output;
    }
    if name == "token_embd.weight" || name == "per_layer_token_embd.weight" {
        return TokenEmbd;
    }
    let by_part = [
        ("attn_qkv.weight", AttnQkv),
        ("attn_kv_b.weight", AttnKvB),
        ("attn_v.weight", AttnV),
        ("attn_k.weight", AttnK),
        ("attn_q.weight", AttnQ),
        ("attn_output.weight", AttnOutput),
        ("ffn_down", FfnDown),
    ];
    by_part
        .iter()
        .find(|(part, _)| name.contains(part))
        .map_or(Other, |p| p.1)
}

fn is_attn_v(c: Category) -> bool {
    matches!(c, Category::AttnV | Category::AttnQkv | Category::AttnKvB)
}

/// Parts of names llama.cpp never quantizes (small or sensitive tensors).
const KEPT_PARTS: &[&str] = &[
    "_norm.weight",
    "ffn_gate_inp.weight",
    "ffn_gate_tid2eid.weight",
    "altup",
    "laurel",
    "per_layer_model_proj",
    "ssm_conv1d",
    "shortconv.conv.weight",
    "indexer.k_proj.weight",
    "indexer.q_proj.weight",
    "time_mix_first.weight",
    "time_mix_w0.weight",
    "time_mix_w1.weight",
    "time_mix_w2.weight",
    "time_mix_v0.weight",
    "time_mix_v1.weight",
    "time_mix_v2.weight",
    "time_mix_a0.weight",
    "time_mix_a1.weight",
    "time_mix_a2.weight",
    "time_mix_g1.weight",
    "time_mix_g2.weight",
    "time_mix_decay_w1.weight",
    "time_mix_decay_w2.weight",
    "time_mix_lerp_fused.weight",
    "attn_rel_b.weight",
    ".position_embd",
    "sam.pos_embd",
    "sam.neck.",
    "sam.net_",
    ".rel_pos",
    ".patch_embd",
    ".patch_merger",
    "a.rvq.codebook",
    "mm.a.code_embd",
];

/// Whether llama.cpp re-encodes the tensor: a matrix whose name ends in `weight`, not
/// one of [`KEPT_PARTS`], position or token-type embeddings.
fn quantizable(t: &TensorInfo) -> bool {
    let n_dims = t.dims.iter().rposition(|&d| d > 1).map_or(1, |i| i + 1);
    let name = t.name.as_str();
    n_dims >= 2
        && name.ends_with("weight")
        && !KEPT_PARTS.iter().any(|p| name.contains(p))
        && name != "position_embd.weight"
        && name != "token_types.weight"
}

/// The block number of a `blk.N.` name, -1 for a tensor outside the blocks.
fn block_of(name: &str) -> i64 {
    name.strip_prefix("blk.")
        .and_then(|r| r.split('.').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(-1)
}

/// What the mixture reads of the model.
struct Facts {
    arch: String,
    n_layer: usize,
    /// Query heads per KV head (of the first block); 0 when the file has no heads.
    n_gqa: u64,
    n_expert: u64,
    /// No `output.weight`: the embedding is the output head too.
    tied: bool,
    n_attention_wv: usize,
}

impl Facts {
    fn read(md: &Metadata, tensors: &[TensorInfo]) -> Result<Facts> {
        let arch = md.str("general.architecture")?.to_string();
        let first = |key: &str| -> Option<u64> {
            match md.get(&format!("{arch}.{key}"))? {
                Value::Array(_, items) => items.first()?.as_integer(),
                v => v.as_integer(),
            }
            .and_then(|i| u64::try_from(i).ok())
        };
        let n_head = first("attention.head_count").unwrap_or(0);
        let n_head_kv = first("attention.head_count_kv").unwrap_or(n_head);
        Ok(Facts {
            n_layer: first("block_count").unwrap_or(0) as usize,
            n_gqa: n_head.checked_div(n_head_kv).unwrap_or(0),
            n_expert: first("expert_count").unwrap_or(0),
            tied: !tensors
                .iter()
                .any(|t| category(&t.name) == Category::Output),
            n_attention_wv: tensors
                .iter()
                .filter(|t| is_attn_v(category(&t.name)))
                .count(),
            arch,
        })
    }
}

/// llama.cpp's counters of the tensors of a category seen so far.
#[derive(Default)]
struct Counters {
    attention_wv: usize,
    ffn_down: usize,
}

/// llama.cpp's `use_more_bits`: the first and last eighths of the layers and every third
/// between.
fn use_more_bits(i: usize, n: usize) -> bool {
    i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2
}

/// The type of every tensor of a model (`tensors` in file order), as the module doc
/// says. Errors name the tensor: one tandem cannot read that would be re-encoded, an
/// already quantized one without `allow_requantize`, a block number outside the model.
pub fn plan(spec: &QuantSpec, md: &Metadata, tensors: &[TensorInfo]) -> Result<Vec<Choice>> {
    let facts = Facts::read(md, tensors)?;
    let mut order: Vec<usize> = (0..tensors.len()).collect();
    order.sort_by(|&a, &b| {
        let key = |i: usize| (block_of(&tensors[i].name), &tensors[i].name);
        key(a).cmp(&key(b))
    });
    let mut counters = Counters::default();
    let mut choices = vec![None; tensors.len()];
    for i in order {
        choices[i] = Some(choose(spec, &facts, &tensors[i], &mut counters)?);
    }
    Ok(choices.into_iter().flatten().collect())
}

fn choose(spec: &QuantSpec, f: &Facts, t: &TensorInfo, c: &mut Counters) -> Result<Choice> {
    let source = t.ggml_type;
    if !quantizable(t) {
        return Ok(Choice {
            ty: source,
            convert: false,
            why: Vec::new(),
            fell_back: false,
        });
    }
    let mut why = Vec::new();
    let mut ty = spec.target;
    if let Some(o) = spec.overrides.iter().find(|o| o.pattern.is_match(&t.name)) {
        ty = o.ty;
        why.push(format!("--tensor-type {}", o.text));
    } else if !spec.pure && spec.target.block_size() > 1 {
        ty = mixture(spec, f, t, c)?;
        if ty != spec.target {
            why.push(format!("llama.cpp's {} mixture: {ty}", spec.target));
        }
    }
    let row = t.dims[0];
    let fitted = fallback(ty, row);
    let fell_back = fitted != ty;
    if fell_back {
        why.push(format!(
            "a row of {row} is not whole blocks of {ty} ({}): {fitted}",
            ty.block_size()
        ));
        ty = fitted;
    }
    if !writable(ty) {
        return Err(Error::Quantize(format!(
            "tensor '{}': llama.cpp would write {ty}, which tandem does not write",
            t.name
        )));
    }
    let head = matches!(category(&t.name), Category::Output | Category::TokenEmbd);
    if NEED_IMATRIX.contains(&ty) && !spec.has_imatrix && !head {
        return Err(Error::Quantize(format!(
            "tensor '{}' would be {ty}, which llama.cpp quantizes only with an importance \
             matrix: pass --imatrix (or choose another type for it with --tensor-type)",
            t.name
        )));
    }
    let convert = ty != source;
    if convert && !device::formats::is_supported(source) {
        return Err(Error::Quantize(format!(
            "tensor '{}' is {source}, which tandem cannot read, so it cannot become {ty}",
            t.name
        )));
    }
    if convert && source.block_size() > 1 && !spec.allow_requantize {
        return Err(Error::Quantize(format!(
            "tensor '{}' is already quantized ({source}); quantizing it again loses more \
             than quantizing the F32/F16/BF16 original (pass --allow-requantize to do it anyway)",
            t.name
        )));
    }
    Ok(Choice {
        ty,
        convert,
        why,
        fell_back,
    })
}

/// llama.cpp's choice for the tensors of a model quantized to `spec.target` where it is
/// not the target (its `llama_tensor_get_type_impl`, for the file types of
/// [`FILE_TYPES`]; Falcon's own rules are followed, the rule for 70B models is not):
/// - the output head (and a tied embedding): Q8_0 where its row does not fit the target,
///   for Falcon, Q8_0 and MXFP4 (MXFP4_MOE: experts in MXFP4, every other matrix in
///   Q8_0); Q5_K for IQ1_S, IQ2_XXS, IQ2_XS, IQ2_S and IQ3_XXS; else Q6_K;
/// - the embedding: Q4_K for the ternary types and Q2_0, Q2_K for IQ1_S, IQ2_XXS and
///   IQ2_XS, IQ3_S for IQ2_S and IQ3_XXS;
/// - IQ1_S, IQ2_XXS, IQ2_XS, IQ2_S: V projections in Q4_K with 4 or more query heads
///   per KV head or experts, else in Q2_K (IQ3_S for IQ2_S), as is `ffn_down` of the
///   first eighth of the layers; with 8 experts, K projections in Q4_K and attention
///   outputs in Q5_K, else attention outputs in IQ3_S for IQ2_S, IQ2_XXS for IQ1_S;
/// - V projections: Q4_K with 4 or more query heads per KV head for Q2_K (else Q3_K),
///   IQ3_S and IQ3_XXS (else IQ3_XXS, IQ3_S without an importance matrix); Q5_K for the
///   first two and Q4_K for the others for Q3_K (Q3_K_M); Q5_K for IQ4_* with 4 or more
///   query heads per KV head; Q6_K for Q4_K and Q5_K (Q4_K_M, Q5_K_M) in the layers
///   `use_more_bits` picks; Q8_0 with 8 experts;
/// - K projections: Q8_0 with 8 experts, else IQ2_S for IQ3_XXS; Q projections IQ2_S
///   for IQ3_XXS;
/// - `ffn_down`: Q3_K for Q2_K; for IQ3_XXS without an importance matrix Q4_K in the
///   first eighth of the layers, Q3_K after; for Q3_K Q5_K in the first sixteenth, Q4_K
///   after (Falcon: Q3_K where `use_more_bits` does not pick the layer); for Q4_K
///   Q6_K in the layers `use_more_bits` picks (Falcon: Q6_K in the first sixteenth,
///   Q5_K where picked); for Q5_K Q6_K where picked; for IQ4_* without an importance
///   matrix Q5_K in the first eighth; Q4_1/Q5_1 for Q4_0/Q5_0 with one in the first
///   eighth;
/// - attention outputs (not Falcon): with 8 experts Q5_K for Q2_K, Q3_K, Q4_K, IQ3_XXS,
///   IQ3_S and IQ4_*; else Q3_K for Q2_K, IQ3_S for IQ3_XXS, Q4_K for Q3_K.
fn mixture(spec: &QuantSpec, f: &Facts, t: &TensorInfo, c: &mut Counters) -> Result<GgmlType> {
    let target = spec.target;
    let cat = category(&t.name);
    let iq4 = matches!(target, IQ4_NL | IQ4_XS);
    let falcon = f.arch == "falcon";
    if cat == Category::Output || (f.tied && cat == Category::TokenEmbd) {
        return Ok(
            if target == MXFP4
                || target == Q8_0
                || falcon
                || !t.dims[0].is_multiple_of(target.block_size())
            {
                Q8_0
            } else if matches!(target, IQ2_XXS | IQ2_XS | IQ2_S | IQ3_XXS | IQ1_S) {
                Q5_K
            } else {
                Q6_K
            },
        );
    }
    if target == MXFP4 {
        return Ok(if t.dims.get(2).is_some_and(|&e| e > 1) {
            MXFP4
        } else {
            Q8_0
        });
    }
    if cat == Category::TokenEmbd {
        return Ok(match target {
            TQ1_0 | TQ2_0 | Q2_0 => Q4_K,
            IQ2_XXS | IQ2_XS | IQ1_S => Q2_K,
            IQ2_S | IQ3_XXS => IQ3_S,
            _ => target,
        });
    }
    if matches!(target, IQ2_XXS | IQ2_XS | IQ2_S | IQ1_S) {
        let low = if target == IQ2_S { IQ3_S } else { Q2_K };
        return Ok(match cat {
            c_v if is_attn_v(c_v) => {
                c.attention_wv += 1;
                if f.n_gqa >= 4 || f.n_expert >= 4 {
                    Q4_K
                } else {
                    low
                }
            }
            Category::AttnK if f.n_expert == 8 => Q4_K,
            Category::FfnDown => {
                c.ffn_down += 1;
                if c.ffn_down - 1 < f.n_layer / 8 {
                    low
                } else {
                    target
                }
            }
            Category::AttnOutput if f.n_expert == 8 => Q5_K,
            Category::AttnOutput if target == IQ2_S => IQ3_S,
            Category::AttnOutput if target == IQ1_S => IQ2_XXS,
            _ => target,
        });
    }
    Ok(match cat {
        c_v if is_attn_v(c_v) => {
            let more_bits = use_more_bits(c.attention_wv, f.n_attention_wv);
            let mut ty = match target {
                Q2_K | IQ3_XXS | IQ3_S if f.n_gqa >= 4 => Q4_K,
                Q2_K => Q3_K,
                IQ3_XXS if !spec.has_imatrix => IQ3_S,
                Q3_K if c.attention_wv < 2 => Q5_K,
                Q3_K => Q4_K,
                IQ4_NL | IQ4_XS if f.n_gqa >= 4 => Q5_K,
                Q4_K | Q5_K if more_bits => Q6_K,
                _ => target,
            };
            if f.n_expert == 8 {
                ty = Q8_0;
            }
            c.attention_wv += 1;
            ty
        }
        Category::AttnK if f.n_expert == 8 => Q8_0,
        Category::AttnK | Category::AttnQ if target == IQ3_XXS => IQ2_S,
        Category::FfnDown => {
            let i = if f.n_expert > 1 {
                let b = block_of(&t.name);
                if b < 0 || b as usize >= f.n_layer {
                    return Err(Error::Quantize(format!(
                        "tensor '{}': no block number below the model's {} blocks",
                        t.name, f.n_layer
                    )));
                }
                b as usize
            } else {
                c.ffn_down
            };
            c.ffn_down += 1;
            let n = f.n_layer;
            let more_bits = use_more_bits(i, n);
            match target {
                Q2_K => Q3_K,
                IQ3_XXS if !spec.has_imatrix && i < n / 8 => Q4_K,
                IQ3_XXS if !spec.has_imatrix => Q3_K,
                Q3_K if i < n / 16 => Q5_K,
                Q3_K if !falcon || more_bits => Q4_K,
                Q4_K if falcon && i < n / 16 => Q6_K,
                Q4_K if falcon && more_bits => Q5_K,
                Q4_K if !falcon && more_bits => Q6_K,
                IQ4_NL | IQ4_XS if !spec.has_imatrix && i < n / 8 => Q5_K,
                Q5_K if more_bits => Q6_K,
                Q4_0 if spec.has_imatrix && i < n / 8 => Q4_1,
                Q5_0 if spec.has_imatrix && i < n / 8 => Q5_1,
                _ => target,
            }
        }
        Category::AttnOutput if !falcon && f.n_expert == 8 => {
            if iq4 || matches!(target, Q2_K | Q3_K | Q4_K | IQ3_XXS | IQ3_S) {
                Q5_K
            } else {
                target
            }
        }
        Category::AttnOutput if !falcon => match target {
            Q2_K => Q3_K,
            IQ3_XXS => IQ3_S,
            Q3_K => Q4_K,
            _ => target,
        },
        _ => target,
    })
}

/// A type whose blocks fit a row of `row` elements, for a tensor llama.cpp would put in
/// `ty`: `ty` where it fits, else llama.cpp's fallback (IQ4_XS → IQ4_NL; Q2_0, TQ1_0,
/// TQ2_0, Q2_K, Q3_K → Q4_0; Q4_K → Q5_0; Q5_K → Q5_1; Q6_K → Q8_0) or tandem's where
/// llama.cpp has none (Q1_0 → Q4_0, NVFP4 → MXFP4), and F16 where that does not fit
/// either.
pub fn fallback(ty: GgmlType, row: u64) -> GgmlType {
    if row.is_multiple_of(ty.block_size()) {
        return ty;
    }
    let next = match ty {
        IQ1_S | IQ1_M | IQ2_XXS | IQ2_XS | IQ2_S | IQ3_XXS | IQ3_S | IQ4_XS => IQ4_NL,
        Q2_0 | Q2_K | Q3_K | TQ1_0 | TQ2_0 | Q1_0 => Q4_0,
        Q4_K => Q5_0,
        Q5_K => Q5_1,
        Q6_K => Q8_0,
        NVFP4 => MXFP4,
        other => other,
    };
    if row.is_multiple_of(next.block_size()) {
        next
    } else {
        F16
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn use_more_bits_picks_llama_cpps_layers() {
        let picked: Vec<usize> = (0..24).filter(|&i| use_more_bits(i, 24)).collect();
        assert_eq!(picked, [0, 1, 2, 5, 8, 11, 14, 17, 20, 21, 22, 23]);
    }

    #[test]
    fn fallbacks_fit_the_row() {
        assert_eq!(fallback(IQ4_XS, 896), IQ4_NL);
        assert_eq!(fallback(IQ4_XS, 4864), IQ4_XS);
        assert_eq!(fallback(Q6_K, 96), Q8_0);
        assert_eq!(fallback(Q2_0, 96), Q4_0);
        assert_eq!(fallback(Q1_0, 64), Q4_0);
        assert_eq!(fallback(NVFP4, 96), MXFP4);
        assert_eq!(fallback(Q4_0, 40), F16);
        assert_eq!(fallback(IQ4_XS, 40), F16);
    }

    #[test]
    fn categories_and_blocks_by_name() {
        assert_eq!(category("blk.3.attn_v.weight"), Category::AttnV);
        assert_eq!(category("blk.3.ffn_down_exps.weight"), Category::FfnDown);
        assert_eq!(category("output.weight"), Category::Output);
        assert_eq!(block_of("blk.17.ffn_up.weight"), 17);
        assert_eq!(block_of("output_norm.weight"), -1);
    }
}
