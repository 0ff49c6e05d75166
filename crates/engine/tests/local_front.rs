//! A model split between two executors of one process (`-ngl`'s shape): the embeddings and
//! blocks `0..L` in a [`LocalFront`], blocks `L..n` and the head in the engine. With both
//! stages on the CPU the boundary states are the whole model's bits, so every answer is the
//! whole model's, alone or batched.

#[allow(dead_code)]
mod common;

use std::sync::Arc;

use common::{model_path, MODELS};
use engine::{EngineConfig, Event, LocalFront};
use gguf::GgmlType;
use model::{Model, Part};
use text::Tokenizer;

const PROMPTS: [&str; 4] = [
    "The capital of France is",
    "def fibonacci(n):",
    "Once upon a time, in a small village,",
    "SELECT name FROM users WHERE",
];

fn answers(handle: &engine::EngineHandle, prompts: &[Vec<u32>]) -> Vec<Vec<u32>> {
    let streams: Vec<_> = prompts
        .iter()
        .map(|p| {
            handle
                .submit(common::request(p.clone(), 24, None))
                .unwrap()
                .1
        })
        .collect();
    streams
        .into_iter()
        .map(|mut events| {
            let mut tokens = Vec::new();
            loop {
                match events.blocking_recv().expect("engine answers") {
                    Event::Delta { tokens: t, .. } => tokens.extend(t),
                    Event::Done(_) => return tokens,
                    other => panic!("{other:?}"),
                }
            }
        })
        .collect()
}

#[test]
fn a_model_split_between_two_local_stages_answers_as_the_whole_model() {
    let (_, file, name) = MODELS[0];
    let path = model_path(file, name);
    let whole = Model::load(&path).unwrap();
    let tok = Arc::new(Tokenizer::from_gguf(&whole.file.header.metadata).unwrap());
    let prompts: Vec<Vec<u32>> = PROMPTS
        .iter()
        .map(|p| tok.encode(p, true, false).unwrap())
        .collect();
    let cfg = EngineConfig {
        n_ctx: 2048,
        n_parallel: 4,
        kv_unified: true,
        n_batch: 64,
        n_ubatch: 16,
        n_threads: 2,
        kv_type: GgmlType::F16,
        queue_limit: 64,
        device: engine::DeviceKind::Cpu,
        step_budget: engine::StepBudget::AUTO,
        swa_full: false,
        ctx_checkpoints: 8,
        cache_ram_mib: 0,
        cache_dir: None,
    };
    let handle = engine::start(whole, tok.clone(), cfg, None, None).unwrap();
    let want = answers(&handle, &prompts);
    drop(handle);
    let at = 12;
    let first = Model::load_stage(&path, Part::First(at)).unwrap();
    let last = Model::load_stage(&path, Part::Last(at)).unwrap();
    let front = LocalFront::new(first, cfg.context_config()).unwrap();
    let handle = engine::start(last, tok, cfg, None, Some(Box::new(front))).unwrap();
    assert_eq!(answers(&handle, &prompts[..1])[0], want[0], "alone");
    assert_eq!(answers(&handle, &prompts), want, "four together");
}
