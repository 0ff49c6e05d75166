//! Multi-token prediction: a synthetic qwen35 and a synthetic deepseek4 (whose NextN block
//! enters the target's four residual streams) with one NextN block each (f32, SmolLM2's
//! tokenizer cut to 320 tokens; the shapes `scripts/gen_mtp_golden.sh` writes) draft what
//! llama.cpp's `draft-mtp` drafts on the same file, at the same steps, and speculation with
//! them leaves the greedy text of 8 users as plain decoding gives it (on the CPU and the
//! GPU).

#[allow(dead_code)]
mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use common::{model_path, MODELS};
use engine::speculative::{HiddenDrafter, PolicyKind, Proposer, SpecConfig, Speculation};
use engine::{EngineConfig, Event};
use gguf::GgmlType;
use model::layers::gated_delta_net::DeltaShape;
use model::synthetic::deepseek4::Dsv4Shape;
use model::synthetic::{Synthetic, Vocab};
use model::{Model, Part};
use text::Tokenizer;

/// llama.cpp's top two draft candidates closer than this (in its probabilities over the
/// top 10) are a tie that the two implementations' rounding may break either way.
const TIE: f64 = 0.01;

/// The models of `scripts/gen_mtp_golden.sh`.
#[derive(Clone, Copy)]
enum Target {
    Qwen35,
    Deepseek4,
}

impl Target {
    fn name(self) -> &'static str {
        match self {
            Target::Qwen35 => "qwen35",
            Target::Deepseek4 => "deepseek4",
        }
    }

    fn golden(self) -> serde_json::Value {
        let text = match self {
            Target::Qwen35 => include_str!("golden/qwen35-mtp.llamacpp.json"),
            Target::Deepseek4 => include_str!("golden/deepseek4-mtp.llamacpp.json"),
        };
        serde_json::from_str(text).unwrap()
    }

    /// The model at `dir/NAME-mtp.gguf`.
    fn write(self, dir: &Path) -> PathBuf {
        let (_, file, name) = MODELS[0];
        let tokenizer = gguf::GgufFile::open(model_path(file, name)).unwrap();
        let vocab = Vocab::cut(&tokenizer, 320).unwrap();
        let path = dir.join(format!("{}-mtp.gguf", self.name()));
        match self {
            Target::Qwen35 => Synthetic {
                arch: model::Arch::from_name("qwen35").unwrap(),
                n_embd: 128,
                n_layer: 4,
                n_head: 4,
                n_head_kv: 2,
                n_ff: 256,
                experts: None,
                delta: Some(DeltaShape {
                    conv_kernel: 4,
                    head_dim: 32,
                    n_k_heads: 2,
                    n_v_heads: 4,
                }),
                nextn: 1,
                window: None,
                ty: GgmlType::F32,
                seed: 7,
            }
            .write_vocab(&vocab, &path)
            .unwrap(),
            Target::Deepseek4 => Dsv4Shape {
                nextn: 1,
                ty: GgmlType::F32,
                seed: 3,
                ..Default::default()
            }
            .write(&vocab, &path)
            .unwrap(),
        }
        path
    }

    /// The model the 8-user tests run, at `dir/NAME-small.gguf`: qwen35's golden one; a
    /// deepseek4 of 2 blocks of 64 (ratios 4 and 128, the indexer choosing 2 blocks, block 0
    /// routed by token, 4 streams), which lavapipe runs in seconds.
    fn write_small(self, dir: &Path) -> PathBuf {
        if let Target::Qwen35 = self {
            return self.write(dir);
        }
        let (_, file, name) = MODELS[0];
        let tokenizer = gguf::GgufFile::open(model_path(file, name)).unwrap();
        let path = dir.join("deepseek4-small.gguf");
        Dsv4Shape {
            n_layer: 2,
            compress_ratios: vec![4, 128],
            nextn: 1,
            ty: GgmlType::F32,
            seed: 3,
            ..common::deepseek4_shape(8, 4, 2)
        }
        .write(&Vocab::cut(&tokenizer, 320).unwrap(), &path)
        .unwrap();
        path
    }

    /// The target's features its NextN block enters: the normed state, or the streams
    /// its last block leaves.
    fn features(self, path: &Path, seq: &[u32]) -> Vec<Vec<f32>> {
        match self {
            Target::Qwen35 => common::target_features(path, seq, &[], true),
            Target::Deepseek4 => {
                let last = Dsv4Shape::default().n_layer - 1;
                common::target_features(path, seq, &[last], false)
            }
        }
    }
}

fn ids(v: &serde_json::Value) -> Vec<u32> {
    common::ids(v)
}

