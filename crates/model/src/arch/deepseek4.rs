//! deepseek4 (DeepSeek-V4): `hyper_connection.count` residual streams mixed around each
//! of its two halves ([`crate::layers::hyper`]); compressed sparse attention
//! ([`SparseAttention`]) over a window of raw keys and rows compressed per layer at
//! `attention.compress_ratios` (0, 4 with the lightning indexer, or 128); then a mixture
//! routed by `√softplus` of the router's logits (experts chosen with `exp_probs_b` added;
//! the first `hash_layer_count` blocks take their experts from a table indexed by token)
//! beside a shared expert, both with SwiGLU clamped at `swiglu_clamp_*`. RoPE turns the
//! last `rope.dimension_count` dimensions of a head by adjacent pairs; blocks with
//! compression turn by `attention.compress_rope_freq_base` with the file's YaRN, the
//! others by `rope.freq_base` unscaled. The streams merge before the output norm
//! (`output_hc_*`). Blocks past `block_count - nextn_predict_layers` are the
//! multi-token-prediction head: a block of the same kind (uncompressed, routed by score)
//! behind the NextN entry ([`crate::layers::nextn`]), which enters the target's streams
//! before they merge; run as a drafter.

use device::{Buf, Device, ExpertNet, MatOut, MoeSpec, Op, RopeMode, SharedIn};
use gguf::Metadata;

use super::Recipe;
use crate::error::{Error, Result};
use crate::hparams::{HParams, MoeParams, SharedExpert, Traits, PLAIN};
use crate::layers::hyper::{Hyper, HyperShape};
use crate::layers::nextn::Nextn;
use crate::layers::sparse_attention::{SparseAttention, SparseShape};
use crate::layers::{Cx, Layer, LayerMemory};
use crate::tensors::{MatId, MatSpan, TensorLoader, VecId};

/// See the module doc.
pub struct DeepSeek4;

/// The keys of a file of deepseek4 blocks besides the shared ones, checked.
pub(crate) struct Config {
    pub(crate) hyper: HyperShape,
    hash_layers: usize,
    ratios: Vec<usize>,
    shape: SparseShape,
    limits: Vec<f32>,
    shared_limits: Vec<f32>,
}

const ARCH: &str = "deepseek4";

/// Whose blocks a file's keys describe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    /// A deepseek4 model's.
    Model,
    /// A DSpark drafter's stages (`dflash` files): uncompressed attention over a uniform
    /// window whose block's rows see one another, routed by score; no compressor or
    /// indexer keys.
    Drafter,
}

/// The keys of architecture `arch`.
#[derive(Clone, Copy)]
pub(crate) struct Keys<'a> {
    pub(crate) md: &'a Metadata,
    pub(crate) arch: &'a str,
}

