//! The quantized KV cache types llama-server takes beyond q8_0 (q4_0, q4_1, iq4_nl, q5_0,
//! q5_1) against llama.cpp: a synthetic qwen2 model (f32 weights) read with keys and values
//! stored in each type, as llama-perplexity reads it with `-ctk T -ctv T` (golden
//! log-probabilities from scripts/gen_kv_golden.sh), on the CPU and the reference. The same
//! model read with an f16 cache is far from every golden: each test sees its type's
//! rounding. The wgpu backend refuses these types, naming the one given.

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
