//! Vision towers against llama.cpp's mtmd: synthetic towers (`tandem synth --mmproj`, the
//! shapes below: Gemma 3's for Gemma 3 270M, LLaVA 1.5's for SmolLM2-135M, Idefics3's for a
//! model of SmolLM2's width; LLaVA 1.6's tiles too) encode `fixtures/stripes-150x100.png`, and their embeddings
//! are compared with those llama-mtmd-cli dumped for the same file and image
//! (`golden/vision-*.emb`, every tile's in order, made by `scripts/gen_vision_golden.sh`).

use std::path::Path;
use std::sync::Arc;

use device::encoder::EncoderDevice;
use device::reference::Reference;
use device::Precision;
use gguf::{GgmlType, GgufFile};
use kernels::cpu::Cpu;
use kernels::ThreadPool;
use model::synthetic::mmproj::{MmprojShape, TowerKind};
use model::vision::{decode, Limits, Tower};

const IMAGE: &str = "tests/fixtures/stripes-150x100.png";

/// The towers the golden files were made with: `tandem synth --mmproj gemma-3-270m
/// --image-size 224 --type TY` (640 wide, as Gemma 3 270M), `tandem synth --mmproj
/// smollm2-135m --projector llava --image-size 224 --type TY` (576 wide) and `tandem synth
/// --mmproj TEXT --projector idefics3 --image-size 128 --image-merge 2
/// --image-longest-edge 256 --type TY` (576 wide; the image is 2 × 2 tiles and an overview).
fn shape(kind: TowerKind, ty: GgmlType) -> MmprojShape {
    let (n_embd_out, n_merge) = match kind {
        TowerKind::Gemma3 => (640, 4),
        TowerKind::Llava => (576, 1),
        TowerKind::Idefics3 => (576, 2),
    };
    let base = MmprojShape {
        kind,
        image_size: 224,
        n_merge,
        ty,
        ..MmprojShape::gemma3(n_embd_out)
    };
    match kind {
        TowerKind::Idefics3 => MmprojShape {
            image_size: 128,
            patch_size: 16,
            longest_edge: 256,
            ..base
        },
        TowerKind::Gemma3 | TowerKind::Llava => base,
    }
}

/// LLaVA 1.6's: `tandem synth --mmproj smollm2-135m --projector llava --image-size 112
/// --n-layer 3 --image-feature-layer 3 --image-grid-pinpoints 224,112,112,224,224,224 --type
/// TY`: the image fitted into 224 × 112, two tiles and an overview, read after all three
/// blocks (LLaVA 1.5 reads the second-to-last's).
fn llava16(ty: GgmlType) -> MmprojShape {
    MmprojShape {
        image_size: 112,
        n_layer: 3,
        feature_layer: Some(3),
        pinpoints: vec![(224, 112), (112, 224), (224, 224)],
        ..shape(TowerKind::Llava, ty)
    }
}

/// llama-mtmd-cli's dumps, one after another, each `[i32 n_tokens][i32 n_embd][f32 …]`:
/// the rows of all, and their width.
fn golden(name: &str) -> (usize, usize, Vec<f32>) {
    let bytes = std::fs::read(Path::new("tests/golden").join(name)).unwrap();
    let (mut rows, mut width, mut values) = (0, 0, Vec::new());
    let mut rest = &bytes[..];
    while !rest.is_empty() {
        let word = |i: usize| i32::from_le_bytes(rest[4 * i..4 * i + 4].try_into().unwrap());
        let (n, e) = (word(0) as usize, word(1) as usize);
        let body = &rest[8..8 + 4 * n * e];
        values.extend(
            body.chunks_exact(4)
                .map(|b| f32::from_le_bytes(b.try_into().unwrap())),
        );
        (rows, width, rest) = (rows + n, e, &rest[8 + 4 * n * e..]);
    }
    (rows, width, values)
}

fn encode(shape: &MmprojShape, dev: &mut dyn EncoderDevice) -> Vec<f32> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tower.gguf");
    shape.write(&path).unwrap();
    let file = Arc::new(GgufFile::open(&path).unwrap());
    let tower = Tower::load(file, dev).unwrap();
    let img = decode(&std::fs::read(IMAGE).unwrap(), &Limits::default()).unwrap();
    let tiles = tower.params.tiles(&img);
    tiles.iter().flat_map(|t| tower.encode(dev, t)).collect()
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