#[test]
fn qwen35_drafts_equal_llama_cpp_s_on_the_same_file() {
    drafts_equal_llama_cpp_s(Target::Qwen35);
}

#[test]
fn deepseek4_drafts_from_its_streams_equal_llama_cpp_s_on_the_same_file() {
    drafts_equal_llama_cpp_s(Target::Deepseek4);
}

fn drafts_equal_llama_cpp_s(target: Target) {
    let dir = tempfile::tempdir().unwrap();
    let path = target.write(dir.path());
    let golden = target.golden();
    let mut seq = ids(&golden["prompt_tokens"]);
    seq.extend(ids(&golden["answer_tokens"]));
    let states = target.features(&path, &seq);
    let pool = engine::Threads::new(2);
    let nextn = Model::load_stage(&path, Part::Nextn).unwrap();
    let mut mtp = HiddenDrafter::nextn(nextn, common::f32_context(), 1, pool).unwrap();
    for (pos, s) in states.iter().enumerate() {
        mtp.observe_state(0, pos, s);
    }
    common::drafts_equal_golden(&mut mtp, &golden, &seq, TIE, true, common::Asked::AsDrafted);
}

/// An MTP sidecar (llama.cpp's `mtp-*.gguf`: the model's metadata and its NextN block
/// alone) beside a model without NextN blocks drafts what the whole file's block drafts:
/// llama.cpp's drafts, its embeddings, merge and head taken from the model.
#[test]
fn an_mtp_sidecar_drafts_as_the_model_s_own_block() {
    let dir = tempfile::tempdir().unwrap();
    let whole = Target::Deepseek4.write(dir.path());
    let file = gguf::GgufFile::open(&whole).unwrap();
    let n_layer = Dsv4Shape::default().n_layer;
    let nextn = format!("blk.{n_layer}.");
    let part = |path: &Path, trunk: bool| {
        let mut w = gguf::GgufWriter::new();
        for (k, v) in file.header.metadata.iter() {
            let value = match k {
                "deepseek4.nextn_predict_layers" if trunk => gguf::Value::U32(0),
                "deepseek4.block_count" if trunk => gguf::Value::U32(n_layer as u32),
                _ => v.clone(),
            };
            w.metadata(k, value);
        }
        for t in &file.header.tensors {
            if t.name.starts_with(&nextn) != trunk {
                w.tensor(&t.name, &t.dims, t.ggml_type, file.tensor_bytes(t).to_vec());
            }
        }
        w.write(path).unwrap();
    };
    let (trunk, sidecar) = (
        dir.path().join("trunk.gguf"),
        dir.path().join("mtp-trunk.gguf"),
    );
    part(&trunk, true);
    part(&sidecar, false);
    let target = Model::load(&trunk).unwrap();
    assert!(
        Model::load_stage(&trunk, Part::Nextn).is_err(),
        "the trunk has no NextN block"
    );
    let nextn = Model::load_nextn_sidecar(&sidecar, gguf::LoadMode::Mmap, &target).unwrap();
    let golden = Target::Deepseek4.golden();
    let mut seq = ids(&golden["prompt_tokens"]);
    seq.extend(ids(&golden["answer_tokens"]));
    let states = Target::Deepseek4.features(&trunk, &seq);
    let pool = engine::Threads::new(2);
    let mut mtp = HiddenDrafter::nextn(nextn, common::f32_context(), 1, pool).unwrap();
    for (pos, s) in states.iter().enumerate() {
        mtp.observe_state(0, pos, s);
    }
    common::drafts_equal_golden(&mut mtp, &golden, &seq, TIE, true, common::Asked::AsDrafted);
}

/// One request of `prompt` (its end token ends it) drafting with the NextN block at a
/// fixed depth of 3, every draft verified (no step budget): its tokens and summary.
fn drafted_alone(path: &Path, prompt: &[u32]) -> (Vec<u32>, engine::Summary) {
    let model = Model::load(path).unwrap();
    let tok = Tokenizer::from_gguf(&model.file.header.metadata).unwrap();
    let spec = SpecConfig {
        n_max: 3,
        policy: PolicyKind::Fixed,
        ..SpecConfig::default()
    };
    let nextn = Model::load_stage(path, Part::Nextn).unwrap();
    let cfg = EngineConfig {
        step_budget: engine::StepBudget::Off,
        ..config(1, engine::DeviceKind::Cpu)
    };
    let spec = Some(Speculation::mtp(nextn, spec));
    let handle = engine::start(model, Arc::new(tok), cfg, spec, None).unwrap();
    let mut req = common::request(prompt.to_vec(), 256, None);
    req.ignore_eos = false;
    let mut events = handle.submit(req).unwrap().1;
    let mut tokens = Vec::new();
    loop {
        match events.blocking_recv().expect("engine answers") {
            Event::Delta { tokens: t, .. } => tokens.extend(t),
            Event::Done(s) => return (tokens, s),
            Event::Progress(_) => {}
            other => panic!("request failed: {other:?}"),
        }
    }
}

