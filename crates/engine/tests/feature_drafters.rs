//! Drafters of a target's features, EAGLE-3, DFlash and DSpark: synthetic drafters of a synthetic
//! llama target (f32, SmolLM2's tokenizer cut to 320 tokens; the shapes
//! `scripts/gen_drafter_golden.sh` writes), with their own embeddings and output head, the
//! target's, or their own over a reduced vocabulary (`d2t`), draft what llama.cpp's
//! `draft-eagle3`, `draft-dflash` and `draft-dspark` draft on the same files, accept what llama-server accepts over its answer, and speculation with them leaves
//! the greedy text of 8 users as plain decoding gives it (on the CPU and the GPU). DSpark
//! over DeepSeek-V4 stages drafts as llama.cpp's does (for a llama target) and keeps the text
//! of 8 users of a deepseek4 target.

#[allow(dead_code)]
mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use common::{model_path, write_dsv4, Dsv4Target, MODELS};
use engine::speculative::{
    BlockDrafter, HiddenDrafter, PolicyKind, Proposer, SpecConfig, Speculation,
};
use engine::EngineConfig;
use gguf::GgmlType;
use gguf::LoadMode;
use model::synthetic::dflash::{Dflash2, DflashShape, Dspark};
use model::synthetic::eagle3::Eagle3Shape;
use model::synthetic::{Synthetic, Vocab};
use model::Model;
use text::Tokenizer;

/// The blocks whose outputs are the inputs of the target's blocks 1, 2 and 3.
const TAPPED: [usize; 3] = [0, 1, 2];

/// Which drafter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Eagle3,
    Dflash,
    /// DSpark: DFlash with a Markov head, its confidence head or not, anchor-first or with
    /// a bonus anchor.
    Dspark {
        confidence: bool,
        bonus: bool,
    },
    /// DFlash 2: block convolutions and a selector.
    Dflash2,
    /// DSpark over a DeepSeek-V4 backbone ([`write_dsv4`]; golden data of a llama target),
    /// its confidence head or not.
    Dsv4Dspark {
        confidence: bool,
    },
}

/// DSpark's `--spec-draft-p-min` where it has its confidence head.
const P_MIN: f32 = 0.5;

impl Kind {
    /// llama.cpp's top two draft candidates closer than this (in its probabilities over
    /// the top 10) are a tie that the two implementations' rounding may break either way:
    /// the top probabilities differ by up to 0.005 (EAGLE-3) and 0.0104 (DFlash, whose
    /// distributions are sharper) over these answers, from 1e-4 at the first draft and
    /// growing with the position (the target's features and RoPE angles rounded otherwise),
    /// so a gap under twice that may flip.
    fn tie(self) -> f64 {
        match self {
            Kind::Eagle3 => 0.01,
            Kind::Dflash | Kind::Dspark { .. } | Kind::Dflash2 | Kind::Dsv4Dspark { .. } => 0.021,
        }
    }

    /// Whether a draft depends on the ones before it (EAGLE-3 drafts a token a forward,
    /// DSpark's Markov head biases a position by the token before it; DFlash's block
    /// drafts every position at once): after a tie, the later ones are then not compared.
    fn chained(self) -> bool {
        self != Kind::Dflash
    }

    /// The draft length of `scripts/gen_drafter_golden.sh`.
    fn n_max(self) -> usize {
        match self {
            Kind::Eagle3 => 3,
            Kind::Dflash | Kind::Dspark { .. } | Kind::Dflash2 | Kind::Dsv4Dspark { .. } => 4,
        }
    }

    /// The `--spec-draft-p-min` of `scripts/gen_drafter_golden.sh`.
    fn p_min(self) -> f32 {
        match self {
            Kind::Dspark {
                confidence: true, ..
            }
            | Kind::Dsv4Dspark { confidence: true } => P_MIN,
            Kind::Dflash2 => 0.7,
            _ => 0.0,
        }
    }

    fn proposer(self, stage: Model) -> Box<dyn Proposer> {
        self.proposer_on(stage, engine::DeviceKind::Cpu)
    }

