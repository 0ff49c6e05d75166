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

/// f32 activations and KV cache, so that the only differences are f32 against f64
/// arithmetic (or one device's f32 sums against another's); the 8-bit activation path is
/// checked against its scalar twin in kernels.
fn f32_config(device: engine::DeviceKind) -> ContextConfig {
    ContextConfig {
        n_ctx: 1024,
        kv_type: gguf::GgmlType::F32,
        precision: device::Precision::F32,
        device,
        ..Default::default()
    }
}

/// Model `index` of [`MODELS`] on `device` against its reference: every case, or the first
/// `cases`.
fn check(index: usize, device: engine::DeviceKind) {
    check_cases(index, device, usize::MAX)
}

fn check_cases(index: usize, device: engine::DeviceKind, cases: usize) {
    let (stem, file, name) = MODELS[index];
    let path = format!(
        "{}/tests/golden/{stem}.reference.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let reference: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let model = Model::load(model_path(file, name)).unwrap();
    let mut ctx = Executor::new(model, f32_config(device)).unwrap();
    let mut worst = 0f64;
    for case in reference["cases"].as_array().unwrap().iter().take(cases) {
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

/// Slow tier: qwen2 is checked on the 0.5B (`qwen2_0_5b_matches_reference`).
#[test]
#[ignore = "slow tier: scripts/test --slow"]
fn qwen2_1_5b_matches_reference() {
    check(2, engine::DeviceKind::Cpu);
}

/// Gemma 3, with a fourth case longer than its sliding window.
#[test]
fn gemma3_270m_matches_reference() {
    check(3, engine::DeviceKind::Cpu);
}

/// SmolLM2 on the wgpu backend (lavapipe in CI): f32 activations and sums too. Its first
/// case (58 rows; lavapipe reads ~2 a second); every case in the slow tier's
/// `smollm2_on_the_gpu_matches_reference_in_every_case`.
#[test]
fn smollm2_on_the_gpu_matches_reference() {
    if gpu::adapter_for_tests() {
        check_cases(0, engine::DeviceKind::Gpu, 1);
    }
}

/// Slow tier: all three cases (CI's `smollm2_on_the_gpu_matches_reference` reads the first).
#[test]
#[ignore = "slow tier: scripts/test --slow"]
fn smollm2_on_the_gpu_matches_reference_in_every_case() {
    if gpu::adapter_for_tests() {
        check(0, engine::DeviceKind::Gpu);
    }
}

/// Gemma 3 on the wgpu backend: head_dim 256, one KV head for four, sliding windows.
/// Slow tier: ~3 minutes on lavapipe; the GPU's windowed attention is checked op by op
/// (`gpu` crate's `attention_over_several_parts_and_a_window_across_them`), Gemma 3 whole on
/// the CPU (`gemma3_270m_matches_reference`), a whole model on the GPU with SmolLM2.
#[test]
#[ignore = "slow tier: scripts/test --slow"]
fn gemma3_on_the_gpu_matches_reference() {
    if gpu::adapter_for_tests() {
        check(3, engine::DeviceKind::Gpu);
    }
}

/// Largest logit gap between the CPU's greedy token and the GPU's at which the two may part:
/// both sum in f32 in different orders (logits differ by ~1e-5 on SmolLM2).
const NEAR_TIE: f32 = 1e-3;

/// 16 greedy tokens of SmolLM2 on the GPU are the CPU's (f32 activations on both), parting
/// only where the CPU's two candidates are within [`NEAR_TIE`].
#[test]
fn smollm2_greedy_on_the_gpu_is_the_cpus() {
    if !gpu::adapter_for_tests() {
        return;
    }
    let (_, file, name) = MODELS[0];
    let greedy = |device| {
        let model = Model::load(model_path(file, name)).unwrap();
        let mut ctx = Executor::new(model, f32_config(device)).unwrap();
        let mut seq = kv::SeqKv::default();
        // "The capital of France is" in SmolLM2's vocabulary.
        let mut input = vec![504u32, 3575, 282, 4649, 314];
        let (mut tokens, mut logits) = (Vec::new(), Vec::new());
        for _ in 0..16 {
            let mut last = Vec::new();
            ctx.eval(&mut seq, &input, Outputs::Last, &mut |_, l| {
                last = l.to_vec()
            })
            .unwrap();
            let best = (0..last.len())
                .max_by(|&a, &b| last[a].total_cmp(&last[b]).then(b.cmp(&a)))
                .unwrap();
            tokens.push(best as u32);
            logits.push(last);
            input = vec![best as u32];
        }
        (tokens, logits)
    };
    let (cpu, cpu_logits) = greedy(engine::DeviceKind::Cpu);
    let (gpu, _) = greedy(engine::DeviceKind::Gpu);
    if let Some(i) = (0..16).find(|&i| cpu[i] != gpu[i]) {
        let l = &cpu_logits[i];
        let gap = l[cpu[i] as usize] - l[gpu[i] as usize];
        assert!(
            gap < NEAR_TIE,
            "token {i}: the CPU takes {} and the GPU {}, {gap} apart in the CPU's logits",
            cpu[i],
            gpu[i]
        );
    }
    eprintln!("greedy tokens, CPU {cpu:?}, GPU {gpu:?}");
}
