//! `model::quant`: importance matrices in both of llama-imatrix's formats, written here
//! as it lays them out, and the type each tensor gets.

use gguf::{GgmlType, Gguf, GgufWriter, Metadata, TensorInfo, Value};
use model::quant::{
    parse_type, plan, Imatrix, ImatrixFormat, ImatrixSums, QuantSpec, Sums, TensorTypeOverride,
};

use GgmlType::*;

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// A GGUF importance matrix as llama-imatrix writes it: per entry `(name, sums of x²
/// [n_mat rows of n_per_row], counts [n_mat])`.
fn gguf_imatrix(entries: &[(&str, Vec<f32>, Vec<f32>)], skip_key: Option<&str>) -> Vec<u8> {
    let mut w = GgufWriter::new();
    w.metadata("general.type", Value::String("imatrix".into()));
    for (k, v) in [
        ("imatrix.datasets", Value::strings(&["calib.txt"])),
        ("imatrix.chunk_count", Value::U32(7)),
        ("imatrix.chunk_size", Value::U32(512)),
    ] {
        if skip_key != Some(k) {
            w.metadata(k, v);
        }
    }
    for (name, sums, counts) in entries {
        let n_mat = counts.len() as u64;
        w.tensor(
            &format!("{name}.in_sum2"),
            &[sums.len() as u64 / n_mat, n_mat],
            F32,
            f32_bytes(sums),
        );
        w.tensor(
            &format!("{name}.counts"),
            &[1, n_mat],
            F32,
            f32_bytes(counts),
        );
    }
    w.to_bytes()
}

/// A legacy `.dat` importance matrix as `save_imatrix_legacy` writes it: per entry
/// `(name, ncall, values = mean * ncall)`, then the chunk count and the dataset.
fn legacy_imatrix(entries: &[(&str, i32, Vec<f32>)]) -> Vec<u8> {
    let mut b = (entries.len() as i32).to_le_bytes().to_vec();
    for (name, ncall, values) in entries {
        b.extend((name.len() as i32).to_le_bytes());
        b.extend(name.as_bytes());
        b.extend(ncall.to_le_bytes());
        b.extend((values.len() as i32).to_le_bytes());
        b.extend(f32_bytes(values));
    }
    b.extend(7i32.to_le_bytes());
    b.extend(9i32.to_le_bytes());
    b.extend(b"calib.txt");
    b
}

#[test]
fn both_formats_give_the_mean_square_of_each_column() {
    let g = Imatrix::parse(&gguf_imatrix(
        &[
            ("blk.0.attn_q.weight", vec![2.0, 4.0, 6.0, 8.0], vec![2.0]),
            (
                "blk.0.ffn_up_exps.weight",
                vec![3.0, 6.0, 5.0, 5.0],
                vec![3.0, 0.0],
            ),
        ],
        None,
    ))
    .unwrap();
    assert_eq!(g.format, ImatrixFormat::Gguf);
    assert_eq!(g.get("blk.0.attn_q.weight").unwrap(), [1.0, 2.0, 3.0, 4.0]);
    assert_eq!(
        g.get("blk.0.ffn_up_exps.weight").unwrap(),
        [1.0, 2.0, 1.0, 1.0],
        "an expert no token reached gets 1s"
    );
    assert_eq!(
        (g.chunk_count, g.datasets.as_slice()),
        (7, &["calib.txt".to_string()][..])
    );

    let l = Imatrix::parse(&legacy_imatrix(&[
        ("blk.0.attn_q.weight", 3, vec![3.0, 6.0, 9.0, 12.0]),
        ("blk.0.attn_k.weight", 0, vec![0.5, 0.25]),
    ]))
    .unwrap();
    assert_eq!(l.format, ImatrixFormat::Legacy);
    assert_eq!(l.get("blk.0.attn_q.weight"), g.get("blk.0.attn_q.weight"));
    assert_eq!(
        l.get("blk.0.attn_k.weight").unwrap(),
        [0.5, 0.25],
        "ncall 0: as stored"
    );
    assert_eq!(
        (l.chunk_count, l.datasets.as_slice()),
        (7, &["calib.txt".to_string()][..])
    );
    assert!(l.get("output.weight").is_none());

    let mut bare = legacy_imatrix(&[("a.weight", 1, vec![1.0])]);
    bare.truncate(bare.len() - 17);
    let bare = Imatrix::parse(&bare).unwrap();
    assert_eq!(
        (bare.chunk_count, bare.datasets.len()),
        (0, 0),
        "the trailer is optional"
    );
}

