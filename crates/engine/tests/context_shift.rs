//! Context shift on SmolLM2-135M and on a hybrid (qwen35 with random weights, whose
//! recurrent state cannot be cut back): an answer that fills its slot drops tokens after
//! `keep` and goes on with what a request whose prompt is the shifted tokens would
//! generate, while another request shares the steps.

#[allow(dead_code)]
mod common;

use std::path::Path;
use std::sync::Arc;

use common::{model_path, MODELS};
use engine::{ContextConfig, ContextShift, Executor, FinishReason};
use gguf::GgmlType;
use model::Model;
use text::Tokenizer;

const SLOT_CTX: usize = 64;

/// The greedy answer of `n` tokens to `prompt` with `shift`, each stretch between shifts
/// generated alone from the shifted tokens as a prompt.
fn shifted_reference(path: &Path, prompt: &[u32], n: usize, shift: ContextShift) -> Vec<u32> {
    let mut exec = Executor::new(
        Model::load(path).unwrap(),
        ContextConfig {
            n_ctx: SLOT_CTX,
            n_ubatch: 32,
            n_threads: 2,
            kv_type: GgmlType::F16,
            ..ContextConfig::default()
        },
    )
    .unwrap();
    let (mut tokens, mut out) = (prompt.to_vec(), Vec::new());
    while out.len() < n {
        let k = (SLOT_CTX - tokens.len()).min(n - out.len());
        let stretch = common::greedy_alone(&mut exec, &tokens, k);
        out.extend_from_slice(&stretch);
        tokens.extend_from_slice(&stretch);
        if tokens.len() >= SLOT_CTX {
            tokens.drain(shift.dropped(tokens.len(), SLOT_CTX).expect("room to drop"));
        }
    }
    out
}

#[test]
fn an_answer_past_its_slot_goes_on_from_the_shifted_tokens() {
    let (_, file, name) = MODELS[0];
    shifts_as_a_fresh_prompt(&model_path(file, name));
}

#[test]
fn a_hybrid_s_answer_past_its_slot_goes_on_from_the_shifted_tokens() {
    let dir = tempfile::tempdir().unwrap();
    shifts_as_a_fresh_prompt(&common::write_synthetic(dir.path(), "qwen35"));
}

fn shifts_as_a_fresh_prompt(path: &Path) {
    let model = Model::load(path).unwrap();
    let tok = Tokenizer::from_gguf(&model.file.header.metadata).unwrap();
    let prompt = tok
        .encode("The history of the printing press begins", true, false)
        .unwrap();
    let other = tok.encode("def fibonacci(n):", true, false).unwrap();
    let n = 3 * SLOT_CTX;
    let shifts = [
        ContextShift {
            keep: 4,
            discard: None,
        },
        ContextShift {
            keep: prompt.len(),
            discard: Some(5),
        },
    ];
    let want: Vec<Vec<u32>> = shifts
        .iter()
        .map(|&s| shifted_reference(path, &prompt, n, s))
        .collect();
    let handle = engine::start(
        model,
        Arc::new(tok),
        common::engine_config(2 * SLOT_CTX, 2, false),
        None,
        None,
    )
    .unwrap();
    for (shift, want) in shifts.into_iter().zip(&want) {
        let mut req = common::request(prompt.clone(), n, None);
        req.context_shift = Some(shift);
        let shifting = handle.submit(req).unwrap().1;
        let plain = handle
            .submit(common::request(other.clone(), n, None))
            .unwrap()
            .1;
        let (got, summary) = common::collect(shifting);
        assert_eq!(&got, want, "{shift:?}");
        assert!(summary.truncated);
        assert_eq!(summary.finish, FinishReason::MaxTokens);
        let (plain, summary) = common::collect(plain);
        assert_eq!(summary.finish, FinishReason::ContextFull);
        assert!(!summary.truncated);
        assert_eq!(plain.len(), SLOT_CTX - other.len());
    }
}
