//! `tandem synth --arch deepseek4`: the keys and tensors llama.cpp's DeepSeek-V4 loader
//! reads, each block's tensors as its compression ratio has them, the hash routing, and
//! the shapes refused.

use gguf::{GgmlType, GgufFile};

mod common;
use common::{ok, tandem};

const N_VOCAB: usize = 300;

fn synth(dir: &tempfile::TempDir, extra: &[&str]) -> GgufFile {
    let path = dir.path().join("dsv4.gguf");
    let path = path.to_str().unwrap();
    let vocab = N_VOCAB.to_string();
    let mut args = vec![
        "synth",
        "-o",
        path,
        "--arch",
        "deepseek4",
        "--placeholder-vocab",
        &vocab,
    ];
    args.extend(extra);
    ok(&args);
    GgufFile::open(path).unwrap()
}

fn dims(f: &GgufFile, name: &str) -> (Vec<u64>, GgmlType) {
    let (info, _) = f.tensor(name).unwrap();
    (info.dims.clone(), info.ggml_type)
}

#[test]
fn default_shape_has_every_feature() {
    let dir = tempfile::tempdir().unwrap();
    let f = synth(&dir, &[]);
    let md = &f.header.metadata;
    assert_eq!(f.header.architecture().unwrap(), "deepseek4");
    let u = |k: &str| md.u32(&format!("deepseek4.{k}")).unwrap();
    assert_eq!(u("embedding_length"), 256);
    assert_eq!(u("block_count"), 7);
    assert_eq!(u("nextn_predict_layers"), 1);
    assert_eq!(u("attention.head_count_kv"), 1);
    assert_eq!(u("attention.key_length"), 64);
    assert_eq!(u("attention.value_length"), 64);
    assert_eq!(u("rope.dimension_count"), 16);
    assert_eq!(u("expert_gating_func"), 4);
    assert_eq!(u("hyper_connection.count"), 4);
    assert_eq!(u("hash_layer_count"), 2);
    let ratios = md.i64_array("deepseek4.attention.compress_ratios").unwrap();
    assert_eq!(ratios, [4, 128, 4, 0, 4, 128, 0]);
    let clamps = md.f32_array("deepseek4.swiglu_clamp_shexp").unwrap();
    assert_eq!(clamps, [10.0; 7]);
    assert_eq!(
        md.opt_bool("deepseek4.expert_weights_norm").unwrap(),
        Some(true)
    );

    assert_eq!(
        dims(&f, "token_embd.weight"),
        (vec![256, 300], GgmlType::Q8_0)
    );
    assert_eq!(
        dims(&f, "output_hc_fn.weight"),
        (vec![1024, 4], GgmlType::F32)
    );
    assert_eq!(
        dims(&f, "blk.0.attn_q_b.weight"),
        (vec![64, 512], GgmlType::Q8_0)
    );
    assert_eq!(dims(&f, "blk.0.attn_output_a.weight").0, [256, 64]);
    assert_eq!(dims(&f, "blk.0.hc_attn_fn.weight").0, [1024, 24]);
    assert_eq!(dims(&f, "blk.0.attn_compressor_ape.weight").0, [128, 4]);
    assert_eq!(dims(&f, "blk.0.indexer.attn_q_b.weight").0, [64, 2048]);
    assert_eq!(dims(&f, "blk.1.attn_compressor_ape.weight").0, [64, 128]);
    assert_eq!(dims(&f, "blk.6.nextn.eh_proj.weight").0, [512, 256]);
    assert_eq!(dims(&f, "blk.6.exp_probs_b.bias").0, [16]);
    let has = |name: &str| f.header.tensors.iter().any(|t| t.name == name);
    assert!(
        !has("blk.6.attn_compressor_kv.weight"),
        "the NextN block compresses nothing"
    );
    assert!(f.tensor("blk.1.indexer.proj.weight").is_err());
    assert!(f.tensor("blk.3.attn_compressor_kv.weight").is_err());
    assert_eq!(dims(&f, "blk.5.ffn_down_exps.weight").0, [128, 256, 16]);
    assert_eq!(dims(&f, "blk.5.ffn_down_shexp.weight").0, [128, 256]);

    for il in 0..6 {
        let hashed = f
            .tensor(&format!("blk.{il}.ffn_gate_tid2eid.weight"))
            .is_ok();
        let biased = f.tensor(&format!("blk.{il}.exp_probs_b.bias")).is_ok();
        assert_eq!((hashed, biased), (il < 2, il >= 2), "block {il}");
    }
    let (info, bytes) = f.tensor("blk.1.ffn_gate_tid2eid.weight").unwrap();
    assert_eq!(
        (info.dims.as_slice(), info.ggml_type),
        (&[4, 300][..], GgmlType::I32)
    );
    let ids: Vec<i32> = bytes
        .chunks_exact(4)
        .map(|b| i32::from_le_bytes(b.try_into().unwrap()))
        .collect();
    for token in ids.chunks_exact(4) {
        assert!(token.iter().all(|&e| (0..16).contains(&e)), "{token:?}");
        let mut sorted = token.to_vec();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted.len(), 4, "{token:?}");
    }
}