#[test]
fn written_sums_are_the_file_llama_imatrix_writes() {
    let mut q = Sums::new(2, 1);
    q.add(0, &[1.0, 2.0, -1.0, 0.5]);
    assert_eq!(
        (q.in_sum2.as_slice(), q.counts.as_slice()),
        (&[2.0, 4.25][..], &[2][..])
    );
    let mut up = Sums::new(2, 2);
    up.add(1, &[3.0, -2.0]);
    up.add(1, &[1.0, 1.0]);
    let m = ImatrixSums {
        entries: [
            ("blk.0.ffn_up_exps.weight".to_string(), up),
            ("blk.0.attn_q.weight".to_string(), q),
        ]
        .into(),
        datasets: vec!["calib.txt".into()],
        chunk_count: 7,
        chunk_size: 512,
    };
    let bytes = m.to_gguf();
    assert_eq!(
        bytes,
        gguf_imatrix(
            &[
                ("blk.0.attn_q.weight", vec![2.0, 4.25], vec![2.0]),
                (
                    "blk.0.ffn_up_exps.weight",
                    vec![0.0, 0.0, 10.0, 5.0],
                    vec![0.0, 2.0]
                ),
            ],
            None
        ),
        "entries in name order, in_sum2 then counts"
    );
    let back = Imatrix::parse(&bytes).unwrap();
    assert_eq!(back.get("blk.0.attn_q.weight").unwrap(), [1.0, 2.125]);
    assert_eq!(
        back.get("blk.0.ffn_up_exps.weight").unwrap(),
        [1.0, 1.0, 5.0, 2.5]
    );
}

#[test]
fn a_malformed_importance_matrix_names_what_is_wrong() {
    let q = ("blk.0.attn_q.weight", vec![2.0, 4.0], vec![2.0]);
    let err = |bytes: Vec<u8>| Imatrix::parse(&bytes).unwrap_err();
    let e = err(gguf_imatrix(
        std::slice::from_ref(&q),
        Some("imatrix.chunk_count"),
    ));
    assert!(e.contains("imatrix.chunk_count"), "{e}");

    let mut w = GgufWriter::new();
    w.metadata("imatrix.datasets", Value::strings(&["x"]))
        .metadata("imatrix.chunk_count", Value::U32(1))
        .metadata("imatrix.chunk_size", Value::U32(1))
        .tensor(
            "blk.0.attn_q.weight.in_sum2",
            &[2, 1],
            F32,
            f32_bytes(&[1.0, 2.0]),
        );
    let e = err(w.to_bytes());
    assert!(e.contains("'blk.0.attn_q.weight.counts' is missing"), "{e}");

    let mut w = GgufWriter::new();
    w.metadata("imatrix.datasets", Value::strings(&["x"]))
        .metadata("imatrix.chunk_count", Value::U32(1))
        .metadata("imatrix.chunk_size", Value::U32(1))
        .tensor("t.in_sum2", &[2, 1], F16, vec![0; 4])
        .tensor("t.counts", &[1, 1], F32, f32_bytes(&[1.0]));
    let e = err(w.to_bytes());
    assert!(e.contains("'t.in_sum2' is F16, not F32"), "{e}");

    let mut w = GgufWriter::new();
    w.metadata("imatrix.datasets", Value::strings(&["x"]))
        .metadata("imatrix.chunk_count", Value::U32(1))
        .metadata("imatrix.chunk_size", Value::U32(1))
        .tensor("t.in_sum2", &[3, 1], F32, f32_bytes(&[1.0, 2.0, 3.0]))
        .tensor("t.counts", &[1, 2], F32, f32_bytes(&[1.0, 1.0]));
    let e = err(w.to_bytes());
    assert!(
        e.contains("'t.in_sum2' has 3 values, not a whole row for each of the 2"),
        "{e}"
    );

    let e = err(gguf_imatrix(&[("t", vec![1.0, f32::NAN], vec![1.0])], None));
    assert!(e.contains("'t': value 1 is NaN"), "{e}");

    let mut b = legacy_imatrix(&[("blk.0.attn_q.weight", 1, vec![1.0; 8])]);
    b.truncate(4 + 4 + 19 + 4 + 4 + 10);
    let e = err(b);
    assert!(e.contains("entry 0 'blk.0.attn_q.weight': values"), "{e}");

    let e = err(legacy_imatrix(&[("a", 1, vec![])]));
    assert!(e.contains("entry 0 'a': value count is 0"), "{e}");
    let e = err(vec![0, 0, 0, 0]);
    assert!(e.contains("entry count"), "{e}");

    let dir = std::env::temp_dir().join(format!("tandem-imatrix-{}", std::process::id()));
    let e = Imatrix::load(&dir.join("absent.dat"))
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("importance matrix ") && e.contains("absent.dat"),
        "{e}"
    );
}

