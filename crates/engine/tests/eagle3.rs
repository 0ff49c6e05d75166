//! EAGLE-3: a synthetic EAGLE-3 drafter of a synthetic llama target (f32, SmolLM2's
//! tokenizer cut to 320 tokens; the shapes `scripts/gen_eagle3_golden.sh` writes), with
//! its own embeddings and output head or the target's, drafts what llama.cpp's
//! `draft-eagle3` drafts on the same files, accepts what llama-server accepts over its
//! answer, and speculation with it leaves the greedy text of 8 users as plain decoding
//! gives it (on the CPU and the GPU).

#[allow(dead_code)]
mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use common::{model_path, MODELS};
use device::Row;
use engine::speculative::{
    Draft, DraftJob, DraftLog, HiddenDrafter, PolicyKind, Proposer, SpecConfig, Speculation,
};
use engine::{ContextConfig, EngineConfig, Enter, Executor, Out, RowOut, Taps};
use gguf::GgmlType;
use gguf::LoadMode;
use model::synthetic::eagle3::Eagle3Shape;
use model::synthetic::{Synthetic, Vocab};
use model::Model;
use text::Tokenizer;

/// llama.cpp's top two draft candidates closer than this (in its probabilities over the
/// top 10) are a tie that the two implementations' rounding may break either way.
const TIE: f64 = 0.01;

/// The blocks whose outputs are the inputs of the target's blocks 1, 2 and 3.
const TAPPED: [usize; 3] = [0, 1, 2];

/// The target and the drafter of `scripts/gen_eagle3_golden.sh` in `dir`, the drafter
/// with its own embeddings and output head or (`own_head` false) the target's.
fn write_models(dir: &Path, own_head: bool) -> (PathBuf, PathBuf) {
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
    let eagle = Eagle3Shape {
        n_embd: 128,
        n_head: 4,
        n_head_kv: 2,
        n_ff: 256,
        target_layers: [1, 2, 3],
        target_n_embd: 128,
        norm_before_fc: false,
        norm_before_residual: false,
        own_head,
        ty: GgmlType::F32,
        seed: 9,
    };
    eagle.write(&vocab, &drafter).unwrap();
    (target, drafter)
}

fn context() -> ContextConfig {
    ContextConfig {
        n_ctx: 512,
        n_ubatch: 64,
        n_threads: 2,
        device: engine::DeviceKind::Cpu,
        kv_type: GgmlType::F32,
        ..ContextConfig::default()
    }
}

/// The target's features of every position of `tokens`, as the engine hands them over:
/// the states after blocks `TAPPED`, side by side (`[pos][3 · n_embd]`).
fn target_features(path: &Path, tokens: &[u32]) -> Vec<Vec<f32>> {
    let mut exec = Executor::new(Model::load(path).unwrap(), context()).unwrap();
    let mut seq = kv::SeqKv::default();
    let mut features = vec![Vec::new(); tokens.len()];
    for (c, chunk) in tokens.chunks(64).enumerate() {
        let rows: Vec<Row> = (0..chunk.len())
            .map(|i| Row {
                pos: c * 64 + i,
                seq: 0,
            })
            .collect();
        let all: Vec<usize> = (0..chunk.len()).collect();
        let mut on_row = |r: usize, o: RowOut<'_>| {
            if let RowOut::Tap { layer, state } = o {
                let f = &mut features[c * 64 + r];
                f.resize(TAPPED.len() * state.len(), f32::NAN);
                let at = layer * state.len();
                f[at..at + state.len()].copy_from_slice(state);
            }
        };
        let out = Out::Rows {
            logits: &[],
            states: &[],
            taps: Taps {
                layers: &TAPPED,
                rows: &all,
            },
            on_row: &mut on_row,
        };
        exec.forward(&mut [&mut seq], &rows, Enter::Tokens(chunk), out)
            .unwrap();
    }
    features
}

fn ids(v: &serde_json::Value) -> Vec<u32> {
    common::ids(v)
}

fn golden(own_head: bool) -> serde_json::Value {
    let text = match own_head {
        true => include_str!("golden/llama-eagle3.llamacpp.json"),
        false => include_str!("golden/llama-eagle3-target-head.llamacpp.json"),
    };
    serde_json::from_str(text).unwrap()
}

/// The drafter stage of `drafter` for the target at `target`.
fn drafter_stage(drafter: &Path, target: &Path) -> Model {
    let target = Model::load(target).unwrap();
    Model::load_drafter(drafter, LoadMode::Mmap, &target).unwrap()
}

#[test]
fn drafts_equal_llama_cpp_s_on_the_same_file() {
    drafts_equal_llama_cpp_s(true);
}

#[test]
fn drafts_with_the_target_s_head_equal_llama_cpp_s_on_the_same_file() {
    drafts_equal_llama_cpp_s(false);
}

