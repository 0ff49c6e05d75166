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

fn check(index: usize, device: engine::DeviceKind) {
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
        device,
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
    eprintln!(
        "{name} on {}: largest log-probability difference from the reference {worst:.5}",
        device.name()
    );
}

#[test]
fn smollm2_matches_reference() {
    check(0, engine::DeviceKind::Cpu);
}

#[test]
fn qwen2_0_5b_matches_reference() {
    check(1, engine::DeviceKind::Cpu);
}

#[test]
fn qwen2_1_5b_matches_reference() {
    check(2, engine::DeviceKind::Cpu);
}

/// Gemma 3, with a fourth case longer than its sliding window.
#[test]
fn gemma3_270m_matches_reference() {
    check(3, engine::DeviceKind::Cpu);
}

/// SmolLM2 on the wgpu backend (lavapipe in CI): f32 activations and sums too.
#[test]
fn smollm2_on_the_gpu_matches_reference() {
    if gpu::adapter_for_tests() {
        check(0, engine::DeviceKind::Gpu);
    }
}