    fn proposer_on(self, stage: Model, device: engine::DeviceKind) -> Box<dyn Proposer> {
        let pool = engine::Threads::new(2);
        let context = engine::ContextConfig {
            device,
            ..common::f32_context()
        };
        match self {
            Kind::Eagle3 => Box::new(HiddenDrafter::eagle3(stage, context, 1, pool).unwrap()),
            Kind::Dflash | Kind::Dspark { .. } | Kind::Dflash2 | Kind::Dsv4Dspark { .. } => {
                Box::new(BlockDrafter::dflash(stage, context, 1, pool).unwrap())
            }
        }
    }

    /// The target blocks whose outputs the drafter reads.
    fn tapped(self) -> &'static [usize] {
        match self {
            Kind::Dsv4Dspark { .. } => &DSV4_TAPPED,
            _ => &TAPPED,
        }
    }

    fn speculation(self, stage: Model, config: SpecConfig) -> Speculation {
        match self {
            Kind::Eagle3 => Speculation::eagle3(stage, config),
            Kind::Dflash | Kind::Dspark { .. } | Kind::Dflash2 | Kind::Dsv4Dspark { .. } => {
                Speculation::dflash(stage, config)
            }
        }
    }
}

/// A drafter's head: its own, the target's, or its own over a reduced vocabulary (160
/// tokens spread over the 320: `d2t`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Head {
    Own,
    Target,
    Reduced,
}

/// The target and the drafter of `scripts/gen_drafter_golden.sh` in `dir`, the drafter
/// with the head `head`.
fn write_models(dir: &Path, kind: Kind, head: Head) -> (PathBuf, PathBuf) {
    if let Kind::Dsv4Dspark { confidence } = kind {
        return write_dsv4(dir, confidence, Dsv4Target::Llama);
    }
    let own_head = head != Head::Target;
    let draft_vocab = (head == Head::Reduced).then_some(160);
    let (_, file, name) = MODELS[0];
    let tokenizer = gguf::GgufFile::open(model_path(file, name)).unwrap();
    let vocab = Vocab::cut(&tokenizer, 320).unwrap();
    let (target, drafter) = (dir.join("t.gguf"), dir.join("d.gguf"));
    let shape = Synthetic {
        arch: model::Arch::from_name("llama").unwrap(),
        n_embd: 128,
        n_layer: 4,
        n_head: 4,
        n_head_kv: 2,
        n_ff: 256,
        experts: None,
        delta: None,
        nextn: 0,
        window: None,
        ty: GgmlType::F32,
        seed: 7,
    };
    shape.write_vocab(&vocab, &target).unwrap();
    match kind {
        Kind::Eagle3 => Eagle3Shape {
            n_embd: 128,
            n_head: 4,
            n_head_kv: 2,
            n_ff: 256,
            target_layers: [1, 2, 3],
            target_n_embd: 128,
            norm_before_fc: false,
            norm_before_residual: false,
            own_head,
            draft_vocab,
            ty: GgmlType::F32,
            seed: 9,
        }
        .write(&vocab, &drafter),
        Kind::Dflash | Kind::Dspark { .. } | Kind::Dflash2 => DflashShape {
            n_embd: 128,
            n_layer: 2,
            n_head: 4,
            n_head_kv: 2,
            n_ff: 256,
            target_layers: vec![1, 2, 3],
            block: 8,
            own_head,
            draft_vocab,
            ty: GgmlType::F32,
            seed: match kind {
                Kind::Dflash => 11,
                Kind::Dflash2 => 17,
                _ => 13,
            },
            dspark: match kind {
                Kind::Dspark { confidence, bonus } => Some(Dspark {
                    rank: 32,
                    confidence,
                    from_anchor: !bonus,
                }),
                _ => None,
            },
            dflash2: (kind == Kind::Dflash2).then_some(Dflash2 {
                kernel: 3,
                group: 32,
                rank: 16,
                top_k: 4,
            }),
            backbone: None,
        }
        .write(&vocab, &drafter),
        Kind::Dsv4Dspark { .. } => unreachable!("written by write_dsv4"),
    }
    .unwrap();
    (target, drafter)
}

/// The blocks whose outputs are the inputs of a target's blocks 1, 3 and 5.
const DSV4_TAPPED: [usize; 3] = [0, 2, 4];

fn ids(v: &serde_json::Value) -> Vec<u32> {
    common::ids(v)
}

