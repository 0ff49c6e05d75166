//! The forward pass against an exact reference: scripts/ref_forward.py computes the same
//! models in numpy with float64 activations from gguf.quants-dequantized weights.

#[allow(dead_code)]
mod common;

use common::{ids, log_softmax, model_path, MODELS};
use engine::{ContextConfig, Executor, Outputs};
use model::Model;

/// Largest difference allowed between our log-probabilities (f32 arithmetic) and the
/// float64 reference.
const TOLERANCE: f64 = 1e-3;

fn check(index: usize) {
    let (stem, file, name) = MODELS[index];
    let path = format!(
        "{}/tests/golden/{stem}.reference.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let reference: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let model = Model::load(model_path(file, name)).unwrap();
    // f32 activations and KV cache, so that the only differences are f32 against f64
    // arithmetic; the 8-bit activation path is checked against its scalar twin in kernels.
    let config = ContextConfig {
        n_ctx: 1024,
        kv_type: gguf::GgmlType::F32,
        precision: kernels::Precision::F32,
        ..Default::default()
    };
    let mut ctx = Executor::new(model, config).unwrap();
    let mut worst = 0f64;
    for case in reference["cases"].as_array().unwrap() {
        let prompt = ids(&case["prompt_tokens"]);
        let forced = ids(&case["forced_tokens"]);
        let mut input = prompt.clone();
        input.extend_from_slice(&forced[..forced.len() - 1]);
        let mut rows = Vec::new();
        let mut seq = kv::SeqKv::default();
        ctx.eval(
            &mut seq,
            &input,
            Outputs::From(prompt.len() - 1),
            &mut |_, l| rows.push(log_softmax(l)),
        )
        .unwrap();
        ctx.release(&mut seq);
        for (pos, (lp, top5)) in rows
            .iter()
            .zip(case["top5"].as_array().unwrap())
            .enumerate()
        {
            for alt in top5.as_array().unwrap() {
                let (id, want) = (alt[0].as_u64().unwrap() as usize, alt[1].as_f64().unwrap());
                let diff = (lp[id] - want).abs();
                worst = worst.max(diff);
                assert!(
                    diff < TOLERANCE,
                    "{name} position {pos}: token {id} logprob {} vs reference {want}",
                    lp[id]
                );
            }
        }
    }
    eprintln!("{name}: largest log-probability difference from the reference {worst:.5}");
}

#[test]
fn smollm2_matches_reference() {
    check(0);
}

#[test]
fn qwen2_0_5b_matches_reference() {
    check(1);
}

#[test]
fn qwen2_1_5b_matches_reference() {
    check(2);
}

/// Gemma 3, with a fourth case longer than its sliding window.
#[test]
fn gemma3_270m_matches_reference() {
    check(3);
}
