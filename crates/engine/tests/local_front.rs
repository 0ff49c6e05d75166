//! A model split between two executors of one process (`-ngl`'s shape): the embeddings and
//! blocks `0..L` in a [`LocalFront`], blocks `L..n` and the head in the engine. With both
//! stages on the CPU the boundary states are the whole model's bits, so every answer is the
//! whole model's, alone or batched, with images too (their rows entered in the first stage,
//! seeing one another in both where the projector says so).

#[allow(dead_code)]
mod common;

use std::sync::Arc;

use common::{image_rows, model_path, pictured, MODELS};
use engine::{EngineConfig, Event, LocalFront, PromptImage};
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

/// Model `which` of [`MODELS`] answering `text` around the image rows of golden `emb`
/// (seeing one another where `bidirectional`), 8 greedy tokens and their log-probabilities,
/// two requests at once: whole, and split after block `at` (the first stage a
/// [`LocalFront`]), bit for bit.
fn pictured_answers(which: usize, text: [&str; 2], (emb, bidirectional): (&str, bool), at: usize) {
    let (_, file, name) = MODELS[which];
    let path = model_path(file, name);
    let whole = Model::load(&path).unwrap();
    let tok = Arc::new(Tokenizer::from_gguf(&whole.file.header.metadata).unwrap());
    let (n, values) = image_rows(emb);
    let (prompt, img_at) = pictured(&tok, text, n);
    let embeddings: Arc<[f32]> = values.into();
    let requests = || {
        (0..2).map(|i| {
            // The prompts differ after the image, so that the two are not one prefix.
            let mut p = prompt.clone();
            p.extend(tok.encode(&" ".repeat(i), false, false).unwrap());
            let mut req = common::request(p, 8, None);
            req.logprobs = Some(2);
            req.images = vec![PromptImage {
                at: img_at,
                n,
                embeddings: embeddings.clone(),
                bidirectional,
            }];
            req
        })
    };
    let cfg = EngineConfig {
        n_batch: 512,
        n_ubatch: 512,
        ..common::engine_config(2048, 2, true)
    };
    // Each token with its log-probability's bits: the stages compute the whole model's.
    let run = |handle: engine::EngineHandle| -> Vec<Vec<(u32, u32)>> {
        let streams: Vec<_> = requests().map(|r| handle.submit(r).unwrap().1).collect();
        streams
            .into_iter()
            .map(|mut events| {
                let mut got = Vec::new();
                loop {
                    match events.blocking_recv().expect("engine answers") {
                        Event::Delta { logprobs, .. } => {
                            got.extend(logprobs.iter().map(|l| (l.id, l.logprob.to_bits())))
                        }
                        Event::Done(_) => return got,
                        other => panic!("{other:?}"),
                    }
                }
            })
            .collect()
    };
    let want = run(engine::start(whole, tok.clone(), cfg, None, None).unwrap());
    let first = Model::load_stage(&path, Part::First(at)).unwrap();
    let last = Model::load_stage(&path, Part::Last(at)).unwrap();
    let front = LocalFront::new(first, cfg.context_config()).unwrap();
    let got = run(engine::start(last, tok.clone(), cfg, None, Some(Box::new(front))).unwrap());
    assert_eq!(got, want);
}

#[test]
fn images_in_a_model_split_between_two_local_stages_answer_as_in_the_whole_model() {
    pictured_answers(
        3,
        [
            "<start_of_turn>user\nHello! Tell me a story about a cat. <start_of_image>",
            "<end_of_image><end_of_turn>\n<start_of_turn>model\n",
        ],
        ("vision-gemma3.emb", true),
        9,
    );
    pictured_answers(
        0,
        [
            "<|im_start|>user\n",
            "Describe the image.<|im_end|>\n<|im_start|>assistant\n",
        ],
        ("vision-llava-112.emb", false),
        12,
    );
}