#[test]
fn flags_shape_the_model() {
    let dir = tempfile::tempdir().unwrap();
    let f = synth(
        &dir,
        &[
            "--n-layer",
            "3",
            "--dsv4-ratios",
            "0,128,4",
            "--dsv4-hash-layers",
            "1",
            "--dsv4-window",
            "32",
            "--experts",
            "8",
            "--experts-used",
            "2",
            "--type",
            "f32",
            "--nextn",
            "0",
        ],
    );
    let md = &f.header.metadata;
    let ratios = md.i64_array("deepseek4.attention.compress_ratios").unwrap();
    assert_eq!(ratios, [0, 128, 4]);
    assert_eq!(md.u32("deepseek4.nextn_predict_layers").unwrap(), 0);
    assert_eq!(md.u32("deepseek4.attention.sliding_window").unwrap(), 32);
    assert_eq!(dims(&f, "blk.0.ffn_gate_tid2eid.weight").0, [2, 300]);
    assert!(f.tensor("blk.1.exp_probs_b.bias").is_ok());
    assert_eq!(
        dims(&f, "blk.2.attn_q_a.weight"),
        (vec![256, 64], GgmlType::F32)
    );
}

#[test]
fn bad_shapes_are_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("bad.gguf");
    let out = out.to_str().unwrap();
    let cases: &[(&[&str], &str)] = &[
        (&["--dsv4-ratios", "4,2,4,0,4,128"], "compression ratio 2"),
        (
            &["--dsv4-ratios", "4,128"],
            "2 compression ratios for 6 blocks",
        ),
        (&["--n-head", "5"], "output groups"),
        (&["--dsv4-rope-dim", "15"], "RoPE over 15 dims"),
        (&["--dsv4-indexer-dim", "96"], "not a multiple of 64"),
        (&["--dsv4-hash-layers", "7"], "7 hash-routed blocks of 6"),
        (&["--dsv4-top-k", "0"], "indexer_top_k is 0"),
        (&["--type", "q4_k"], "not whole blocks of Q4_K"),
        (&["--n-head-kv", "2"], "--n-head-kv"),
    ];
    for (extra, message) in cases {
        let mut args = vec![
            "synth",
            "-o",
            out,
            "--arch",
            "deepseek4",
            "--placeholder-vocab",
            "64",
        ];
        args.extend(*extra);
        let (success, stderr) = tandem(&args);
        assert!(!success && stderr.contains(message), "{extra:?}: {stderr}");
    }
    let (success, stderr) = tandem(&[
        "synth",
        "-o",
        out,
        "--arch",
        "qwen3",
        "--experts",
        "0",
        "--placeholder-vocab",
        "64",
        "--dsv4-window",
        "8",
    ]);
    assert!(!success && stderr.contains("--dsv4-*"), "{stderr}");
}

/// `--arch dflash --backbone deepseek4`: a DSpark drafter whose stages are deepseek4 blocks
/// under `dflash.*` keys (no compressor, indexer or hash keys), with the streams' merge; the
/// flags that would compress or hash-route its stages are refused by name.
#[test]
fn a_dspark_drafter_over_deepseek4_stages() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("dspark.gguf");
    let path = path.to_str().unwrap();
    let base = [
        "synth",
        "-o",
        path,
        "--arch",
        "dflash",
        "--backbone",
        "deepseek4",
        "--n-layer",
        "2",
        "--dspark-rank",
        "16",
        "--placeholder-vocab",
        "64",
    ];
    ok(&base);
    let f = GgufFile::open(path).unwrap();
    let md = &f.header.metadata;
    assert_eq!(f.header.architecture().unwrap(), "dflash");
    assert_eq!(md.u32("dflash.hyper_connection.count").unwrap(), 4);
    assert_eq!(md.u32("dflash.block_count").unwrap(), 2);
    assert_eq!(md.u32("dflash.attention.sliding_window").unwrap(), 16);
    for absent in [
        "dflash.attention.indexer.top_k",
        "dflash.hash_layer_count",
        "dflash.nextn_predict_layers",
        "deepseek4.block_count",
    ] {
        assert!(md.get(absent).is_none(), "{absent}");
    }
    for present in [
        "blk.1.attn_kv.weight",
        "blk.1.hc_ffn_fn.weight",
        "blk.1.exp_probs_b.bias",
        "output_hc_fn.weight",
        "fc.weight",
        "markov_w1.weight",
    ] {
        assert!(f.tensor(present).is_ok(), "{present}");
    }
    assert!(f.tensor("blk.0.attn_compressor_kv.weight").is_err());
    assert!(f.tensor("blk.0.ffn_gate_tid2eid.weight").is_err());
    for flag in ["--dsv4-ratios", "--dsv4-hash-layers"] {
        let mut args = base.to_vec();
        args.extend([flag, "1"]);
        let (success, stderr) = tandem(&args);
        assert!(!success && stderr.contains(flag), "{flag}: {stderr}");
    }
}
