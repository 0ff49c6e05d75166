//! Vision towers against llama.cpp's mtmd: a synthetic Gemma 3 tower (`tandem synth
//! --mmproj`, the shapes below) encodes `fixtures/stripes-150x100.png`, and its embeddings
//! are compared with those llama-mtmd-cli dumped for the same file and image
//! (`golden/vision-*.emb`, made by `scripts/gen_vision_golden.sh`).

use std::path::Path;
use std::sync::Arc;

use device::encoder::EncoderDevice;
use device::reference::Reference;
use gguf::{GgmlType, GgufFile};
use kernels::cpu::Cpu;
use kernels::{Precision, ThreadPool};
use model::synthetic::mmproj::MmprojShape;
use model::vision::{decode, Limits, Tower};

const IMAGE: &str = "tests/fixtures/stripes-150x100.png";

/// The tower the golden files were made with: `tandem synth --mmproj gemma-3-270m
/// --image-size 224 --type TY` (640 wide, as Gemma 3 270M).
fn shape(ty: GgmlType) -> MmprojShape {
    MmprojShape {
        image_size: 224,
        ty,
        ..MmprojShape::gemma3(640)
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

fn encode(ty: GgmlType, dev: &mut dyn EncoderDevice) -> Vec<f32> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tower.gguf");
    shape(ty).write(&path).unwrap();
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

#[test]
fn gemma3_tower_embeddings_match_llama_mtmd() {
    for (ty, name) in [
        (GgmlType::F32, "vision-gemma3-f32.emb"),
        (GgmlType::F16, "vision-gemma3-f16.emb"),
    ] {
        let (n, e, want) = golden(name);
        assert_eq!((n, e), (16, 640));
        let got = encode(ty, &mut cpu());
        let err = norm_error(&got, &want);
        eprintln!("{ty}: relative error {err:.2e}");
        assert!(
            err < 1e-3,
            "{ty}: embeddings off by {err:.2e} of their norm"
        );
    }
}

#[test]
fn the_cpu_tower_agrees_with_the_reference() {
    let got = encode(GgmlType::F32, &mut cpu());
    let want = encode(GgmlType::F32, &mut Reference::new());
    let err = norm_error(&got, &want);
    assert!(err < 1e-5, "CPU against the reference: {err:.2e}");
}