fn golden(kind: Kind, head: Head) -> serde_json::Value {
    let text = match (kind, head) {
        (Kind::Eagle3, Head::Own) => include_str!("golden/llama-eagle3.llamacpp.json"),
        (Kind::Eagle3, Head::Target) => {
            include_str!("golden/llama-eagle3-target-head.llamacpp.json")
        }
        (Kind::Eagle3, Head::Reduced) => include_str!("golden/llama-eagle3-d2t.llamacpp.json"),
        (Kind::Dflash, Head::Own) => include_str!("golden/llama-dflash.llamacpp.json"),
        (Kind::Dflash, Head::Target) => {
            include_str!("golden/llama-dflash-target-head.llamacpp.json")
        }
        (Kind::Dflash, Head::Reduced) => include_str!("golden/llama-dflash-d2t.llamacpp.json"),
        (Kind::Dspark { confidence, bonus }, head) => match (confidence, bonus, head) {
            (false, false, Head::Own) => include_str!("golden/llama-dspark.llamacpp.json"),
            (true, false, Head::Own) => include_str!("golden/llama-dspark-conf.llamacpp.json"),
            (false, true, Head::Reduced) => {
                include_str!("golden/llama-dspark-bonus-d2t.llamacpp.json")
            }
            other => panic!("no golden drafts for DSpark {other:?}"),
        },
        (Kind::Dflash2, Head::Own) => include_str!("golden/llama-dflash2.llamacpp.json"),
        (Kind::Dflash2, head) => panic!("no golden drafts for DFlash 2 with {head:?}"),
        (Kind::Dsv4Dspark { confidence: false }, _) => {
            include_str!("golden/deepseek4-dspark.llamacpp.json")
        }
        (Kind::Dsv4Dspark { confidence: true }, _) => {
            include_str!("golden/deepseek4-dspark-conf.llamacpp.json")
        }
    };
    serde_json::from_str(text).unwrap()
}

/// The drafter stage of `drafter` for the target at `target`.
fn drafter_stage(drafter: &Path, target: &Path) -> Model {
    let target = Model::load(target).unwrap();
    Model::load_drafter(drafter, LoadMode::Mmap, &target).unwrap()
}

#[test]
fn eagle3_drafts_equal_llama_cpp_s_on_the_same_file() {
    drafts_equal_llama_cpp_s(Kind::Eagle3, Head::Own);
}

#[test]
fn eagle3_drafts_with_the_target_s_head_equal_llama_cpp_s_on_the_same_file() {
    drafts_equal_llama_cpp_s(Kind::Eagle3, Head::Target);
}

#[test]
fn eagle3_drafts_over_a_reduced_vocabulary_equal_llama_cpp_s_on_the_same_file() {
    drafts_equal_llama_cpp_s(Kind::Eagle3, Head::Reduced);
}

#[test]
fn dflash_drafts_equal_llama_cpp_s_on_the_same_file() {
    drafts_equal_llama_cpp_s(Kind::Dflash, Head::Own);
}

#[test]
fn dflash_drafts_with_the_target_s_head_equal_llama_cpp_s_on_the_same_file() {
    drafts_equal_llama_cpp_s(Kind::Dflash, Head::Target);
}

#[test]
fn dflash_drafts_over_a_reduced_vocabulary_equal_llama_cpp_s_on_the_same_file() {
    drafts_equal_llama_cpp_s(Kind::Dflash, Head::Reduced);
}

const DSPARK: Kind = Kind::Dspark {
    confidence: false,
    bonus: false,
};
const DSPARK_CONFIDENT: Kind = Kind::Dspark {
    confidence: true,
    bonus: false,
};
const DSPARK_BONUS: Kind = Kind::Dspark {
    confidence: false,
    bonus: true,
};

#[test]
fn dspark_drafts_equal_llama_cpp_s_on_the_same_file() {
    drafts_equal_llama_cpp_s(DSPARK, Head::Own);
}

/// Drafting stops where the confidence head falls below `p_min`, as llama.cpp's does.
#[test]
fn dspark_drafts_with_its_confidence_head_equal_llama_cpp_s_on_the_same_file() {
    drafts_equal_llama_cpp_s(DSPARK_CONFIDENT, Head::Own);
}

#[test]
fn dspark_drafts_after_a_bonus_anchor_over_a_reduced_vocabulary_equal_llama_cpp_s() {
    drafts_equal_llama_cpp_s(DSPARK_BONUS, Head::Reduced);
}