fn matches_llama_mtmd(
    shape: impl Fn(GgmlType) -> MmprojShape,
    name: &str,
    n_tokens: usize,
    n_embd: usize,
) {
    for ty in [GgmlType::F32, GgmlType::F16] {
        let file = format!("vision-{name}-{}.emb", ty.to_string().to_lowercase());
        let (n, e, want) = golden(&file);
        assert_eq!((n, e), (n_tokens, n_embd));
        let got = encode(&shape(ty), &mut cpu());
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
    matches_llama_mtmd(|ty| shape(TowerKind::Gemma3, ty), "gemma3", 16, 640);
}

#[test]
fn llava_tower_embeddings_match_llama_mtmd() {
    matches_llama_mtmd(|ty| shape(TowerKind::Llava, ty), "llava", 256, 576);
}

/// Two tiles and the overview, 64 embeddings each.
#[test]
fn llava16_tower_embeddings_match_llama_mtmd() {
    matches_llama_mtmd(llava16, "llava16", 3 * 64, 576);
}

/// Four tiles and the overview, 16 embeddings each.
#[test]
fn idefics3_tower_embeddings_match_llama_mtmd() {
    matches_llama_mtmd(|ty| shape(TowerKind::Idefics3, ty), "idefics3", 5 * 16, 576);
}

/// An Idefics3 tower of `longest_edge` (0: none in the file), images limited to `max_tokens`,
/// against llama-mtmd-cli's tiles in golden `name` (`rows` of them).
fn idefics3_case(longest_edge: usize, max_tokens: Option<usize>, name: &str, rows: usize) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tower.gguf");
    let shape = MmprojShape {
        longest_edge,
        ..shape(TowerKind::Idefics3, GgmlType::F32)
    };
    shape.write(&path).unwrap();
    let mut dev = cpu();
    let mut tower = Tower::load(Arc::new(GgufFile::open(&path).unwrap()), &mut dev).unwrap();
    if max_tokens.is_some() {
        assert!(tower.params.limit_tokens(None, max_tokens));
    }
    let img = decode(&std::fs::read(IMAGE).unwrap(), &Limits::default()).unwrap();
    let tiles = tower.params.tiles(&img);
    let got: Vec<f32> = tiles
        .iter()
        .flat_map(|t| tower.encode(&mut dev, t))
        .collect();
    let (n, e, want) = golden(name);
    assert_eq!((n, e), (rows, 576));
    let err = norm_error(&got, &want);
    assert!(
        err < 1e-3,
        "{name}: embeddings off by {err:.2e} of their norm"
    );
}

/// mtmd's LLaVA-UHD branch: `--image-max-tokens 48` (48 embeddings of 2 × 2 patches of 16
/// pixels) fits the image into 2 × 1 tiles (bicubic, black bands) and an overview; a file
/// without a longest edge rounds the image to one tile.
#[test]
fn idefics3_with_a_token_limit_or_no_longest_edge_matches_llama_mtmd() {
    idefics3_case(256, Some(48), "vision-idefics3-max48-f32.emb", 3 * 16);
    idefics3_case(0, None, "vision-idefics3-noedge-f32.emb", 2 * 16);
}

const KINDS: [TowerKind; 3] = [TowerKind::Gemma3, TowerKind::Llava, TowerKind::Idefics3];

#[test]
fn the_cpu_towers_agree_with_the_reference() {
    for kind in KINDS {
        let got = encode(&shape(kind, GgmlType::F32), &mut cpu());
        let want = encode(&shape(kind, GgmlType::F32), &mut Reference::new());
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
    for kind in KINDS {
        for ty in [GgmlType::F32, GgmlType::F16] {
            let mut g = gpu::Gpu::open(gpu::Choice::Any).unwrap();
            let got = encode(&shape(kind, ty), &mut g);
            let want = encode(&shape(kind, ty), &mut Reference::new());
            let err = norm_error(&got, &want);
            assert!(
                err < 1e-5,
                "{kind:?} {ty}: GPU against the reference: {err:.2e}"
            );
        }
    }
}