fn drafts_equal_llama_cpp_s(own_head: bool) {
    let dir = tempfile::tempdir().unwrap();
    let (target, drafter) = write_models(dir.path(), own_head);
    let golden = golden(own_head);
    let mut seq = ids(&golden["prompt_tokens"]);
    seq.extend(ids(&golden["answer_tokens"]));
    let features = target_features(&target, &seq);
    let pool = Arc::new(kernels::ThreadPool::new(2));
    let stage = drafter_stage(&drafter, &target);
    let mut eagle = HiddenDrafter::eagle3(stage, context(), 1, pool).unwrap();
    assert_eq!(eagle.features().taps, TAPPED);
    for (pos, f) in features.iter().enumerate() {
        eagle.observe_state(0, pos, f);
    }
    let (mut compared, mut ties, mut total) = (0, 0, 0);
    for step in golden["steps"].as_array().unwrap() {
        let n_past = step["n_past"].as_u64().unwrap() as usize;
        assert_eq!(seq[n_past], step["id_last"].as_u64().unwrap() as u32);
        let cands = step["candidates"].as_array().unwrap();
        let job = DraftJob {
            slot: 0,
            tokens: &seq[..=n_past],
            n_max: cands.len(),
            sampling: engine::SamplerConfig::greedy(),
            p_min: 0.0,
        };
        let mut out = [Draft::default()];
        eagle
            .propose(&[job], &mut out, &mut DraftLog::default())
            .unwrap();
        assert_eq!(out[0].len(), cands.len(), "a draft of every length asked");
        total += cands.len();
        for (i, c) in cands.iter().enumerate() {
            let top = |k: usize| (c[k][0].as_u64().unwrap() as u32, c[k][1].as_f64().unwrap());
            let ours = out[0].tokens[i];
            if top(0).1 - top(1).1 < TIE {
                assert!(
                    ours == top(0).0 || ours == top(1).0,
                    "after {n_past} tokens, draft {i}: {ours} is neither of llama.cpp's tied {:?}",
                    [top(0), top(1)]
                );
                ties += 1;
                break;
            }
            assert_eq!(
                ours,
                top(0).0,
                "after {n_past} tokens, draft {i}: llama.cpp drafts {:?}",
                top(0)
            );
            compared += 1;
        }
    }
    assert!(
        compared * 10 >= total * 9,
        "only {compared} of {total} drafts compared ({ties} ties)"
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

/// llama-server's answer, drafting at a fixed depth of 3 with every draft verified (no
/// step budget): the same tokens, and the drafts it accepted (each call's first
/// candidates against the answer's next tokens) accepted here.
#[test]
fn the_answer_accepts_as_llama_server_s() {
    let dir = tempfile::tempdir().unwrap();
    let (target, drafter) = write_models(dir.path(), true);
    let golden = golden(true);
    let prompt = ids(&golden["prompt_tokens"]);
    let answer = ids(&golden["answer_tokens"]);
    let seq: Vec<u32> = prompt.iter().chain(&answer).copied().collect();
    let (mut verified, mut accepted) = (0, 0);
    for step in golden["steps"].as_array().unwrap() {
        let n_past = step["n_past"].as_u64().unwrap() as usize;
        let drafts = step["candidates"].as_array().unwrap();
        let a = drafts
            .iter()
            .map(|c| c[0][0].as_u64().unwrap() as u32)
            .zip(&seq[n_past + 1..])
            .take_while(|(d, t)| d == *t)
            .count();
        accepted += a;
        verified += (a + 1).min(drafts.len());
    }
    assert_eq!(
        accepted as u64,
        golden["draft_n_accepted"].as_u64().unwrap()
    );
    let cfg = EngineConfig {
        step_budget: engine::StepBudget::Off,
        ..config(1, engine::DeviceKind::Cpu)
    };
    let spec = Speculation::eagle3(drafter_stage(&drafter, &target), fixed(3));
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
    eight_users_get_the_plain_text(engine::DeviceKind::Cpu);
}

#[test]
fn eight_users_on_the_gpu_drafting_with_eagle3_get_the_plain_text() {
    if gpu::adapter_for_tests() {
        eight_users_get_the_plain_text(engine::DeviceKind::Gpu);
    }
}

fn eight_users_get_the_plain_text(device: engine::DeviceKind) {
    let dir = tempfile::tempdir().unwrap();
    let (target, drafter) = write_models(dir.path(), false);
    let model = Model::load(&target).unwrap();
    let tok = Tokenizer::from_gguf(&model.file.header.metadata).unwrap();
    let text = "The quick brown fox jumps over the lazy dog while the river runs to the sea. ";
    let prompts: Vec<Vec<u32>> = (0..8)
        .map(|i| {
            tok.encode(&text.repeat(1 + i % 3)[i..], true, false)
                .unwrap()
        })
        .collect();
    let plain = run(&target, &prompts, 32, None, config(8, device));
    let spec = Some(Speculation::eagle3(
        drafter_stage(&drafter, &target),
        fixed(3),
    ));
    let drafted = run(&target, &prompts, 32, spec, config(8, device));
    for (i, (p, d)) in plain.iter().zip(&drafted).enumerate() {
        assert_eq!(p.0, d.0, "prompt {i}");
    }
    assert!(
        drafted.iter().map(|d| d.1.draft_n).sum::<usize>() > 0,
        "nothing was drafted"
    );
}

/// An EAGLE-3 file is a drafter: loaded alone, it is refused, naming what it is.
#[test]
fn an_eagle3_file_alone_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (_, drafter) = write_models(dir.path(), true);
    let err = Model::load(&drafter).err().expect("refused");
    assert!(err.to_string().contains("beside its target"), "{err}");
}