/// DFlash 2 logs no candidates: every draft call's length, which the selector's
/// probabilities against `p_min` decide along the path it walks, equals llama.cpp's (asked
/// for what llama-server asks: at most the tokens left to generate but one), but where the
/// probability that decides it is within the drafts' tie allowance of `p_min` (at most 2%
/// of the calls).
#[test]
fn dflash2_draft_lengths_equal_llama_cpp_s_on_the_same_file() {
    let kind = Kind::Dflash2;
    let dir = tempfile::tempdir().unwrap();
    let (target, drafter) = write_models(dir.path(), kind, Head::Own);
    let golden = golden(kind, Head::Own);
    let mut seq = ids(&golden["prompt_tokens"]);
    seq.extend(ids(&golden["answer_tokens"]));
    let features = common::target_features(&target, &seq, &TAPPED, false);
    let mut drafter = kind.proposer(drafter_stage(&drafter, &target));
    for (pos, f) in features.iter().enumerate() {
        drafter.observe_state(0, pos, f);
    }
    let mut draft = |n_past: usize, p_min: f32| {
        let job = engine::speculative::DraftJob {
            slot: 0,
            tokens: &seq[..=n_past],
            n_max: kind.n_max().min(seq.len() - n_past - 2),
            sampling: engine::SamplerConfig::greedy(),
            p_min,
        };
        let mut out = [engine::speculative::Draft::default()];
        drafter
            .propose(&[job], &mut out, &mut Default::default())
            .unwrap();
        out[0].clone()
    };
    let steps = golden["steps"].as_array().unwrap();
    let (mut short, mut ties) = (0, 0);
    for step in steps {
        let n_past = step["n_past"].as_u64().unwrap() as usize;
        let theirs = step["n_draft"].as_u64().unwrap() as usize;
        let ours = draft(n_past, kind.p_min()).len();
        short += usize::from(theirs < kind.n_max());
        if ours != theirs {
            let p = draft(n_past, 0.0).confidence[ours.min(theirs)];
            assert!(
                (p - kind.p_min()).abs() < kind.tie() as f32,
                "after {n_past} tokens: {ours} drafts, llama.cpp {theirs} (p {p})"
            );
            ties += 1;
        }
    }
    assert!(short * 4 > steps.len(), "few calls cut short: {short}");
    assert!(
        ties * 50 <= steps.len(),
        "{ties} ties in {} calls",
        steps.len()
    );
}

fn drafts_equal_llama_cpp_s(kind: Kind, head: Head) {
    drafts_equal_llama_cpp_s_on(kind, head, engine::DeviceKind::Cpu, usize::MAX);
}

/// [`drafts_equal_llama_cpp_s`], the drafter on `device`, over the first `calls` draft
/// calls of the golden answer.
fn drafts_equal_llama_cpp_s_on(kind: Kind, head: Head, device: engine::DeviceKind, calls: usize) {
    let dir = tempfile::tempdir().unwrap();
    let (target, drafter) = write_models(dir.path(), kind, head);
    let golden = golden(kind, head);
    drafts_of_the_pair_equal(kind, (&target, &drafter), golden, device, calls);
}

/// The drafts of `drafter` (on `device`) for `target` over the first `calls` draft calls of
/// `golden` equal llama.cpp's there.
fn drafts_of_the_pair_equal(
    kind: Kind,
    (target, drafter): (&Path, &Path),
    mut golden: serde_json::Value,
    device: engine::DeviceKind,
    calls: usize,
) {
    if let Some(steps) = golden["steps"].as_array_mut() {
        steps.truncate(calls);
    }
    let mut seq = ids(&golden["prompt_tokens"]);
    seq.extend(ids(&golden["answer_tokens"]));
    let features = common::target_features(target, &seq, kind.tapped(), false);
    let mut drafter = kind.proposer_on(drafter_stage(drafter, target), device);
    assert_eq!(drafter.features().taps, kind.tapped());
    for (pos, f) in features.iter().enumerate() {
        drafter.observe_state(0, pos, f);
    }
    let asked = match kind.p_min() > 0.0 {
        true => common::Asked::Upto(kind.n_max(), kind.p_min()),
        false => common::Asked::AsDrafted,
    };
    common::drafts_equal_golden(
        &mut *drafter,
        &golden,
        &seq,
        kind.tie(),
        kind.chained(),
        asked,
    );
}

fn config(n_parallel: usize, device: engine::DeviceKind) -> EngineConfig {
    EngineConfig {
        kv_type: GgmlType::F32,
        device,
        ..common::engine_config(4096, n_parallel, true)
    }
}

