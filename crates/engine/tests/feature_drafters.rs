//! Drafters of a target's features, EAGLE-3, DFlash and DSpark: synthetic drafters of a synthetic
//! llama target (f32, SmolLM2's tokenizer cut to 320 tokens; the shapes
//! `scripts/gen_drafter_golden.sh` writes), with their own embeddings and output head, the
//! target's, or their own over a reduced vocabulary (`d2t`), draft what llama.cpp's
//! `draft-eagle3`, `draft-dflash` and `draft-dspark` draft on the same files, accept what llama-server accepts over its answer, and speculation with them leaves
//! the greedy text of 8 users as plain decoding gives it (on the CPU and the GPU).

#[allow(dead_code)]
mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use common::{model_path, MODELS};
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
            Kind::Dflash | Kind::Dspark { .. } | Kind::Dflash2 => 0.021,
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
            Kind::Dflash | Kind::Dspark { .. } | Kind::Dflash2 => 4,
        }
    }

    /// The `--spec-draft-p-min` of `scripts/gen_drafter_golden.sh`.
    fn p_min(self) -> f32 {
        match self {
            Kind::Dspark {
                confidence: true, ..
            } => P_MIN,
            Kind::Dflash2 => 0.7,
            _ => 0.0,
        }
    }

    fn proposer(self, stage: Model) -> Box<dyn Proposer> {
        let pool = engine::Threads::new(2);
        match self {
            Kind::Eagle3 => {
                Box::new(HiddenDrafter::eagle3(stage, common::f32_context(), 1, pool).unwrap())
            }
            Kind::Dflash | Kind::Dspark { .. } | Kind::Dflash2 => {
                Box::new(BlockDrafter::dflash(stage, common::f32_context(), 1, pool).unwrap())
            }
        }
    }

    fn speculation(self, stage: Model, config: SpecConfig) -> Speculation {
        match self {
            Kind::Eagle3 => Speculation::eagle3(stage, config),
            Kind::Dflash | Kind::Dspark { .. } | Kind::Dflash2 => {
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
        }
        .write(&vocab, &drafter),
    }
    .unwrap();
    (target, drafter)
}

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
    let dir = tempfile::tempdir().unwrap();
    let (target, drafter) = write_models(dir.path(), kind, head);
    let golden = golden(kind, head);
    let mut seq = ids(&golden["prompt_tokens"]);
    seq.extend(ids(&golden["answer_tokens"]));
    let features = common::target_features(&target, &seq, &TAPPED, false);
    let mut drafter = kind.proposer(drafter_stage(&drafter, &target));
    assert_eq!(drafter.features().taps, TAPPED);
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

#[test]
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

#[test]
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
    let prompts = eight_prompts(&target);
    let plain = run(&target, &prompts, 32, None, config(8, device));
    let spec_config = SpecConfig {
        p_min: kind.p_min(),
        ..fixed(3)
    };
    let spec = Some(kind.speculation(drafter_stage(&drafter, &target), spec_config));
    let drafted = run(&target, &prompts, 32, spec, config(8, device));
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