/// A qwen2-shaped model's header: `n_embd` wide, 8 blocks, 14 query heads on 2 KV heads,
/// an output head of its own unless `tied`.
fn qwen2(n_embd: u64, n_ff: u64, ty: GgmlType, tied: bool) -> (Metadata, Vec<TensorInfo>) {
    let mut w = GgufWriter::new();
    w.metadata("general.architecture", Value::String("qwen2".into()))
        .metadata("qwen2.block_count", Value::U32(8))
        .metadata("qwen2.attention.head_count", Value::U32(14))
        .metadata("qwen2.attention.head_count_kv", Value::U32(2));
    let mut t = |name: &str, dims: &[u64], ty: GgmlType| {
        let n = ty.row_bytes(dims[0]).unwrap() * dims[1..].iter().product::<u64>();
        w.tensor(name, dims, ty, vec![0; n as usize]);
    };
    t("token_embd.weight", &[n_embd, 32], ty);
    t("output_norm.weight", &[n_embd], F32);
    if !tied {
        t("output.weight", &[n_embd, 32], ty);
    }
    for il in 0..8 {
        let b = |s: &str| format!("blk.{il}.{s}");
        t(&b("attn_norm.weight"), &[n_embd], F32);
        t(&b("attn_q.weight"), &[n_embd, n_embd], ty);
        t(&b("attn_v.weight"), &[n_embd, n_embd / 7], ty);
        t(&b("attn_v.bias"), &[n_embd / 7], F32);
        t(&b("ffn_down.weight"), &[n_ff, n_embd], ty);
        t(&b("ffn_up.weight"), &[n_embd, n_ff], ty);
    }
    let g = Gguf::parse(&w.to_bytes()).unwrap();
    (g.metadata, g.tensors)
}

fn spec(target: GgmlType) -> QuantSpec {
    QuantSpec {
        target,
        overrides: Vec::new(),
        pure: false,
        has_imatrix: false,
        allow_requantize: true,
    }
}

/// Each tensor's name and chosen type.
fn types(s: &QuantSpec, md: &Metadata, tensors: &[TensorInfo]) -> Vec<(String, GgmlType)> {
    let choices = plan(s, md, tensors).unwrap();
    tensors
        .iter()
        .zip(choices)
        .map(|(t, c)| (t.name.clone(), c.ty))
        .collect()
}

fn type_of(v: &[(String, GgmlType)], name: &str) -> GgmlType {
    v.iter().find(|t| t.0 == name).unwrap().1
}

#[test]
fn llama_cpps_choices_for_qwen2_0_5b_shapes() {
    let (md, tensors) = qwen2(896, 4864, F16, false);
    let mut s = spec(IQ4_XS);
    s.has_imatrix = true;
    let v = types(&s, &md, &tensors);
    assert_eq!(
        type_of(&v, "token_embd.weight"),
        IQ4_NL,
        "896 is not whole 256s"
    );
    assert_eq!(type_of(&v, "output.weight"), Q8_0);
    assert_eq!(type_of(&v, "output_norm.weight"), F32);
    assert_eq!(type_of(&v, "blk.0.attn_v.bias"), F32);
    assert_eq!(type_of(&v, "blk.3.attn_q.weight"), IQ4_NL);
    assert_eq!(
        type_of(&v, "blk.3.attn_v.weight"),
        Q5_1,
        "7 heads per KV head: Q5_K, then its fallback"
    );
    assert_eq!(type_of(&v, "blk.0.ffn_down.weight"), IQ4_XS);
    s.has_imatrix = false;
    let v = types(&s, &md, &tensors);
    assert_eq!(type_of(&v, "blk.0.ffn_down.weight"), Q5_K);
    assert_eq!(type_of(&v, "blk.1.ffn_down.weight"), IQ4_XS);

    let (md, tensors) = qwen2(1024, 2048, F16, true);
    let v = types(&spec(IQ4_NL), &md, &tensors);
    assert_eq!(
        type_of(&v, "token_embd.weight"),
        Q6_K,
        "tied: the output head's rule"
    );
    assert_eq!(type_of(&v, "blk.2.attn_v.weight"), Q5_K);
    let v = types(&spec(Q8_0), &md, &tensors);
    assert!(v
        .iter()
        .all(|(n, t)| *t == Q8_0 || n.ends_with("norm.weight") || n.ends_with("bias")));
    let v = types(&spec(Q4_K), &md, &tensors);
    let down: Vec<GgmlType> = (0..8)
        .map(|il| type_of(&v, &format!("blk.{il}.ffn_down.weight")))
        .collect();
    assert_eq!(
        down,
        [Q6_K, Q4_K, Q4_K, Q6_K, Q4_K, Q4_K, Q6_K, Q6_K],
        "use_more_bits"
    );
}