impl Keys<'_> {
    fn key(&self, k: &str) -> String {
        format!("{}.{k}", self.arch)
    }

    pub(crate) fn bad(&self, k: &str, problem: impl Into<String>) -> Error {
        Error::BadHParam {
            key: self.key(k),
            problem: problem.into(),
        }
    }

    fn positive(&self, k: &str) -> Result<usize> {
        match self.md.u32(&self.key(k))? {
            0 => Err(self.bad(k, "must be positive")),
            v => Ok(v as usize),
        }
    }

    /// A per-block list of `n_layer` floats, or one for all.
    fn per_block(&self, k: &str, n_layer: usize) -> Result<Option<Vec<f32>>> {
        let Some(v) = self.md.get(&self.key(k)) else {
            return Ok(None);
        };
        let all = match v.as_f64() {
            Some(x) => vec![x as f32; n_layer],
            None => self.md.f32_array(&self.key(k))?,
        };
        if all.len() < n_layer {
            return Err(self.bad(k, format!("{} values for {n_layer} blocks", all.len())));
        }
        Ok(Some(all))
    }

    /// Per block, its compression ratio (0, 4 or 128); a drafter's may be absent and must
    /// be 0.
    fn ratios(&self, blocks: usize, role: Role) -> Result<Vec<usize>> {
        const K: &str = "attention.compress_ratios";
        if role == Role::Drafter && self.md.get(&self.key(K)).is_none() {
            return Ok(vec![0; blocks]);
        }
        let ratios = self.md.i64_array(&self.key(K))?;
        if ratios.len() < blocks {
            return Err(self.bad(K, format!("{} ratios for {blocks} blocks", ratios.len())));
        }
        ratios
            .iter()
            .map(|&r| match (r, role) {
                (0 | 4 | 128, Role::Model) | (0, Role::Drafter) => Ok(r as usize),
                (r, Role::Drafter) => Err(self.bad(
                    K,
                    format!("{r}: a DSpark drafter's stages are not compressed"),
                )),
                (r, Role::Model) => Err(self.bad(K, format!("{r} (0, 4 or 128)"))),
            })
            .collect()
    }

    /// The lightning indexer's shape (a model's).
    fn indexer(&self, n_rot: usize) -> Result<device::sparse::IndexerSpec> {
        let indexer = device::sparse::IndexerSpec {
            n_head: self.positive("attention.indexer.head_count")?,
            head_dim: self.positive("attention.indexer.key_length")?,
            top_k: self.positive("attention.indexer.top_k")?,
        };
        if indexer.head_dim < n_rot {
            return Err(self.bad(
                "attention.indexer.key_length",
                format!(
                    "{} is less than the {n_rot} turned dimensions",
                    indexer.head_dim
                ),
            ));
        }
        Ok(indexer)
    }

    /// The mixture: `√softplus` routing over `expert_count` experts beside shared ones.
    fn moe(&self) -> Result<MoeParams> {
        if self.md.u32(&self.key("expert_gating_func"))? != 4 {
            return Err(self.bad(
                "expert_gating_func",
                format!("{} routes by √softplus (4)", self.arch),
            ));
        }
        let n_expert = self.positive("expert_count")?;
        let used = self.positive("expert_used_count")?;
        if used > n_expert {
            return Err(self.bad("expert_used_count", format!("{used} of {n_expert} experts")));
        }
        let n_ff_exp = self.positive("expert_feed_forward_length")?;
        let md = self.md;
        Ok(MoeParams {
            n_expert,
            n_expert_used: used,
            n_ff_exp,
            gating: device::Gating::SqrtSoftplus,
            norm_weights: md
                .opt_bool(&self.key("expert_weights_norm"))?
                .unwrap_or(false),
            weights_scale: md
                .opt_f32(&self.key("expert_weights_scale"))?
                .unwrap_or(1.0),
            shared: Some(SharedExpert {
                n_ff: n_ff_exp * self.positive("expert_shared_count")?,
                gated: false,
            }),
            n_dense_lead: 0,
        })
    }

    /// `hp` for blocks `cfg` describes: one shared key head (`attention.head_count_kv` 1 or
    /// absent), the mixture ([`Keys::moe`]), `cfg`'s streams.
    pub(crate) fn blocks_hparams(&self, cfg: &Config, hp: HParams) -> Result<HParams> {
        if let Some(v) = self.md.opt_u32(&self.key("attention.head_count_kv"))? {
            if v != 1 {
                return Err(self.bad(
                    "attention.head_count_kv",
                    "one shared key head is supported",
                ));
            }
        }
        Ok(HParams {
            n_head_kv: 1,
            moe: Some(self.moe()?),
            streams: cfg.hyper.streams,
            ..hp
        })
    }
}

