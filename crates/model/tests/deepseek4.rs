//! A deepseek4 file whose metadata or hash table no converter writes is refused at load
//! with one line naming the key or tensor, before anything runs.

use gguf::{GgufFile, GgufWriter, Value, ValueType};
use model::synthetic::deepseek4::Dsv4Shape;
use model::synthetic::Vocab;
use model::{Model, Part};

/// A change to the bytes of the named tensor.
type Patch<'a> = (&'a str, &'a dyn Fn(&mut [u8]));

/// A small deepseek4 (placeholder vocabulary of 64 tokens) written to `dir`, rewritten
/// with `keys` set (`None`: removed) and `patch` applied to the named tensor's bytes.
fn load_with(keys: &[(&str, Option<Value>)], patch: Option<Patch<'_>>) -> String {
    load_part(0, Part::Whole, keys, patch)
}

/// [`load_with`] of a model with `nextn` NextN blocks, loading `part`.
fn load_part(
    nextn: usize,
    part: Part,
    keys: &[(&str, Option<Value>)],
    patch: Option<Patch<'_>>,
) -> String {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().join("base.gguf");
    let shape = Dsv4Shape {
        n_embd: 64,
        n_layer: 3,
        n_head: 4,
        head_dim: 32,
        n_rot: 8,
        q_lora_rank: 32,
        o_lora_rank: 16,
        compress_ratios: vec![4, 128, 0],
        indexer_head_dim: 64,
        nextn,
        ..Default::default()
    };
    shape.write(&Vocab::placeholder(64), &base).unwrap();
    let file = GgufFile::open(&base).unwrap();
    let mut w = GgufWriter::new();
    for (k, v) in file.header.metadata.iter() {
        if !keys.iter().any(|(key, _)| *key == k) {
            w.metadata(k, v.clone());
        }
    }
    for (k, v) in keys {
        if let Some(v) = v {
            w.metadata(k, v.clone());
        }
    }
    for t in &file.header.tensors {
        let mut bytes = file.tensor_bytes(t).to_vec();
        if let Some((name, f)) = &patch {
            if *name == t.name {
                f(&mut bytes);
            }
        }
        w.tensor(&t.name, &t.dims, t.ggml_type, bytes);
    }
    let path = dir.path().join("hostile.gguf");
    w.write(&path).unwrap();
    match Model::load_stage(&path, part) {
        Ok(_) => "loaded".into(),
        Err(e) => e.to_string(),
    }
}

fn u32s(v: &[u32]) -> Value {
    Value::Array(ValueType::U32, v.iter().map(|&x| Value::U32(x)).collect())
}

#[test]
fn the_small_model_loads() {
    assert_eq!(load_with(&[], None), "loaded");
}

#[test]
fn hostile_metadata_is_one_line_naming_the_key() {
    let cases: [(&str, Option<Value>, &str); 6] = [
        (
            "deepseek4.attention.compress_ratios",
            Some(u32s(&[4, 128])),
            "2 ratios for 3 blocks",
        ),
        (
            "deepseek4.attention.compress_ratios",
            Some(u32s(&[4, 64, 0])),
            "64 (0, 4 or 128)",
        ),
        (
            "deepseek4.attention.indexer.top_k",
            Some(Value::U32(0)),
            "must be positive",
        ),
        (
            "deepseek4.hyper_connection.count",
            Some(Value::U32(0)),
            "must be positive",
        ),
        (
            "deepseek4.hash_layer_count",
            Some(Value::U32(9)),
            "9 of 3 blocks",
        ),
        (
            "deepseek4.attention.output_group_count",
            Some(Value::U32(3)),
            "does not divide",
        ),
    ];
    for (key, value, problem) in cases {
        let e = load_with(&[(key, value)], None);
        assert!(e.contains(key) && e.contains(problem), "{key}: {e}");
        assert!(!e.contains('\n'), "{key}: {e}");
    }
    let e = load_with(&[("deepseek4.hyper_connection.count", None)], None);
    assert!(e.contains("deepseek4.hyper_connection.count"), "{e}");
}

#[test]
fn an_expert_id_past_the_experts_in_the_hash_table_is_refused() {
    let far: &dyn Fn(&mut [u8]) = &|b| b[8..12].copy_from_slice(&1000i32.to_le_bytes());
    let e = load_with(&[], Some(("blk.0.ffn_gate_tid2eid.weight", far)));
    assert!(
        e.contains("blk.0.ffn_gate_tid2eid.weight") && e.contains("expert 1000 of 16"),
        "{e}"
    );
    let negative: &dyn Fn(&mut [u8]) = &|b| b[..4].copy_from_slice(&(-1i32).to_le_bytes());
    let e = load_with(&[], Some(("blk.1.ffn_gate_tid2eid.weight", negative)));
    assert!(
        e.contains("blk.1.ffn_gate_tid2eid.weight") && e.contains("expert -1"),
        "{e}"
    );
}

#[test]
fn a_nextn_block_loads_uncompressed_and_is_refused_compressed() {
    assert_eq!(load_part(1, Part::Nextn, &[], None), "loaded");
    let ratios = "deepseek4.attention.compress_ratios";
    let e = load_part(
        1,
        Part::Nextn,
        &[(ratios, Some(u32s(&[4, 128, 0, 4])))],
        None,
    );
    assert!(
        e.contains(ratios) && e.contains("multi-token-prediction block 3 is compressed at 4"),
        "{e}"
    );
    let e = load_part(1, Part::Whole, &[(ratios, Some(u32s(&[4, 128, 0])))], None);
    assert!(e.contains("3 ratios for 4 blocks"), "{e}");
}