#[test]
fn llama_cpps_k_quant_mixtures() {
    let (md, tensors) = qwen2(1024, 2048, F16, false);
    let layers = |v: &[(String, GgmlType)], part: &str| -> Vec<GgmlType> {
        (0..8)
            .map(|il| type_of(v, &format!("blk.{il}.{part}")))
            .collect()
    };
    // Q3_K_M: V in Q5_K for the first two layers, Q4_K after; ffn_down in Q5_K for the
    // first sixteenth (none of 8 layers), Q4_K after.
    let v = types(&spec(Q3_K), &md, &tensors);
    assert_eq!(type_of(&v, "output.weight"), Q6_K);
    assert_eq!(type_of(&v, "token_embd.weight"), Q3_K);
    assert_eq!(type_of(&v, "blk.4.attn_q.weight"), Q3_K);
    assert_eq!(
        layers(&v, "attn_v.weight"),
        [Q5_K, Q5_K, Q4_K, Q4_K, Q4_K, Q4_K, Q4_K, Q4_K]
    );
    assert_eq!(layers(&v, "ffn_down.weight"), [Q4_K; 8]);
    assert_eq!(layers(&v, "ffn_up.weight"), [Q3_K; 8]);
    // Q2_K: 7 query heads per KV head puts V in Q4_K; ffn_down in Q3_K.
    let v = types(&spec(Q2_K), &md, &tensors);
    assert_eq!(layers(&v, "attn_v.weight"), [Q4_K; 8]);
    assert_eq!(layers(&v, "ffn_down.weight"), [Q3_K; 8]);
    assert_eq!(type_of(&v, "blk.0.attn_q.weight"), Q2_K);
    // Q5_K_M: V and ffn_down in Q6_K where use_more_bits picks the layer.
    let v = types(&spec(Q5_K), &md, &tensors);
    let picked = [Q6_K, Q5_K, Q5_K, Q6_K, Q5_K, Q5_K, Q6_K, Q6_K];
    assert_eq!(layers(&v, "attn_v.weight"), picked);
    assert_eq!(layers(&v, "ffn_down.weight"), picked);
    assert_eq!(
        parse_type("q3_k_m").unwrap(),
        Q3_K,
        "llama.cpp's names of the mixtures"
    );
}

#[test]
fn llama_cpps_iq_mixtures_and_their_importance_matrix() {
    let (md, tensors) = qwen2(1024, 2048, F16, false);
    for target in [IQ1_S, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS] {
        let e = plan(&spec(target), &md, &tensors).unwrap_err().to_string();
        assert!(
            e.contains("which llama.cpp quantizes only with an importance matrix: pass --imatrix"),
            "{target}: {e}"
        );
    }
    let mut s = spec(IQ2_XXS);
    s.has_imatrix = true;
    let v = types(&s, &md, &tensors);
    assert_eq!(type_of(&v, "output.weight"), Q5_K);
    assert_eq!(type_of(&v, "token_embd.weight"), Q2_K);
    assert_eq!(
        type_of(&v, "blk.3.attn_v.weight"),
        Q4_K,
        "7 query heads per KV head"
    );
    assert_eq!(
        type_of(&v, "blk.0.ffn_down.weight"),
        Q2_K,
        "the first eighth"
    );
    assert_eq!(type_of(&v, "blk.1.ffn_down.weight"), IQ2_XXS);
    assert_eq!(type_of(&v, "blk.1.attn_q.weight"), IQ2_XXS);
    s.target = IQ2_S;
    let v = types(&s, &md, &tensors);
    assert_eq!(type_of(&v, "token_embd.weight"), IQ3_S);
    assert_eq!(type_of(&v, "blk.0.ffn_down.weight"), IQ3_S);
    assert_eq!(type_of(&v, "blk.1.ffn_up.weight"), IQ2_S);
    s.target = IQ3_XXS;
    let v = types(&s, &md, &tensors);
    assert_eq!(type_of(&v, "output.weight"), Q5_K);
    assert_eq!(type_of(&v, "token_embd.weight"), IQ3_S);
    assert_eq!(type_of(&v, "blk.3.attn_q.weight"), IQ2_S);
    assert_eq!(type_of(&v, "blk.3.attn_v.weight"), Q4_K);
    assert_eq!(type_of(&v, "blk.3.ffn_down.weight"), IQ3_XXS);
    let v = types(&spec(IQ3_S), &md, &tensors);
    assert_eq!(type_of(&v, "output.weight"), Q6_K);
    assert_eq!(type_of(&v, "blk.3.attn_v.weight"), Q4_K);
    assert_eq!(type_of(&v, "blk.3.ffn_down.weight"), IQ3_S);
}

