//! `tandem quantize`: tiny models re-encoded in several types load back in tandem, an
//! importance matrix in either of llama-imatrix's formats gives the same file, and bad
//! requests end with one line naming what is wrong.

use std::path::{Path, PathBuf};

use gguf::{GgmlType, GgufFile, GgufWriter, Value};

mod common;
use common::{ok, tandem};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("../model/tests/fixtures/{name}.gguf"))
}

fn type_of(f: &GgufFile, name: &str) -> GgmlType {
    f.header.tensor(name).unwrap().ggml_type
}

#[test]
fn fixtures_quantize_to_each_type_and_load_back() {
    let dir = tempfile::tempdir().unwrap();
    let input = fixture("qwen2-tiny");
    let input = input.to_str().unwrap();
    // Rows of 64 (attention, ffn_up/gate) and 96 (ffn_down): the 256-element types and
    // Q2_0 (64) on 96 fall back, and say so.
    // IQ4_NL's attn_v (4 query heads per KV head) is llama.cpp's Q5_K, which falls back.
    for (ty, attn_q, ffn_down, file_type, falls_back) in [
        ("Q8_0", GgmlType::Q8_0, GgmlType::Q8_0, 7, false),
        ("IQ4_NL", GgmlType::IQ4_NL, GgmlType::IQ4_NL, 25, true),
        ("IQ4_XS", GgmlType::IQ4_NL, GgmlType::IQ4_NL, 30, true),
        ("Q2_0", GgmlType::Q2_0, GgmlType::Q4_0, 41, true),
        ("TQ2_0", GgmlType::Q4_0, GgmlType::Q4_0, 37, true),
        ("MXFP4", GgmlType::Q8_0, GgmlType::Q8_0, 38, false),
        ("F16", GgmlType::F16, GgmlType::F16, 1, false),
    ] {
        let out = dir.path().join(format!("{ty}.gguf"));
        let out = out.to_str().unwrap();
        let log = ok(&["quantize", input, out, "--type", ty, "--allow-requantize"]);
        let f = GgufFile::open(out).unwrap();
        assert_eq!(type_of(&f, "blk.0.attn_q.weight"), attn_q, "{ty}");
        assert_eq!(type_of(&f, "blk.1.ffn_down.weight"), ffn_down, "{ty}");
        assert_eq!(type_of(&f, "blk.0.attn_norm.weight"), GgmlType::F32, "{ty}");
        assert_eq!(type_of(&f, "blk.0.attn_q.bias"), GgmlType::F32, "{ty}");
        let md = &f.header.metadata;
        assert_eq!(md.u32("general.file_type").unwrap(), file_type, "{ty}");
        let src = GgufFile::open(input).unwrap();
        for (k, v) in src.header.metadata.iter() {
            if k != "general.file_type" {
                assert_eq!(md.get(k), Some(v), "{ty}: {k}");
            }
        }
        assert_eq!(f.header.tensors.len(), src.header.tensors.len());
        assert_eq!(
            log.contains("is not whole blocks of"),
            falls_back,
            "{ty}: {log}"
        );
        assert_eq!(
            log.contains("fell back to another type"),
            falls_back,
            "{ty}: {log}"
        );
        ok(&["info", "-m", out, "--device", "cpu"]);
    }
}

