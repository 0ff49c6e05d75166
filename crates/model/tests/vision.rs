//! Vision towers against llama.cpp's mtmd: synthetic towers (`tandem synth --mmproj`, the
//! shapes below: Gemma 3's for Gemma 3 270M, LLaVA 1.5's for SmolLM2-135M) encode
//! `fixtures/stripes-150x100.png`, and their embeddings are compared with those
//! llama-mtmd-cli dumped for the same file and image (`golden/vision-*.emb`, made by
//! `scripts/gen_vision_golden.sh`).

use std::path::Path;
use std::sync::Arc;

use device::encoder::EncoderDevice;
use device::reference::Reference;
use gguf::{GgmlType, GgufFile};
use kernels::cpu::Cpu;
use kernels::{Precision, ThreadPool};
use model::synthetic::mmproj::{MmprojShape, TowerKind};
use model::vision::{decode, Limits, Tower};

const IMAGE: &str = "tests/fixtures/stripes-150x100.png";

/// The towers the golden files were made with: `tandem synth --mmproj gemma-3-270m
/// --image-size 224 --type TY` (640 wide, as Gemma 3 270M) and `tandem synth --mmproj
/// smollm2-135m --projector llava --image-size 224 --type TY` (576 wide).
fn shape(kind: TowerKind, ty: GgmlType) -> MmprojShape {
    let (n_embd_out, n_merge) = match kind {
        TowerKind::Gemma3 => (640, 4),
        TowerKind::Llava => (576, 1),
    };
    MmprojShape {
        kind,
        image_size: 224,
        n_merge,
        ty,
        ..MmprojShape::gemma3(n_embd_out)
    }
}

/// llama-mtmd-cli's dump: `[i32 n_tokens][i32 n_embd][f32 …]`.
fn golden(name: &str) -> (usize, usize, Vec<f32>) {
    let bytes = std::fs::read(Path::new("tests/golden").join(name)).unwrap();
    let word = |i: usize| i32::from_le_bytes(bytes[4 * i..4 * i + 4].try_into().unwrap());
    let (n, e) = (word(0) as usize, word(1) as usize);
    let values = bytes[8..]
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
        .collect::<Vec<_>>();
    assert_eq!(values.len(), n * e);
    (n, e, values)
}

fn encode(kind: TowerKind, ty: GgmlType, dev: &mut dyn EncoderDevice) -> Vec<f32> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tower.gguf");
    shape(kind, ty).write(&path).unwrap();
    let file = Arc::new(GgufFile::open(&path).unwrap());
    let tower = Tower::load(file, dev).unwrap();
    let img = decode(&std::fs::read(IMAGE).unwrap(), &Limits::default()).unwrap();
    let pixels = tower.params.pixels(&img);
    tower.encode(dev, &pixels)
}

/// `‖a - b‖ / ‖b‖`.
fn norm_error(a: &[f32], b: &[f32]) -> f64 {
    assert_eq!(a.len(), b.len());
    let d: f64 = a
        .iter()
        .zip(b)
        .map(|(&x, &y)| (x as f64 - y as f64).powi(2))
        .sum();
    let n: f64 = b.iter().map(|&y| (y as f64).powi(2)).sum();
    (d / n).sqrt()
}

fn cpu() -> Cpu {
    Cpu::new(Arc::new(ThreadPool::new(2)), Precision::Int8)
}

fn matches_llama_mtmd(kind: TowerKind, name: &str, n_tokens: usize, n_embd: usize) {
    for ty in [GgmlType::F32, GgmlType::F16] {
        let file = format!("vision-{name}-{}.emb", ty.to_string().to_lowercase());
        let (n, e, want) = golden(&file);
        assert_eq!((n, e), (n_tokens, n_embd));
        let got = encode(kind, ty, &mut cpu());
        let err = norm_error(&got, &want);
        eprintln!("{name} {ty}: relative error {err:.2e}");
        assert!(
            err < 1e-3,
            "{name} {ty}: embeddings off by {err:.2e} of their norm"
        );
    }
}

#[test]
fn gemma3_tower_embeddings_match_llama_mtmd() {
    matches_llama_mtmd(TowerKind::Gemma3, "gemma3", 16, 640);
}

#[test]
fn llava_tower_embeddings_match_llama_mtmd() {
    matches_llama_mtmd(TowerKind::Llava, "llava", 256, 576);
}

#[test]
fn the_cpu_towers_agree_with_the_reference() {
    for kind in [TowerKind::Gemma3, TowerKind::Llava] {
        let got = encode(kind, GgmlType::F32, &mut cpu());
        let want = encode(kind, GgmlType::F32, &mut Reference::new());
        let err = norm_error(&got, &want);
        assert!(err < 1e-5, "{kind:?}: CPU against the reference: {err:.2e}");
    }
}

/// Both towers on the GPU (lavapipe in CI), f16 and f32 weights: f32 sums against the
/// reference's f64.
#[test]
fn the_gpu_towers_agree_with_the_reference() {
    if !gpu::adapter_for_tests() {
        return;
    }
    for kind in [TowerKind::Gemma3, TowerKind::Llava] {
        for ty in [GgmlType::F32, GgmlType::F16] {
            let mut g = gpu::Gpu::open(gpu::Choice::Any).unwrap();
            let got = encode(kind, ty, &mut g);
            let want = encode(kind, ty, &mut Reference::new());
            let err = norm_error(&got, &want);
            assert!(
                err < 1e-5,
                "{kind:?} {ty}: GPU against the reference: {err:.2e}"
            );
        }
    }
}
