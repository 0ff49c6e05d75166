//! Token ids must equal llama.cpp's for every golden text, plain and special, on every real
//! model (Gemma 3's SentencePiece vocabulary among them), and the plain ids decode to the text.

mod common;

use std::time::Instant;

use text::Tokenizer;

/// Compares and, on a mismatch, shows where the two sequences part with the pieces around it.
fn check(
    tok: &Tokenizer,
    model: &str,
    name: &str,
    kind: &str,
    got: &[u32],
    want: &[u32],
) -> Option<String> {
    if got == want {
        return None;
    }
    let at = got
        .iter()
        .zip(want)
        .position(|(a, b)| a != b)
        .unwrap_or(got.len().min(want.len()));
    let show = |ids: &[u32]| {
        let lo = at.saturating_sub(3);
        let hi = (at + 4).min(ids.len());
        ids[lo..hi]
            .iter()
            .map(|&id| format!("{id}:{:?}", String::from_utf8_lossy(tok.token_to_piece(id))))
            .collect::<Vec<_>>()
            .join(" ")
    };
    Some(format!(
        "{model} {name} {kind}: lengths {} vs {} (llama.cpp), first difference at {at}\n  ours:      {}\n  llama.cpp: {}",
        got.len(),
        want.len(),
        show(got),
        show(want)
    ))
}

fn ids(v: &serde_json::Value) -> Vec<u32> {
    v.as_array()
        .expect("ids")
        .iter()
        .map(|x| x.as_u64().expect("id") as u32)
        .collect()
}

fn golden_model(model: &str) {
    let file = common::open(model);
    let tok = Tokenizer::from_gguf(&file.header.metadata).expect("tokenizer");
    let golden = common::golden(model);
    let cases = golden["tokenize"].as_object().expect("tokenize section");
    assert!(
        cases.len() >= 18,
        "expected 2 eval files and at least 16 hard strings"
    );
    let mut failures = Vec::new();
    for (name, case) in cases {
        let text = match case["text"].as_str() {
            Some(t) => t.to_string(),
            None => common::eval_text(name),
        };
        let plain = tok.encode(&text, false, false).expect("encode plain");
        if tok.decode(&plain) != text {
            failures.push(format!(
                "{model} {name}: decoding the plain ids does not give the text back"
            ));
        }
        let special = tok.encode(&text, true, true).expect("encode special");
        failures.extend(check(
            &tok,
            model,
            name,
            "plain",
            &plain,
            &ids(&case["plain"]),
        ));
        failures.extend(check(
            &tok,
            model,
            name,
            "special",
            &special,
            &ids(&case["special"]),
        ));
    }
    assert!(
        failures.is_empty(),
        "{} mismatches:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn smollm2_matches_llama_cpp() {
    golden_model("smollm2-135m");
}

#[test]
fn qwen_coder_05b_matches_llama_cpp() {
    golden_model("qwen2.5-coder-0.5b");
}

#[test]
fn qwen_coder_15b_matches_llama_cpp() {
    golden_model("qwen2.5-coder-1.5b");
}

#[test]
fn gemma3_matches_llama_cpp() {
    golden_model("gemma3-270m");
}

/// Encoding the 100 KB code file must stay well under a second (it is about 20k tokens).
#[test]
fn encoding_is_fast() {
    let code = common::eval_text("eval-code.txt");
    for model in ["smollm2-135m", "qwen2.5-coder-0.5b", "gemma3-270m"] {
        let file = common::open(model);
        let start = Instant::now();
        let tok = Tokenizer::from_gguf(&file.header.metadata).expect("tokenizer");
        eprintln!("{model}: tokenizer built in {:?}", start.elapsed());
        tok.encode("warm up", false, false).unwrap();
        let start = Instant::now();
        let n = tok.encode(&code, false, false).unwrap().len();
        let elapsed = start.elapsed();
        eprintln!(
            "{model}: {n} tokens from {} bytes in {elapsed:?}",
            code.len()
        );
        assert!(
            elapsed.as_secs_f64() < 1.0,
            "{model}: encoding {} bytes took {elapsed:?}",
            code.len()
        );
    }
}