/// A model whose matrices are whole 256-element blocks: `tandem synth` in F16.
fn wide_model(dir: &Path) -> PathBuf {
    let path = dir.join("wide-f16.gguf");
    ok(&[
        "synth",
        "-o",
        path.to_str().unwrap(),
        "--arch",
        "llama",
        "--n-embd",
        "256",
        "--n-layer",
        "2",
        "--n-head",
        "4",
        "--n-head-kv",
        "2",
        "--n-ff",
        "512",
        "--experts",
        "0",
        "--type",
        "f16",
        "--placeholder-vocab",
        "64",
    ]);
    path
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// Importances for every matrix of `model` but `skip`, in both formats: the GGUF file's
/// `in_sum2` is `count` times the legacy file's mean (with `ncall` 1). The means are
/// powers of two, so that `in_sum2 / count` gives them back exactly: the searching
/// quantizers (Q6_K's, for the output head) can turn on a last bit of an importance.
fn imatrix_files(model: &Path, dir: &Path, skip: &str) -> (PathBuf, PathBuf) {
    let f = GgufFile::open(model).unwrap();
    let mut g = GgufWriter::new();
    g.metadata("imatrix.datasets", Value::strings(&["calib.txt"]))
        .metadata("imatrix.chunk_count", Value::U32(3))
        .metadata("imatrix.chunk_size", Value::U32(512));
    let mut entries = Vec::new();
    for t in &f.header.tensors {
        if t.dims.len() < 2 || t.name == skip || t.name.contains("token_embd") {
            continue;
        }
        let k = t.dims[0] as usize;
        let mean: Vec<f32> = (0..k)
            .map(|j| 2f32.powi(((j * 7919) % 97 / 10) as i32))
            .collect();
        let count = 1536.0;
        let sums: Vec<f32> = mean.iter().map(|m| m * count).collect();
        g.tensor(
            &format!("{}.in_sum2", t.name),
            &[k as u64, 1],
            GgmlType::F32,
            f32_bytes(&sums),
        );
        g.tensor(
            &format!("{}.counts", t.name),
            &[1, 1],
            GgmlType::F32,
            f32_bytes(&[count]),
        );
        entries.push((t.name.clone(), mean));
    }
    let gguf_path = dir.join("imatrix.gguf");
    g.write(&gguf_path).unwrap();
    let mut dat = (entries.len() as i32).to_le_bytes().to_vec();
    for (name, mean) in &entries {
        dat.extend((name.len() as i32).to_le_bytes());
        dat.extend(name.as_bytes());
        dat.extend(1i32.to_le_bytes());
        dat.extend((mean.len() as i32).to_le_bytes());
        dat.extend(f32_bytes(mean));
    }
    dat.extend(3i32.to_le_bytes());
    dat.extend(9i32.to_le_bytes());
    dat.extend(b"calib.txt");
    let dat_path = dir.join("imatrix.dat");
    std::fs::write(&dat_path, dat).unwrap();
    (gguf_path, dat_path)
}

#[test]
fn an_importance_matrix_in_either_format_gives_the_same_weights() {
    let dir = tempfile::tempdir().unwrap();
    let model = wide_model(dir.path());
    let skip = "blk.1.attn_output.weight";
    let (im_gguf, im_dat) = imatrix_files(&model, dir.path(), skip);
    let run = |name: &str, imatrix: Option<&Path>| {
        let out = dir.path().join(name);
        let mut args = vec![
            "quantize".to_string(),
            model.to_str().unwrap().into(),
            out.to_str().unwrap().into(),
            "--type".into(),
            "IQ4_XS".into(),
            "-t".into(),
            "2".into(),
            "--allow-requantize".into(),
        ];
        if let Some(m) = imatrix {
            args.extend(["--imatrix".into(), m.to_str().unwrap().into()]);
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        (ok(&args), GgufFile::open(&out).unwrap())
    };
    let (log, a) = run("a.gguf", Some(&im_gguf));
    let (_, b) = run("b.gguf", Some(&im_dat));
    let (_, plain) = run("plain.gguf", None);
    let skipped = log.lines().find(|l| l.contains(skip)).unwrap();
    assert!(skipped.contains("no importance matrix entry"), "{log}");
    assert_eq!(type_of(&a, "blk.0.attn_q.weight"), GgmlType::IQ4_XS);
    assert_eq!(type_of(&a, "output.weight"), GgmlType::Q6_K);
    let md = &a.header.metadata;
    assert_eq!(md.u32("general.file_type").unwrap(), 30);
    assert_eq!(md.str("quantize.imatrix.dataset").unwrap(), "calib.txt");
    assert_eq!(md.u32("quantize.imatrix.chunks_count").unwrap(), 3);
    for t in &a.header.tensors {
        let (_, other) = b.tensor(&t.name).unwrap();
        assert_eq!(a.tensor_bytes(t), other, "{}: the formats disagree", t.name);
    }
    let differ = |name: &str| a.tensor(name).unwrap().1 != plain.tensor(name).unwrap().1;
    assert!(
        differ("blk.0.ffn_down.weight"),
        "the importances changed nothing"
    );
    assert!(
        !differ(skip),
        "a matrix without an entry is quantized without importances"
    );
    for out in ["a.gguf", "b.gguf", "plain.gguf"] {
        ok(&[
            "info",
            "-m",
            dir.path().join(out).to_str().unwrap(),
            "--device",
            "cpu",
        ]);
    }
}

/// `tandem quantize ARGS` fails with one line naming `needle` and leaves no output.
fn one_line_error(args: &[&str], needle: &str) {
    let (ok, stderr) = tandem(args);
    assert!(!ok, "{args:?} succeeded");
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(
        stderr.trim_end().lines().count(),
        1,
        "not one line: {stderr}"
    );
    assert!(
        stderr.starts_with("error: ") && stderr.contains(needle),
        "'{needle}' not in: {stderr}"
    );
}

#[test]
fn bad_requests_name_what_is_wrong() {
    let dir = tempfile::tempdir().unwrap();
    let input = fixture("qwen2-tiny");
    let input = input.to_str().unwrap();
    let out = dir.path().join("out.gguf");
    let out = out.to_str().unwrap();
    fn with<'a>(input: &'a str, out: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
        let mut a = vec!["quantize", input, out, "--allow-requantize"];
        a.extend_from_slice(extra);
        a
    }
    let q = |extra: &[&'static str]| with(input, out, extra);
    one_line_error(
        &q(&["--type", "Q9_9"]),
        "unknown type 'Q9_9' (tandem writes F32, F16",
    );
    one_line_error(
        &q(&["--type", "Q8_K"]),
        "tandem does not write Q8_K (it writes F32, F16",
    );
    one_line_error(
        &q(&["--type", "IQ1_M"]),
        "llama.cpp quantizes IQ1_M only with an importance matrix (--imatrix)",
    );
    one_line_error(
        &q(&["--type", "Q8_0", "--tensor-type", "attn_(v=q8_0"]),
        "--tensor-type 'attn_(v=q8_0': bad pattern",
    );
    one_line_error(
        &q(&["--type", "Q8_0", "--tensor-type", "attn_v=q8_k"]),
        "--tensor-type 'attn_v=q8_k': tandem does not write Q8_K",
    );
    one_line_error(
        &["quantize", input, out, "--type", "Q8_0"],
        "tensor 'blk.0.attn_k.weight' is already quantized (Q4_0); quantizing it again",
    );

    let mut g = GgufWriter::new();
    g.metadata("imatrix.datasets", Value::strings(&["x"]))
        .metadata("imatrix.chunk_size", Value::U32(512))
        .tensor(
            "blk.0.attn_q.weight.in_sum2",
            &[64, 1],
            GgmlType::F32,
            vec![0; 256],
        )
        .tensor(
            "blk.0.attn_q.weight.counts",
            &[1, 1],
            GgmlType::F32,
            vec![0; 4],
        );
    let no_chunks = dir.path().join("no-chunks.gguf");
    g.write(&no_chunks).unwrap();
    let no_chunks = no_chunks.to_str().unwrap();
    one_line_error(
        &with(input, out, &["--type", "IQ4_NL", "--imatrix", no_chunks]),
        "imatrix.chunk_count",
    );
    let dat = dir.path().join("truncated.dat");
    let mut bytes = 1i32.to_le_bytes().to_vec();
    bytes.extend(19i32.to_le_bytes());
    bytes.extend(b"blk.0.attn_q.weight");
    bytes.extend([1, 0, 0, 0, 64, 0, 0, 0, 0, 0]);
    std::fs::write(&dat, bytes).unwrap();
    one_line_error(
        &with(
            input,
            out,
            &["--type", "IQ4_NL", "--imatrix", dat.to_str().unwrap()],
        ),
        "entry 0 'blk.0.attn_q.weight': values",
    );
    let mut g = GgufWriter::new();
    g.metadata("imatrix.datasets", Value::strings(&["x"]))
        .metadata("imatrix.chunk_count", Value::U32(1))
        .metadata("imatrix.chunk_size", Value::U32(512))
        .tensor(
            "blk.0.attn_q.weight.in_sum2",
            &[32, 1],
            GgmlType::F32,
            vec![0; 128],
        )
        .tensor(
            "blk.0.attn_q.weight.counts",
            &[1, 1],
            GgmlType::F32,
            f32_bytes(&[1.0]),
        );
    let short = dir.path().join("short.gguf");
    g.write(&short).unwrap();
    one_line_error(
        &with(
            input,
            out,
            &["--type", "IQ4_NL", "--imatrix", short.to_str().unwrap()],
        ),
        "32 values for tensor 'blk.0.attn_q.weight', which needs 64",
    );
    assert!(!Path::new(out).exists(), "a failed run leaves no output");
    one_line_error(
        &["quantize", input, input, "--type", "Q8_0"],
        "is the input",
    );
}
