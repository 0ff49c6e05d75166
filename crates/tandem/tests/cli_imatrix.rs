//! `tandem imatrix`: on the real SmolLM2 model and on `tandem synth` mixtures, the file
//! it writes reads back, has an entry of the right length for every weight matrix of the
//! blocks, counts every token (an expert: the tokens routed to it), feeds `tandem
//! quantize`, and agrees with llama-imatrix's on an f32 mixture
//! (scripts/gen_imatrix_golden.py); a missing or short text is one line naming it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use gguf::{GgmlType, Gguf};
use model::quant::Imatrix;
use model::Model;

mod common;
use common::{ok, tandem};

fn smollm2() -> PathBuf {
    let dir = std::env::var_os("TANDEM_MODELS")
        .map(PathBuf::from)
        .unwrap_or_else(|| dirs::cache_dir().unwrap().join("tandem").join("models"));
    let p = dir.join("SmolLM2-135M-Instruct.Q4_1.gguf");
    assert!(
        p.is_file(),
        "{} missing: run `tandem pull smollm2-135m`",
        p.display()
    );
    p
}

fn prose() -> &'static str {
    concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tests/data/eval-prose.txt"
    )
}

/// An entry as the file stores it: `(n_cols, in_sum2, counts)`.
type Entry = (usize, Vec<f32>, Vec<f32>);

/// The entries and metadata of a GGUF importance matrix, read raw.
fn read(path: &Path) -> (BTreeMap<String, Entry>, Gguf) {
    let bytes = std::fs::read(path).unwrap();
    let g = Gguf::parse(&bytes).unwrap();
    let floats = |name: &str| -> Vec<f32> {
        let t = g.tensor(name).unwrap();
        assert_eq!(t.ggml_type, GgmlType::F32, "{name}");
        let start = (g.data_offset + t.offset) as usize;
        bytes[start..start + t.n_bytes as usize]
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect()
    };
    let mut entries = BTreeMap::new();
    for t in &g.tensors {
        if let Some(name) = t.name.strip_suffix(".in_sum2") {
            let counts = floats(&format!("{name}.counts"));
            let counts_t = g.tensor(&format!("{name}.counts")).unwrap();
            assert_eq!(counts_t.dims, [1, counts.len() as u64], "{name}");
            assert_eq!(t.dims, [t.dims[0], counts.len() as u64], "{name}");
            entries.insert(
                name.to_string(),
                (t.dims[0] as usize, floats(&t.name), counts),
            );
        }
    }
    assert_eq!(g.tensors.len(), 2 * entries.len());
    (entries, g)
}

/// Per weight matrix of the blocks of `model`: its row length and experts (1 for a
/// matrix), as an importance matrix needs them.
fn block_matrices(model: &Path) -> BTreeMap<String, (usize, usize)> {
    let f = gguf::GgufFile::open(model).unwrap();
    f.header
        .tensors
        .iter()
        .filter(|t| t.name.starts_with("blk.") && t.dims.len() >= 2 && t.dims[1] > 1)
        .map(|t| {
            let experts = t.dims.get(2).copied().unwrap_or(1) as usize;
            (t.name.clone(), (t.dims[0] as usize, experts))
        })
        .collect()
}

fn imatrix(model: &Path, text: &str, out: &Path, extra: &[&str]) -> String {
    let mut args = vec![
        "imatrix",
        model.to_str().unwrap(),
        "-f",
        text,
        "-o",
        out.to_str().unwrap(),
        "-t",
        "2",
    ];
    args.extend_from_slice(extra);
    ok(&args)
}