/// Requests of `prompts` of `n` tokens each, their end token ignored: their tokens and
/// summaries.
fn run(
    target: &Path,
    prompts: &[Vec<u32>],
    n: usize,
    spec: Option<Speculation>,
    cfg: EngineConfig,
) -> Vec<(Vec<u32>, engine::Summary)> {
    let model = Model::load(target).unwrap();
    let tok = Tokenizer::from_gguf(&model.file.header.metadata).unwrap();
    let handle = engine::start(model, Arc::new(tok), cfg, spec, None).unwrap();
    common::run_all(&handle, prompts, n)
}

fn fixed(n_max: usize) -> SpecConfig {
    SpecConfig {
        n_max,
        policy: PolicyKind::Fixed,
        ..SpecConfig::default()
    }
}

const DSV4_DSPARK: Kind = Kind::Dsv4Dspark { confidence: false };
const DSV4_DSPARK_CONFIDENT: Kind = Kind::Dsv4Dspark { confidence: true };

/// The block's rows see one another within the stages' window.
#[test]
fn dspark_over_deepseek4_drafts_equal_llama_cpp_s_on_the_same_file() {
    drafts_equal_llama_cpp_s(DSV4_DSPARK, Head::Own);
}

/// The confidence head reads the merged streams before the output norm, as llama.cpp's
/// `graph_dsv4` has it.
#[test]
fn dspark_over_deepseek4_drafts_with_its_confidence_head_equal_llama_cpp_s() {
    drafts_equal_llama_cpp_s(DSV4_DSPARK_CONFIDENT, Head::Own);
}

/// Of a deepseek4 target, whose features are its streams averaged: llama.cpp's first 64 draft
/// calls (its DeepSeek-V4 reads a token decoded alone otherwise than among a verified block,
/// so the features of its later calls depend on how its answer was verified).
#[test]
fn dspark_over_deepseek4_of_a_deepseek4_target_drafts_as_llama_cpp_s_first_calls() {
    let dir = tempfile::tempdir().unwrap();
    let (target, drafter) = write_dsv4(dir.path(), false, Dsv4Target::Deepseek4);
    let text = include_str!("golden/deepseek4-dspark-of-deepseek4.llamacpp.json");
    let golden = serde_json::from_str(text).unwrap();
    let pair = (target.as_path(), drafter.as_path());
    drafts_of_the_pair_equal(DSV4_DSPARK, pair, golden, engine::DeviceKind::Cpu, 64);
}

/// The drafter on lavapipe: its block's rows see one another there too.
#[test]
fn dspark_over_deepseek4_drafts_on_the_gpu_equal_llama_cpp_s() {
    if gpu::adapter_for_tests() {
        drafts_equal_llama_cpp_s_on(DSV4_DSPARK, Head::Own, engine::DeviceKind::Gpu, 48);
    }
}

#[test]
fn the_answer_accepts_as_llama_server_s_with_dspark_over_deepseek4() {
    the_answer_accepts_as_llama_server_s(DSV4_DSPARK);
}

#[test]
fn the_answer_accepts_as_llama_server_s_with_dspark() {
    the_answer_accepts_as_llama_server_s(DSPARK);
}

#[test]
fn the_answer_accepts_as_llama_server_s_with_dflash2() {
    the_answer_accepts_as_llama_server_s(Kind::Dflash2);
}

#[test]
fn the_answer_accepts_as_llama_server_s_with_dspark_s_confidence_head() {
    the_answer_accepts_as_llama_server_s(DSPARK_CONFIDENT);
}

#[test]
fn the_answer_accepts_as_llama_server_s_with_eagle3() {
    the_answer_accepts_as_llama_server_s(Kind::Eagle3);
}

#[test]
fn the_answer_accepts_as_llama_server_s_with_dflash() {
    the_answer_accepts_as_llama_server_s(Kind::Dflash);
}