#[test]
fn overrides_pure_fallbacks_and_refusals() {
    let (md, tensors) = qwen2(896, 4864, Q8_0, false);
    let mut s = spec(Q4_0);
    s.overrides = vec![
        TensorTypeOverride::parse("ATTN_V=q8_0").unwrap(),
        TensorTypeOverride::parse(r"blk\.[0-3]\..*=IQ4_XS").unwrap(),
    ];
    let choices = plan(&s, &md, &tensors).unwrap();
    let find = |name: &str| {
        let i = tensors.iter().position(|t| t.name == name).unwrap();
        &choices[i]
    };
    let v = find("blk.1.attn_v.weight");
    assert_eq!(
        (v.ty, v.convert),
        (Q8_0, false),
        "the first match wins; same type: copied"
    );
    let q = find("blk.1.attn_q.weight");
    assert_eq!(q.ty, IQ4_NL);
    assert!(
        q.fell_back && q.why.join(";").contains("896"),
        "{:?}",
        q.why
    );
    assert_eq!(find("blk.1.ffn_down.weight").ty, IQ4_XS);
    assert_eq!(find("blk.5.attn_q.weight").ty, Q4_0);

    s.overrides.clear();
    s.pure = true;
    assert!(plan(&s, &md, &tensors)
        .unwrap()
        .iter()
        .zip(&tensors)
        .all(|(c, t)| c.ty == Q4_0 || t.dims.len() == 1));

    s.allow_requantize = false;
    let e = plan(&s, &md, &tensors).unwrap_err().to_string();
    assert!(
        e.contains("tensor 'output.weight' is already quantized (Q8_0)")
            && e.contains("--allow-requantize"),
        "{e}"
    );

    let (md, tensors) = qwen2(256, 512, Q8_K, false);
    let e = plan(&spec(Q4_0), &md, &tensors).unwrap_err().to_string();
    assert!(
        e.contains("'output.weight' is Q8_K, which tandem cannot read"),
        "{e}"
    );
}

#[test]
fn type_names_and_their_errors() {
    assert_eq!(parse_type("iq4_xs").unwrap(), IQ4_XS);
    assert_eq!(parse_type("Q4_K_M").unwrap(), Q4_K);
    let e = parse_type("Q9_9").unwrap_err().to_string();
    assert!(
        e.contains("unknown type 'Q9_9'") && e.contains("IQ4_NL"),
        "{e}"
    );
    let e = parse_type("q8_k").unwrap_err().to_string();
    assert!(
        e.contains("tandem does not write Q8_K (it writes F32, F16, BF16,"),
        "{e}"
    );
    let e = parse_type("IQ1_M").unwrap_err().to_string();
    assert!(
        e.contains("only with an importance matrix (--imatrix)"),
        "{e}"
    );
    for (arg, want) in [
        ("attn_v", "expected PATTERN=TYPE"),
        ("=q8_0", "the pattern is empty"),
        ("attn_v=", "the type is empty"),
        ("attn_[v=q8_0", "bad pattern"),
        ("attn_v=q8_k", "tandem does not write Q8_K"),
    ] {
        let e = TensorTypeOverride::parse(arg).unwrap_err().to_string();
        assert!(
            e.contains(&format!("--tensor-type '{arg}'")) && e.contains(want),
            "{e}"
        );
    }
}
