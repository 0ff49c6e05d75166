//! LoRA adapters in the engine on SmolLM2-135M with a random rank-8 adapter: requests with
//! different scales share steps, each row with its own scale, and each gets the tokens it
//! gets alone with the adapter at that scale (their common prompt is not shared between
//! scales).

#[allow(dead_code)]
mod common;

use std::sync::Arc;

use common::{model_path, MODELS};
use engine::{ContextConfig, Executor};
use model::Model;
use text::Tokenizer;

fn load(adapter: &std::path::Path, scale: f32) -> Model {
    let (_, file, name) = MODELS[0];
    let mut model = Model::load(model_path(file, name)).unwrap();
    model.add_adapter(adapter, scale).unwrap();
    model
}

#[test]
fn requests_with_different_scales_share_steps_and_keep_their_tokens() {
    let dir = tempfile::tempdir().unwrap();
    let adapter = dir.path().join("adapter.gguf");
    let (_, file, name) = MODELS[0];
    let base = gguf::GgufFile::open(model_path(file, name)).unwrap();
    model::synthetic::lora::write_adapter(&base, 8, 16.0, 3, &adapter).unwrap();
    let model = load(&adapter, 1.0);
    let tok = Arc::new(Tokenizer::from_gguf(&model.file.header.metadata).unwrap());
    // Three KV blocks: requests running at once would share them but for their scales.
    let text = "The three laws of thermodynamics describe energy, entropy and absolute zero. ";
    let prompt = tok.encode(&text.repeat(4), true, false).unwrap();
    assert!(prompt.len() > 3 * kv::BLOCK_SIZE);
    let scales = [0.0, 0.2, 0.6, 1.0];
    let n = 24;
    let alone: Vec<Vec<u32>> = scales
        .iter()
        .map(|&s| {
            let cfg = ContextConfig {
                n_ctx: 256,
                n_ubatch: 32,
                n_threads: 2,
                ..ContextConfig::default()
            };
            let mut exec = Executor::new(load(&adapter, s), cfg).unwrap();
            common::greedy_alone(&mut exec, &prompt, n)
        })
        .collect();
    for pair in alone.windows(2) {
        assert_ne!(pair[0], pair[1], "each scale changes the answer");
    }
    let handle =
        engine::start(model, tok, common::engine_config(1024, 4, true), None, None).unwrap();
    let streams: Vec<_> = scales
        .iter()
        .map(|&s| {
            let mut req = common::request(prompt.clone(), n, None);
            req.lora = Some(vec![s]);
            handle.submit(req).unwrap().1
        })
        .collect();
    for (stream, (want, s)) in streams.into_iter().zip(alone.iter().zip(scales)) {
        let (got, _) = common::collect(stream);
        assert_eq!(&got, want, "scale {s}");
    }
    let (got, _) = common::collect(
        handle
            .submit(common::request(prompt.clone(), n, None))
            .unwrap()
            .1,
    );
    assert_eq!(
        got, alone[3],
        "a request without scales takes the adapter's own"
    );
}