/// llama-server's answer, drafting at the fixed depth it drafted with, every draft
/// verified (no step budget): the same tokens, and the drafts it accepted (each call's
/// first candidates against the answer's next tokens) accepted here.
fn the_answer_accepts_as_llama_server_s(kind: Kind) {
    let dir = tempfile::tempdir().unwrap();
    let (target, drafter) = write_models(dir.path(), kind, Head::Own);
    let golden = golden(kind, Head::Own);
    let prompt = ids(&golden["prompt_tokens"]);
    let answer = ids(&golden["answer_tokens"]);
    let seq: Vec<u32> = prompt.iter().chain(&answer).copied().collect();
    let (verified, accepted) = common::golden_verified_accepted(&golden, &seq);
    let cfg = EngineConfig {
        step_budget: engine::StepBudget::Off,
        ..config(1, engine::DeviceKind::Cpu)
    };
    let config = SpecConfig {
        p_min: kind.p_min(),
        ..fixed(kind.n_max())
    };
    let spec = kind.speculation(drafter_stage(&drafter, &target), config);
    let got = run(&target, &[prompt], answer.len(), Some(spec), cfg);
    let (tokens, summary) = &got[0];
    assert_eq!(tokens, &answer);
    assert_eq!(
        (summary.draft_n, summary.draft_n_accepted),
        (verified, accepted),
        "drafts verified and accepted"
    );
}

#[test]
fn eight_users_drafting_with_eagle3_get_the_plain_text() {
    eight_users_get_the_plain_text(Kind::Eagle3, engine::DeviceKind::Cpu);
}

#[test]
fn eight_users_drafting_with_dflash_get_the_plain_text() {
    eight_users_get_the_plain_text(Kind::Dflash, engine::DeviceKind::Cpu);
}

#[test]
fn eight_users_drafting_with_dspark_get_the_plain_text() {
    eight_users_get_the_plain_text(DSPARK_CONFIDENT, engine::DeviceKind::Cpu);
}

#[test]
fn eight_users_on_the_gpu_drafting_with_dspark_get_the_plain_text() {
    if gpu::adapter_for_tests() {
        eight_users_get_the_plain_text(DSPARK_CONFIDENT, engine::DeviceKind::Gpu);
    }
}

/// The adaptive policy cuts DSpark's drafts by its confidence head: the text stays plain.
#[test]
fn eight_users_drafting_with_dspark_under_the_adaptive_policy_get_the_plain_text() {
    let dir = tempfile::tempdir().unwrap();
    let (target, drafter) = write_models(dir.path(), DSPARK_CONFIDENT, Head::Target);
    let prompts = eight_prompts(&target);
    let plain = run(
        &target,
        &prompts,
        32,
        None,
        config(8, engine::DeviceKind::Cpu),
    );
    let spec_config = SpecConfig {
        n_max: 4,
        ..SpecConfig::default()
    };
    let spec = DSPARK_CONFIDENT.speculation(drafter_stage(&drafter, &target), spec_config);
    let drafted = run(
        &target,
        &prompts,
        32,
        Some(spec),
        config(8, engine::DeviceKind::Cpu),
    );
    for (i, (p, d)) in plain.iter().zip(&drafted).enumerate() {
        assert_eq!(p.0, d.0, "prompt {i}");
    }
}

#[test]
fn eight_users_drafting_with_dflash2_get_the_plain_text() {
    eight_users_get_the_plain_text(Kind::Dflash2, engine::DeviceKind::Cpu);
}

/// Slow tier: the block drafter on the GPU is checked with DSpark's drafter.
#[test]
#[ignore = "slow tier: scripts/test --slow"]
fn eight_users_on_the_gpu_drafting_with_dflash2_get_the_plain_text() {
    if gpu::adapter_for_tests() {
        eight_users_get_the_plain_text(Kind::Dflash2, engine::DeviceKind::Gpu);
    }
}

#[test]
fn eight_users_on_the_gpu_drafting_with_eagle3_get_the_plain_text() {
    if gpu::adapter_for_tests() {
        eight_users_get_the_plain_text(Kind::Eagle3, engine::DeviceKind::Gpu);
    }
}

/// Slow tier: the block drafter on the GPU is checked with DSpark's drafter.
#[test]
#[ignore = "slow tier: scripts/test --slow"]
fn eight_users_on_the_gpu_drafting_with_dflash_get_the_plain_text() {
    if gpu::adapter_for_tests() {
        eight_users_get_the_plain_text(Kind::Dflash, engine::DeviceKind::Gpu);
    }
}

/// Eight prompts of different lengths for the model at `target`.
fn eight_prompts(target: &Path) -> Vec<Vec<u32>> {
    let model = Model::load(target).unwrap();
    let tok = Tokenizer::from_gguf(&model.file.header.metadata).unwrap();
    let text = "The quick brown fox jumps over the lazy dog while the river runs to the sea. ";
    (0..8)
        .map(|i| {
            tok.encode(&text.repeat(1 + i % 3)[i..], true, false)
                .unwrap()
        })
        .collect()
}

