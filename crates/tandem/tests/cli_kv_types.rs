//! The quantized KV cache types llama-server takes beyond q8_0 (q4_0, q4_1, iq4_nl, q5_0,
//! q5_1) against llama.cpp: a synthetic qwen2 model (f32 weights) read with keys and values
//! stored in each type, as llama-perplexity reads it with `-ctk T -ctv T` (golden
//! log-probabilities from scripts/gen_kv_golden.sh), on the CPU and the reference. The same
//! model read with an f16 cache is far from every golden: each test sees its type's
//! rounding. The wgpu backend refuses these types, naming the one given.
//!
//! The same for a model whose heads are 64 wide, which llama.cpp stores rotated in a
//! quantized cache (`kv::Rotation`): q8_0 on every backend and q4_0 on the CPU and the
//! reference against llama-perplexity's reading (unrotated, tandem's KL divergence from
//! these goldens was 2.2e-5 for q8_0 and 5.4e-3 for q4_0).

use std::path::Path;

mod common;
use common::tandem;

const TYPES: &[&str] = &["q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1"];

/// Mean KL divergence from the golden of `golden_ty` and the share of positions with its
/// top token, read with a `kv` cache on `device`.
fn against_golden(model: &str, device: &str, golden_ty: &str, kv: &str) -> (f64, f64) {
    let golden = format!("kv-{golden_ty}-llamacpp.kld");
    common::against_golden(model, 128, device, &golden, &["--cache-type-k", kv])
}

/// [`common::SYNTH_QWEN2`] with heads 64 wide (2 heads, 1 KV head).
const SYNTH_QWEN2_HEADS_64: &[&str] = &[
    "--arch",
    "qwen2",
    "--experts",
    "0",
    "--n-embd",
    "128",
    "--n-layer",
    "2",
    "--n-head",
    "2",
    "--n-head-kv",
    "1",
    "--n-ff",
    "256",
    "--type",
    "f32",
    "--tokenizer",
    "smollm2-135m",
    "--vocab",
    "320",
    "--seed",
    "7",
];

#[test]
fn a_quantized_cache_of_heads_64_wide_is_rotated_as_llama_cpp_rotates_it() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("qwen2.gguf");
    let model = model.to_str().unwrap();
    let mut args = vec!["synth", "-o", model];
    args.extend(SYNTH_QWEN2_HEADS_64);
    common::ok(&args);
    let gpu = gpu::adapter_for_tests();
    for (ty, bound) in [("q8_0", 1e-5), ("q4_0", 1e-4)] {
        let on_gpu = gpu && ty == "q8_0";
        for device in ["cpu", "reference", "gpu"] {
            if device == "gpu" && !on_gpu {
                continue;
            }
            let (kld, top) = against_golden(model, device, &format!("rot-{ty}"), ty);
            assert!(kld <= bound, "{ty} on {device}: mean KL divergence {kld}");
            assert!(top >= 0.95, "{ty} on {device}: same top token at {top}");
        }
    }
}

#[test]
fn each_quantized_kv_type_reads_as_llama_cpp_reads_it() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("qwen2.gguf");
    let model = model.to_str().unwrap();
    common::synth_qwen2(model);
    for &ty in TYPES {
        for device in ["cpu", "reference"] {
            let (kld, top) = against_golden(model, device, ty, ty);
            assert!(kld <= 1e-4, "{ty} on {device}: mean KL divergence {kld}");
            assert!(top >= 0.95, "{ty} on {device}: same top token at {top}");
        }
        let (kld, _) = against_golden(model, "cpu", ty, "f16");
        assert!(
            kld >= 3e-4,
            "{ty}: {kld}: the golden does not tell the type from f16"
        );
    }
    if gpu::adapter_for_tests() {
        let prose = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/data/eval-prose.txt");
        let (fine, err) = tandem(&[
            "perplexity",
            "-m",
            model,
            "-c",
            "128",
            "--device",
            "gpu",
            "-ctk",
            "q4_0",
            "-f",
            prose.to_str().unwrap(),
        ]);
        assert!(!fine && err.contains("keep a Q4_0 KV cache"), "{err}");
    }
}