impl Config {
    /// The keys of a file of `n_layer` blocks and `n_nextn` NextN blocks after them (the
    /// per-block lists cover both), whose blocks are `role`'s.
    pub(crate) fn read(
        k: Keys<'_>,
        [n_layer, n_nextn]: [usize; 2],
        (hp_n_head, n_rot, rope_base): (usize, usize, f32),
        role: Role,
    ) -> Result<Config> {
        let blocks = n_layer + n_nextn;
        let ratios = k.ratios(blocks, role)?;
        let indexer = match role {
            Role::Model => k.indexer(n_rot)?,
            Role::Drafter => device::sparse::IndexerSpec {
                n_head: 0,
                head_dim: 0,
                top_k: 0,
            },
        };
        let groups = k.positive("attention.output_group_count")?;
        if !hp_n_head.is_multiple_of(groups) {
            return Err(k.bad(
                "attention.output_group_count",
                format!("{groups} does not divide {hp_n_head} heads"),
            ));
        }
        let shape = SparseShape {
            q_lora: k.positive("attention.q_lora_rank")?,
            window: k.positive("attention.sliding_window")?,
            ratio: 0,
            groups,
            o_lora: k.positive("attention.output_lora_rank")?,
            compress_base: match role {
                Role::Model => k.md.f32(&k.key("attention.compress_rope_freq_base"))?,
                Role::Drafter => rope_base,
            },
            indexer,
            causal: role == Role::Model,
        };
        let hash_layers = match role {
            Role::Model => k.md.u32(&k.key("hash_layer_count"))? as usize,
            Role::Drafter => 0,
        };
        if hash_layers > n_layer {
            return Err(k.bad(
                "hash_layer_count",
                format!("{hash_layers} of {n_layer} blocks"),
            ));
        }
        let limits = k
            .per_block("swiglu_clamp_exp", blocks)?
            .ok_or_else(|| k.bad("swiglu_clamp_exp", "missing"))?;
        let shared_limits = k
            .per_block("swiglu_clamp_shexp", blocks)?
            .unwrap_or(limits.clone());
        Ok(Config {
            hyper: HyperShape {
                streams: k.positive("hyper_connection.count")?,
                sinkhorn_iters: k.positive("hyper_connection.sinkhorn_iterations")?,
                eps: k.md.f32(&k.key("hyper_connection.epsilon"))?,
            },
            hash_layers,
            ratios,
            shape,
            limits,
            shared_limits,
        })
    }

    /// Scratch indices: the hyper-connections' `[flat, mix]`, the block's output `y`,
    /// then the attention's.
    const FLAT: usize = 0;
    const MIX: usize = 1;
    const ATTN: usize = 2;

    fn scratch(&self, hp: &HParams) -> Vec<usize> {
        let mut w = Hyper::scratch(hp, self.hyper.streams).to_vec();
        w.extend(SparseAttention::scratch(hp, &self.shape));
        w
    }
}

fn read(md: &Metadata, hp: &HParams) -> Result<Config> {
    let k = Keys { md, arch: ARCH };
    let rope = (hp.n_head, hp.n_rot, hp.rope_freq_base);
    Config::read(k, [hp.n_layer, hp.n_nextn], rope, Role::Model)
}

impl Recipe for DeepSeek4 {
    fn name(&self) -> &'static str {
        ARCH
    }

    fn traits(&self) -> Traits {
        Traits {
            rope_mode: RopeMode::Normal,
            ..PLAIN
        }
    }

    fn hparams(&self, md: &Metadata) -> Result<HParams> {
        let hp = HParams::read(md, ARCH, &self.traits())?;
        let k = Keys { md, arch: ARCH };
        let nextn = md.opt_u32(&k.key("nextn_predict_layers"))?.unwrap_or(0) as usize;
        if nextn >= hp.n_layer {
            return Err(k.bad("nextn_predict_layers", format!("{nextn} leaves no block")));
        }
        let n_layer = hp.n_layer - nextn;
        let n_nextn = nextn;
        let rope = (hp.n_head, hp.n_rot, hp.rope_freq_base);
        let cfg = Config::read(k, [n_layer, n_nextn], rope, Role::Model)?;
        k.blocks_hparams(
            &cfg,
            HParams {
                n_layer,
                n_nextn,
                ..hp
            },
        )
    }

    fn layer(&self, t: &mut TensorLoader, hp: &HParams, il: usize) -> Result<Box<dyn Layer>> {
        let cfg = read(t.metadata(), hp)?;
        block(t, hp, il, &cfg)
    }

    /// A block of the model's kind without compression, behind the NextN entry.
    fn nextn(&self, t: &mut TensorLoader, hp: &HParams, il: usize) -> Result<Box<dyn Layer>> {
        let cfg = read(t.metadata(), hp)?;
        if cfg.ratios[il] != 0 {
            return Err(Keys {
                md: t.metadata(),
                arch: ARCH,
            }
            .bad(
                "attention.compress_ratios",
                format!(
                    "multi-token-prediction block {il} is compressed at {}",
                    cfg.ratios[il]
                ),
            ));
        }
        let block = self.layer(t, hp, il)?;
        Ok(Box::new(Nextn::load(t, hp, il, block)?))
    }

    fn merge(&self, t: &mut TensorLoader, hp: &HParams) -> Result<Option<Box<dyn Layer>>> {
        let cfg = read(t.metadata(), hp)?;
        Ok(Some(merge(t, hp, &cfg)?))
    }

    fn extra_ops(&self) -> &'static [Op] {
        OPS
    }
}

