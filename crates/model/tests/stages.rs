//! A model loaded in stages (the first `L` blocks with the embeddings, the rest with the
//! output head) computes what the whole model computes, bit for bit, with each stage's KV
//! pool holding its own blocks; each stage holds only its own weights.

mod common;

use common::{reference, run_stages, run_with, same_bits, FIXTURES};
use device::Precision;
use gguf::GgmlType;
use model::{Model, Part};

fn load(file: &str, part: Part) -> Model {
    Model::load_stage(format!("{FIXTURES}{file}"), part).unwrap()
}

#[test]
fn stages_give_the_whole_models_bits() {
    let files: Vec<String> = ["llama-tiny.gguf", "qwen2-tiny.gguf", "qwen3-tiny.gguf"]
        .iter()
        .map(|f| f.to_string())
        .chain(
            reference("moe-reference.json")
                .iter()
                .map(|c| c["file"].as_str().unwrap().to_string()),
        )
        .collect();
    let a: Vec<u32> = vec![1, 5, 9, 2, 33, 61, 7, 7, 40, 12];
    let b: Vec<u32> = vec![3, 3, 8, 50, 21, 4, 17];
    let interleaved: Vec<(usize, u32)> = (0..a.len())
        .flat_map(|i| [a.get(i).map(|&t| (0, t)), b.get(i).map(|&t| (1, t))])
        .flatten()
        .collect();
    let batches: Vec<Vec<(usize, u32)>> = interleaved.chunks(4).map(|c| c.to_vec()).collect();
    for file in &files {
        let whole = load(file, Part::Whole);
        let n = whole.hparams.n_layer;
        for precision in [Precision::Int8, Precision::F32] {
            let want = run_with(&whole, &batches, 2, 2, GgmlType::F16, precision);
            for split in 1..n {
                let first = load(file, Part::First(split));
                let last = load(file, Part::Last(split));
                let got = run_stages(&[&first, &last], &batches, 2, 2, GgmlType::F16, precision);
                assert!(
                    same_bits(&got, &want),
                    "{file} split at {split}, {precision:?}"
                );
                let bytes = |m: &Model| m.weight_bytes(&kernels::cpu::matrix_bytes);
                assert_eq!(
                    bytes(&first) + bytes(&last),
                    bytes(&whole),
                    "{file}: the stages hold the whole model's weights between them"
                );
                assert!(first.output_matrix().is_none() && last.token_embd().is_none());
            }
        }
    }
}

#[test]
fn a_stage_without_a_part_says_so() {
    let file = "qwen3-tiny.gguf";
    let last = load(file, Part::Last(1));
    let mut dev = device::reference::Reference::new();
    let w = last.upload(&mut dev, &|_, _| {}).unwrap();
    let hidden = device::Device::alloc(&mut dev, last.hparams.n_embd).unwrap();
    let s = model::Scratch::new(&mut dev, &last.hparams, &last.scratch_widths(), 1).unwrap();
    let err = last
        .embed(&mut dev, &w, &s, &[1], hidden)
        .unwrap_err()
        .to_string();
    assert!(err.contains("does not hold the embeddings"), "{err}");
    let bad = Model::load_stage(format!("{FIXTURES}{file}"), Part::First(3));
    let err = bad.err().expect("3 blocks of 2").to_string();
    assert!(err.contains("blocks 0..3 of a model of 2 blocks"), "{err}");
}

#[test]
fn a_device_lacking_an_op_or_a_weight_type_refuses_the_model_naming_it() {
    use device::reference::Reference;
    use device::Op;
    let moe = load("qwen3moe-moe-k3.gguf", Part::Whole);
    let mut dev = Reference::lacking(&[Op::Moe], &[]);
    let err = moe.upload(&mut dev, &|_, _| {}).err().unwrap().to_string();
    assert!(err.contains("cannot run the Moe op"), "{err}");
    let dense = load("llama-tiny.gguf", Part::Whole);
    let ty = dense.token_embd().unwrap().ty;
    let mut dev = Reference::lacking(&[], &[ty]);
    let err = dense
        .upload(&mut dev, &|_, _| {})
        .err()
        .unwrap()
        .to_string();
    let named = format!("cannot compute with tensor 'token_embd.weight' of type {ty}");
    assert!(err.contains(&named), "{err}");
    assert!(err.contains("reference"), "the device is named: {err}");
}