#[test]
fn smollm2_entries_cover_every_block_matrix_and_count_every_token() {
    let dir = tempfile::tempdir().unwrap();
    let model = smollm2();
    let out = dir.path().join("smollm2.imatrix.gguf");
    let log = imatrix(&model, prose(), &out, &["-c", "64", "--chunks", "3"]);
    assert!(log.contains("[3]"), "the perplexity of each chunk: {log}");
    let (entries, g) = read(&out);
    let md = &g.metadata;
    assert_eq!(md.str("general.type").unwrap(), "imatrix");
    assert_eq!(md.str_array("imatrix.datasets").unwrap(), [prose()]);
    assert_eq!(md.u32("imatrix.chunk_count").unwrap(), 3);
    assert_eq!(md.u32("imatrix.chunk_size").unwrap(), 64);
    let want = block_matrices(&model);
    assert_eq!(
        entries.keys().collect::<Vec<_>>(),
        want.keys().collect::<Vec<_>>()
    );
    for (name, (n_cols, sums, counts)) in &entries {
        assert_eq!((*n_cols, counts.len()), want[name], "{name}");
        assert_eq!(sums.len(), n_cols * counts.len(), "{name}");
        assert_eq!(counts, &[192.0], "{name}: every token of 3 chunks of 64");
        assert!(sums.iter().all(|&v| v > 0.0 && v.is_finite()), "{name}");
    }
    let same = |a: &str, b: &str| {
        for il in 0..30 {
            let (a, b) = (
                format!("blk.{il}.{a}.weight"),
                format!("blk.{il}.{b}.weight"),
            );
            assert_eq!(
                entries[&a].1, entries[&b].1,
                "{a} and {b} share their input"
            );
        }
    };
    same("attn_q", "attn_k");
    same("attn_q", "attn_v");
    same("ffn_gate", "ffn_up");
    assert_ne!(
        entries["blk.0.attn_q.weight"].1,
        entries["blk.1.attn_q.weight"].1
    );

    let m = Imatrix::load(&out).unwrap();
    assert_eq!(m.entries.len(), entries.len());
    for (name, (_, sums, counts)) in &entries {
        let means = m.get(name).unwrap();
        for (&mean, &sum) in means.iter().zip(sums) {
            assert_eq!(mean, sum / counts[0], "{name}");
        }
    }

    let quantized = dir.path().join("smollm2-iq4_xs.gguf");
    let log = ok(&[
        "quantize",
        model.to_str().unwrap(),
        quantized.to_str().unwrap(),
        "--type",
        "IQ4_XS",
        "--imatrix",
        out.to_str().unwrap(),
        "--allow-requantize",
        "-t",
        "2",
    ]);
    assert!(
        log.contains(&format!("importance matrix: {} entries", entries.len())),
        "{log}"
    );
    assert!(!log.contains("no importance matrix entry"), "{log}");
    Model::load(&quantized).unwrap();
}

#[test]
fn mixtures_count_each_expert_over_the_tokens_routed_to_it() {
    let dir = tempfile::tempdir().unwrap();
    let tokenizer = smollm2();
    for (arch, k) in [("qwen3moe", 2usize), ("qwen2moe", 3)] {
        let model = dir.path().join(format!("{arch}.gguf"));
        ok(&[
            "synth",
            "-o",
            model.to_str().unwrap(),
            "--arch",
            arch,
            "--n-embd",
            "64",
            "--n-layer",
            "2",
            "--n-head",
            "4",
            "--n-head-kv",
            "2",
            "--n-ff",
            "96",
            "--experts",
            "8",
            "--experts-used",
            &k.to_string(),
            "--n-ff-exp",
            "32",
            "--type",
            "f32",
            "--tokenizer",
            tokenizer.to_str().unwrap(),
        ]);
        let out = dir.path().join(format!("{arch}.imatrix.gguf"));
        imatrix(&model, prose(), &out, &["-c", "48", "--chunks", "2"]);
        let (entries, _) = read(&out);
        let mut want = block_matrices(&model);
        want.retain(|name, _| !name.contains("ffn_gate_inp_shexp"));
        assert_eq!(
            entries.keys().collect::<Vec<_>>(),
            want.keys().collect::<Vec<_>>(),
            "{arch}"
        );
        let n_tokens = 96.0;
        for (name, (n_cols, sums, counts)) in &entries {
            assert_eq!((*n_cols, counts.len()), want[name], "{arch}: {name}");
            let routed: f32 = counts.iter().sum();
            match counts.len() {
                1 => assert_eq!(routed, n_tokens, "{arch}: {name}"),
                _ => assert_eq!(routed, n_tokens * k as f32, "{arch}: {name}"),
            }
            for (e, &c) in counts.iter().enumerate() {
                let row = &sums[e * n_cols..(e + 1) * n_cols];
                assert_eq!(
                    c == 0.0,
                    row.iter().all(|&v| v == 0.0),
                    "{arch}: {name} expert {e}"
                );
            }
        }
        for il in 0..2 {
            let get = |t: &str| &entries[&format!("blk.{il}.{t}.weight")];
            assert_eq!(get("ffn_gate_exps").1, get("ffn_up_exps").1, "{arch}");
            assert!(get("ffn_gate_exps").2.iter().filter(|&&c| c > 0.0).count() > 1);
            // Each token adds its x² to the router once and to each of its k experts.
            let router = &get("ffn_gate_inp").1;
            let experts = &get("ffn_gate_exps").1;
            for (j, &r) in router.iter().enumerate() {
                let total: f32 = experts.chunks_exact(64).map(|row| row[j]).sum();
                let want = r * k as f32;
                assert!(
                    (total - want).abs() <= 1e-4 * want,
                    "{arch} layer {il} column {j}: {total} over the experts, {want} from the router"
                );
            }
        }
    }
}