/// The ops deepseek4 blocks run besides the common ones.
pub(crate) const OPS: &[Op] = &[
    Op::SparseAttention,
    Op::HyperConnections,
    Op::CopyCols,
    Op::SwigluLimit,
    Op::GatherRows,
];

/// The streams' merge before the output norm (`output_hc_*`).
pub(crate) fn merge(t: &mut TensorLoader, hp: &HParams, cfg: &Config) -> Result<Box<dyn Layer>> {
    let hyper = Hyper::load(
        t,
        hp,
        "output_hc",
        cfg.hyper,
        true,
        [Config::FLAT, Config::MIX],
    )?;
    Ok(Box::new(Merge {
        hyper,
        scratch: Hyper::scratch(hp, cfg.hyper.streams).to_vec(),
    }))
}

/// Block `il` of blocks `cfg` describes.
pub(crate) fn block(
    t: &mut TensorLoader,
    hp: &HParams,
    il: usize,
    cfg: &Config,
) -> Result<Box<dyn Layer>> {
    let n = |s: &str| format!("blk.{il}.{s}.weight");
    let scratch = cfg.scratch(hp);
    let hc = |t: &mut TensorLoader, p: &str| {
        Hyper::load(
            t,
            hp,
            &format!("blk.{il}.{p}"),
            cfg.hyper,
            false,
            [Config::FLAT, Config::MIX],
        )
    };
    let shape = SparseShape {
        ratio: cfg.ratios[il],
        ..cfg.shape
    };
    let moe = hp.moe.as_ref().expect("deepseek4 has experts");
    let (e, ne, ff) = (hp.n_embd, moe.n_expert, moe.n_ff_exp);
    let count = [ne, moe.n_expert_used];
    let shared_ff = moe.shared.map_or(0, |s| s.n_ff);
    let routing = match il < cfg.hash_layers {
        true => {
            let name = n("ffn_gate_tid2eid");
            let table = t.integers(&name, &[moe.n_expert_used, hp.n_vocab])?;
            if let Some(bad) = table.iter().find(|&&x| x < 0 || x as usize >= ne) {
                return Err(Error::BadTensor {
                    tensor: name,
                    problem: format!("expert {bad} of {ne}"),
                });
            }
            Route::Table(table.iter().map(|&x| x as u32).collect())
        }
        false => Route::Bias(t.vector(&format!("blk.{il}.exp_probs_b.bias"), ne)?),
    };
    Ok(Box::new(Block {
        hc_attn: hc(t, "hc_attn")?,
        attn_norm: t.vector(&n("attn_norm"), e)?,
        attn: SparseAttention::load(t, hp, il, shape, Config::ATTN)?,
        hc_ffn: hc(t, "hc_ffn")?,
        ffn_norm: t.vector(&n("ffn_norm"), e)?,
        router: t.matrix(&n("ffn_gate_inp"), ne, e)?,
        gate_exps: t.experts(&n("ffn_gate_exps"), il, count, ff, e)?,
        up_exps: t.experts(&n("ffn_up_exps"), il, count, ff, e)?,
        down_exps: t.experts(&n("ffn_down_exps"), il, count, e, ff)?,
        shared: [
            t.matrix(&n("ffn_gate_shexp"), shared_ff, e)?,
            t.matrix(&n("ffn_up_shexp"), shared_ff, e)?,
            t.matrix(&n("ffn_down_shexp"), e, shared_ff)?,
        ],
        routing,
        limit: cfg.limits[il],
        shared_limit: cfg.shared_limits[il],
        scratch,
    }))
}

/// How a block picks its experts.
enum Route {
    /// `[n_vocab, k]`: the experts of each token.
    Table(Vec<u32>),
    /// `[n_expert]`, added to the probabilities to choose.
    Bias(VecId),
}

/// See the module doc.
struct Block {
    hc_attn: Hyper,
    attn_norm: VecId,
    attn: SparseAttention,
    hc_ffn: Hyper,
    ffn_norm: VecId,
    router: MatId,
    gate_exps: MatSpan,
    up_exps: MatSpan,
    down_exps: MatSpan,
    /// gate, up `[n_ff, n_embd]`, down `[n_embd, n_ff]`.
    shared: [MatId; 3],
    routing: Route,
    limit: f32,
    shared_limit: f32,
    scratch: Vec<usize>,
}