/// The drafts llama-server verified and accepted over its answer (each call's first
/// candidates against the answer's next tokens): the step after a rejection drafts again
/// in both, the state kept before the draft rows.
#[test]
fn qwen35_s_answer_drafts_and_accepts_as_llama_server_s() {
    drafts_and_accepts_as_llama_server(Target::Qwen35);
}

#[test]
fn deepseek4_s_answer_drafts_and_accepts_as_llama_server_s() {
    drafts_and_accepts_as_llama_server(Target::Deepseek4);
}

fn drafts_and_accepts_as_llama_server(target: Target) {
    let dir = tempfile::tempdir().unwrap();
    let path = target.write(dir.path());
    let golden = target.golden();
    let prompt = ids(&golden["prompt_tokens"]);
    let answer = ids(&golden["answer_tokens"]);
    let seq: Vec<u32> = prompt.iter().chain(&answer).copied().collect();
    let (verified, accepted) = common::golden_verified_accepted(&golden, &seq);
    let (tokens, summary) = drafted_alone(&path, &prompt);
    assert_eq!(tokens, answer);
    assert_eq!(
        (summary.draft_n, summary.draft_n_accepted),
        (verified, accepted),
        "drafts verified and accepted"
    );
}

fn config(n_parallel: usize, device: engine::DeviceKind) -> EngineConfig {
    EngineConfig {
        n_ctx: 4096,
        n_parallel,
        kv_unified: true,
        n_batch: 64,
        n_ubatch: 32,
        n_threads: 2,
        kv_type: GgmlType::F32,
        queue_limit: 64,
        device,
        step_budget: engine::StepBudget::AUTO,
        swa_full: false,
        ctx_checkpoints: 8,
        cache_ram_mib: 0,
        cache_dir: None,
    }
}

/// Each prompt's `n` tokens and its verified drafts, 8 users at once.
fn run(
    path: &Path,
    prompts: &[Vec<u32>],
    spec: Option<Speculation>,
    (device, n): (engine::DeviceKind, usize),
) -> Vec<(Vec<u32>, usize)> {
    let model = Model::load(path).unwrap();
    let tok = Tokenizer::from_gguf(&model.file.header.metadata).unwrap();
    let handle = engine::start(model, Arc::new(tok), config(8, device), spec, None).unwrap();
    common::run_all(&handle, prompts, n)
        .into_iter()
        .map(|(tokens, s)| (tokens, s.draft_n))
        .collect()
}

#[test]
fn eight_users_drafting_with_the_nextn_block_get_the_plain_text() {
    for target in [Target::Qwen35, Target::Deepseek4] {
        eight_users_get_the_plain_text(target, (engine::DeviceKind::Cpu, 32));
    }
}

/// 16 tokens a user on lavapipe.
#[test]
fn eight_users_on_the_gpu_drafting_with_the_nextn_block_get_the_plain_text() {
    if gpu::adapter_for_tests() {
        for target in [Target::Qwen35, Target::Deepseek4] {
            eight_users_get_the_plain_text(target, (engine::DeviceKind::Gpu, 16));
        }
    }
}

fn eight_users_get_the_plain_text(target: Target, on: (engine::DeviceKind, usize)) {
    let dir = tempfile::tempdir().unwrap();
    let path = target.write_small(dir.path());
    let model = Model::load(&path).unwrap();
    let tok = Tokenizer::from_gguf(&model.file.header.metadata).unwrap();
    let text = "The quick brown fox jumps over the lazy dog while the river runs to the sea. ";
    let prompts: Vec<Vec<u32>> = (0..8)
        .map(|i| {
            tok.encode(&text.repeat(1 + i % 3)[i..], true, false)
                .unwrap()
        })
        .collect();
    let plain = run(&path, &prompts, None, on);
    let spec = SpecConfig {
        n_max: 3,
        policy: PolicyKind::Fixed,
        ..SpecConfig::default()
    };
    let nextn = Model::load_stage(&path, Part::Nextn).unwrap();
    let drafted = run(&path, &prompts, Some(Speculation::mtp(nextn, spec)), on);
    for (i, (p, d)) in plain.iter().zip(&drafted).enumerate() {
        assert_eq!(p.0, d.0, "{} prompt {i}", target.name());
    }
    assert!(
        drafted.iter().map(|d| d.1).sum::<usize>() > 0,
        "nothing was drafted"
    );
}