/// llama-imatrix on the f32 qwen2moe of scripts/gen_imatrix_golden.py: the same counts
/// (so the same routing), and sums within 1e-3 (what f32 arithmetic in another order
/// leaves: 4e-5 when measured). llama-imatrix also has the shared expert's 1-D gate,
/// which tandem multiplies inside the mixture op (see `model::quant::collect`).
#[test]
fn an_f32_mixture_matches_llama_imatrix() {
    let golden: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/golden/imatrix-llamacpp.json"
        ))
        .unwrap(),
    )
    .unwrap();
    let shape = golden["shape"].as_object().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("golden.gguf");
    let tokenizer = smollm2();
    let mut args = vec![
        "synth".to_string(),
        "-o".into(),
        model.to_str().unwrap().into(),
        "--type".into(),
        "f32".into(),
        "--tokenizer".into(),
        tokenizer.to_str().unwrap().into(),
    ];
    for (k, v) in shape {
        let v = v.as_str().map_or_else(|| v.to_string(), str::to_string);
        args.push(format!("--{}={v}", k.replace('_', "-")));
    }
    ok(&args.iter().map(String::as_str).collect::<Vec<_>>());
    let out = dir.path().join("golden.imatrix.gguf");
    let (ctx, chunks) = (golden["ctx"].to_string(), golden["chunks"].to_string());
    imatrix(&model, prose(), &out, &["-c", &ctx, "--chunks", &chunks]);
    let (entries, _) = read(&out);
    let want = golden["entries"].as_object().unwrap();
    let extra: Vec<&String> = want.keys().filter(|k| !entries.contains_key(*k)).collect();
    assert!(
        extra
            .iter()
            .all(|k| k.ends_with("ffn_gate_inp_shexp.weight")),
        "{extra:?}"
    );
    assert_eq!(entries.len() + extra.len(), want.len());
    let close = |got: f32, want: &serde_json::Value, what: &str| {
        let want = want.as_f64().unwrap();
        let rel = (got as f64 - want).abs() / want.abs().max(1e-30);
        assert!(rel < 1e-3, "{what}: {got}, llama-imatrix {want}");
        rel
    };
    let mut worst = 0f64;
    for (name, (n_cols, sums, counts)) in &entries {
        let w = &want[name];
        let counts: Vec<u64> = counts.iter().map(|&c| c as u64).collect();
        let want_counts: Vec<u64> = w["counts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c.as_u64().unwrap())
            .collect();
        assert_eq!(counts, want_counts, "{name}");
        for (e, row) in sums.chunks_exact(*n_cols).enumerate() {
            if counts[e] == 0 {
                continue;
            }
            let what = format!("{name} matrix {e}");
            worst = worst.max(close(row.iter().sum(), &w["sums"][e], &what));
            for (j, &v) in row.iter().take(8).enumerate() {
                worst = worst.max(close(v, &w["columns"][e][j], &format!("{what} column {j}")));
            }
        }
    }
    eprintln!("qwen2moe f32: counts equal to llama-imatrix's, sums within {worst:.1e}");
}

#[test]
fn a_missing_or_short_text_is_one_line_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let model = smollm2();
    let model = model.to_str().unwrap();
    let out = dir.path().join("never.gguf");
    let out = out.to_str().unwrap();
    let missing = dir.path().join("missing.txt");
    let short = dir.path().join("short.txt");
    std::fs::write(&short, "Only a few words here.\n").unwrap();
    let empty = dir.path().join("empty.txt");
    std::fs::write(&empty, "").unwrap();
    for (text, says) in [
        (&missing, "missing.txt"),
        (&short, "fewer than one chunk of 512"),
        (&empty, "fewer than one chunk of 512"),
    ] {
        let (ok, stderr) = tandem(&[
            "imatrix",
            model,
            "--text",
            text.to_str().unwrap(),
            "-o",
            out,
        ]);
        assert!(!ok, "{}", text.display());
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(
            stderr.starts_with("error: ") && stderr.contains(says),
            "{stderr}"
        );
        assert!(!Path::new(out).exists());
    }
    for bad in [&["--chunks", "0"][..], &["-c", "1"][..]] {
        let mut args = vec!["imatrix", model, "-f", prose(), "-o", out];
        args.extend_from_slice(bad);
        let (ok, stderr) = tandem(&args);
        assert!(!ok && stderr.lines().count() == 1, "{bad:?}: {stderr}");
        assert!(stderr.contains("at least"), "{bad:?}: {stderr}");
    }
    let (ok, stderr) = tandem(&["imatrix", "-f", prose()]);
    assert!(!ok && stderr.contains("MODEL"), "{stderr}");
}