impl Block {
    /// `s.proj = mixture(s.x) + shared(s.x)`.
    fn ffn(&self, cx: &Cx<'_>, dev: &mut dyn Device, n: usize) {
        let (hp, s, t) = (cx.hp, cx.s, cx.t);
        let p = hp.moe.as_ref().expect("deepseek4 has experts");
        let [gate, up, down] = self.shared;
        let ff = p.shared.map_or(0, |sh| sh.n_ff);
        let outs = [MatOut::to(s.gate), MatOut::to(s.up)];
        dev.matmul(&[t[gate], t[up]], s.x, n, &outs);
        dev.swiglu_limited(s.gate, s.up, n * ff, self.shared_limit);
        dev.matmul(&[t[down]], s.gate, n, &[MatOut::to(s.proj)]);
        let k = p.n_expert_used;
        let given: Option<Vec<u32>> = match &self.routing {
            Route::Table(table) => {
                let tokens = cx
                    .tokens
                    .expect("a block routed by token runs where tokens are");
                Some(
                    tokens[..n]
                        .iter()
                        .flat_map(|&tok| &table[tok as usize * k..(tok as usize + 1) * k])
                        .copied()
                        .collect(),
                )
            }
            Route::Bias(_) => None,
        };
        let spec = MoeSpec {
            router: t[self.router],
            gate: &t[&self.gate_exps],
            up: &t[&self.up_exps],
            down: &t[&self.down_exps],
            routing: p.routing(),
            n_embd: hp.n_embd,
            n_ff_exp: p.n_ff_exp,
            shared: None::<SharedIn>,
            choice_bias: match &self.routing {
                Route::Bias(b) => Some(t[*b]),
                Route::Table(_) => None,
            },
            given: given.as_deref(),
            limit: Some(self.limit),
            net: ExpertNet::Swiglu,
            scratch: s.moe.expect("mixture scratch"),
        };
        dev.moe(&spec, s.x, n, s.proj);
    }
}

impl Layer for Block {
    fn memory(&self, _: &HParams, _: usize) -> LayerMemory {
        self.attn.memory()
    }

    fn scratch(&self) -> Vec<usize> {
        self.scratch.clone()
    }

    fn needs_tokens(&self) -> bool {
        matches!(self.routing, Route::Table(_))
    }

    fn inject(&self, cx: &Cx<'_>, dev: &mut dyn Device, g: Buf, n: usize) {
        self.attn.store(cx, dev, g, n);
    }

    fn forward(&self, cx: &Cx<'_>, dev: &mut dyn Device, hidden: Buf, n: usize) {
        let (hp, s, t) = (cx.hp, cx.s, cx.t);
        let e = hp.n_embd;
        self.hc_attn.pre(cx, dev, hidden, n, s.x);
        dev.rms_norm(s.x, t[self.attn_norm], n, e, hp.rms_eps, s.x);
        self.attn.forward(cx, dev, n);
        self.hc_attn.post(cx, dev, s.proj, hidden, n);
        self.hc_ffn.pre(cx, dev, hidden, n, s.x);
        dev.rms_norm(s.x, t[self.ffn_norm], n, e, hp.rms_eps, s.x);
        self.ffn(cx, dev, n);
        self.hc_ffn.post(cx, dev, s.proj, hidden, n);
    }
}

/// The streams merged into one before the output norm.
struct Merge {
    hyper: Hyper,
    scratch: Vec<usize>,
}

impl Layer for Merge {
    fn scratch(&self) -> Vec<usize> {
        self.scratch.clone()
    }

    /// `hidden` (`[n, streams · n_embd]`) becomes `[n, n_embd]` in place.
    fn forward(&self, cx: &Cx<'_>, dev: &mut dyn Device, hidden: Buf, n: usize) {
        let (s, e) = (cx.s, cx.hp.n_embd);
        self.hyper.pre(cx, dev, hidden, n, s.x);
        let all = device::Cols {
            x_width: e,
            x_at: 0,
            out_width: e,
            out_at: 0,
            width: e,
        };
        dev.copy_cols(s.x, hidden, n, &all);
    }
}