fn eight_users_get_the_plain_text(kind: Kind, device: engine::DeviceKind) {
    let dir = tempfile::tempdir().unwrap();
    let (target, drafter) = write_models(dir.path(), kind, Head::Target);
    eight_users_of_the_pair_get_the_plain_text(kind, (&target, &drafter), device);
}

/// On the seeds' pairing: a deepseek4 target, its streams averaged into the features.
#[test]
fn eight_users_drafting_with_dspark_over_deepseek4_get_the_plain_text() {
    let dir = tempfile::tempdir().unwrap();
    let (target, drafter) = write_dsv4(dir.path(), true, Dsv4Target::Deepseek4);
    let kind = DSV4_DSPARK_CONFIDENT;
    eight_users_of_the_pair_get_the_plain_text(kind, (&target, &drafter), engine::DeviceKind::Cpu);
}

/// The small pair of [`write_dsv4`] on lavapipe.
#[test]
fn eight_users_on_the_gpu_drafting_with_dspark_over_deepseek4_get_the_plain_text() {
    if gpu::adapter_for_tests() {
        let dir = tempfile::tempdir().unwrap();
        let (target, drafter) = write_dsv4(dir.path(), true, Dsv4Target::Small);
        let kind = DSV4_DSPARK_CONFIDENT;
        eight_users_of_the_pair_get_the_plain_text(
            kind,
            (&target, &drafter),
            engine::DeviceKind::Gpu,
        );
    }
}

fn eight_users_of_the_pair_get_the_plain_text(
    kind: Kind,
    (target, drafter): (&Path, &Path),
    device: engine::DeviceKind,
) {
    let prompts = eight_prompts(target);
    let plain = run(target, &prompts, 32, None, config(8, device));
    let spec_config = SpecConfig {
        p_min: kind.p_min(),
        ..fixed(3)
    };
    let spec = Some(kind.speculation(drafter_stage(drafter, target), spec_config));
    let drafted = run(target, &prompts, 32, spec, config(8, device));
    for (i, (p, d)) in plain.iter().zip(&drafted).enumerate() {
        assert_eq!(p.0, d.0, "prompt {i}");
    }
    assert!(
        drafted.iter().map(|d| d.1.draft_n).sum::<usize>() > 0,
        "nothing was drafted"
    );
}

/// A drafter's file loaded alone is refused, naming what it is.
#[test]
fn drafters_alone_are_refused() {
    for kind in [Kind::Eagle3, Kind::Dflash] {
        let dir = tempfile::tempdir().unwrap();
        let (_, drafter) = write_models(dir.path(), kind, Head::Reduced);
        let err = Model::load(&drafter).err().expect("refused");
        assert!(
            err.to_string().contains("beside its target"),
            "{kind:?}: {err}"
        );
    }
}

/// A DSpark drafter over DeepSeek-V4 stages that are compressed (llama.cpp refuses them
/// too) is refused at load, naming the key.
#[test]
fn a_deepseek4_dspark_with_compressed_stages_is_refused_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let (target, drafter) = write_dsv4(dir.path(), false, Dsv4Target::Small);
    let file = gguf::GgufFile::open(&drafter).unwrap();
    let mut w = gguf::GgufWriter::new();
    for (k, v) in file.header.metadata.iter() {
        if k != "dflash.attention.compress_ratios" {
            w.metadata(k, v.clone());
        }
    }
    let ratios = vec![gguf::Value::U32(4)];
    w.metadata(
        "dflash.attention.compress_ratios",
        gguf::Value::Array(gguf::ValueType::U32, ratios),
    );
    for t in &file.header.tensors {
        w.tensor(&t.name, &t.dims, t.ggml_type, file.tensor_bytes(t).to_vec());
    }
    let hostile = dir.path().join("hostile.gguf");
    w.write(&hostile).unwrap();
    let target = Model::load(&target).unwrap();
    let err = Model::load_drafter(&hostile, LoadMode::Mmap, &target)
        .err()
        .expect("refused")
        .to_string();
    assert!(
        err.contains("dflash.attention.compress_ratios") && err.contains("not compressed"),
        "{err}"
    );
}
