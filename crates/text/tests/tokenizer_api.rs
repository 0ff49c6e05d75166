//! Tokenizer behaviour beyond the goldens: special ids, end of generation, added tokens,
//! round trips, bad ids and bad metadata.

mod common;

use gguf::Value;
use text::{ControlTokens, Error, PreTokenizer, TokenKind, Tokenizer};

fn real(model: &str) -> Tokenizer {
    let file = common::open(model);
    Tokenizer::from_gguf(&file.header.metadata).expect("tokenizer")
}

#[test]
fn shareable_across_threads() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<Tokenizer>();
    send_sync::<text::ChatTemplate>();
    send_sync::<text::Detokenizer>();
}

#[test]
fn smollm2_special_tokens() {
    let tok = real("smollm2-135m");
    assert_eq!(tok.n_vocab(), 49152);
    assert_eq!(tok.pre_tokenizer(), PreTokenizer::DigitsGpt2);
    assert_eq!((tok.bos(), tok.eos()), (Some(1), Some(2)));
    assert!(
        !tok.add_bos() && !tok.add_eos(),
        "SmolLM2's GGUF says add_bos_token = false"
    );
    assert!(
        tok.is_eog(2) && tok.is_eog(0),
        "<|im_end|> and <|endoftext|> end generation"
    );
    assert!(!tok.is_eog(1) && !tok.is_eog(19556));
    assert!(tok.is_control(1) && !tok.is_control(19556));
    assert_eq!(tok.token_to_piece(1), b"<|im_start|>");
    assert_eq!(tok.token_to_piece(19556), b"Hello");
    assert_eq!(tok.decode(&[1, 19556, 2]), "Hello");
    assert_eq!(
        tok.decode_with(&[1, 19556, 2], ControlTokens::Render),
        "<|im_start|>Hello<|im_end|>"
    );
}

#[test]
fn qwen_special_and_user_defined_tokens() {
    let tok = real("qwen2.5-coder-0.5b");
    assert_eq!(tok.n_vocab(), 151936);
    assert_eq!((tok.bos(), tok.eos()), (Some(151643), Some(151645)));
    assert!(!tok.add_bos());
    for id in [151643, 151645, 151662, 151663, 151664] {
        assert!(
            tok.is_eog(id),
            "{id} ({:?}) should end generation",
            String::from_utf8_lossy(tok.token_to_piece(id))
        );
    }
    assert!(!tok.is_eog(151644), "<|im_start|> does not end generation");

    // <tool_call> is user-defined: always matched, always rendered.
    assert_eq!(tok.token_kind(151657), Some(TokenKind::UserDefined));
    assert_eq!(
        tok.encode("<tool_call>", false, false).unwrap(),
        vec![151657]
    );
    assert_eq!(tok.decode(&[151657]), "<tool_call>");
    // Control tokens only with parse_special.
    assert_eq!(tok.encode("<|im_end|>", false, true).unwrap(), vec![151645]);
    assert_ne!(
        tok.encode("<|im_end|>", false, false).unwrap(),
        vec![151645]
    );
    // Unused padding entries are never produced from text and render as nothing.
    assert_eq!(tok.token_kind(151665), Some(TokenKind::Unused));
    assert!(!tok
        .encode("[PAD151665]", false, true)
        .unwrap()
        .contains(&151665));
    assert_eq!(tok.decode(&[151665]), "");
}

#[test]
fn decode_inverts_encode() {
    let mut texts = vec![
        common::eval_text("eval-prose.txt"),
        common::eval_text("eval-code.txt"),
    ];
    let golden = common::golden("smollm2-135m");
    for case in golden["tokenize"].as_object().unwrap().values() {
        texts.extend(case["text"].as_str().map(str::to_string));
    }
    for model in ["smollm2-135m", "qwen2.5-coder-0.5b"] {
        let tok = real(model);
        for text in &texts {
            let ids = tok.encode(text, false, true).unwrap();
            assert_eq!(
                &tok.decode_with(&ids, ControlTokens::Render),
                text,
                "{model}"
            );
        }
    }
}

#[test]
fn odd_inputs_never_panic() {
    let tok = real("qwen2.5-coder-0.5b");
    let inputs = [
        "",
        "\0",
        "\u{FFFD}\u{FFFF}\u{10FFFF}",
        "\u{301}\u{301}\u{301}",
        "<|im_start|><|im_start|",
        "<|<|im_end|>|>",
        "<tool_call><tool_call></tool_call>",
        "\r\r\n\n \t\u{85}\u{2028}",
        "'s'S'll'LL'ſ",
        &" ".repeat(10_000),
        &"9".repeat(10_000),
        &"\u{1F600}".repeat(1000),
    ];
    for text in inputs {
        for (add, parse) in [(false, false), (true, true)] {
            let ids = tok.encode(text, add, parse).unwrap();
            assert!(ids.iter().all(|&id| (id as usize) < tok.n_vocab()));
            assert_eq!(tok.decode_with(&ids, ControlTokens::Render), text);
        }
    }
}

#[test]
fn ids_outside_the_vocabulary_become_replacement_characters() {
    let tok = real("smollm2-135m");
    let n = tok.n_vocab() as u32;
    assert_eq!(tok.token_to_piece(n), "\u{FFFD}".as_bytes());
    assert_eq!(tok.decode(&[19556, n, u32::MAX]), "Hello\u{FFFD}\u{FFFD}");
    assert_eq!(tok.token_kind(n), None);
    assert!(!tok.is_eog(u32::MAX) && !tok.is_control(u32::MAX));
}

#[test]
fn synthetic_vocabulary_merges_and_specials() {
    let md = common::synthetic(
        &["Ġ t", "h e", "Ġt he"],
        &[("<|end|>", 3), ("<x>", 4)],
        &[("tokenizer.ggml.eos_token_id", Value::U32(259))],
    );
    let tok = Tokenizer::from_gguf(&md).unwrap();
    let (the, end, x) = (258, 259, 260);
    assert_eq!(
        tok.encode(" the<|end|> the<x>", false, true).unwrap(),
        vec![the, end, the, x]
    );
    assert_eq!(tok.encode("<x>", false, false).unwrap(), vec![x]);
    assert!(tok.is_eog(end));
    assert_eq!(tok.token_kind(end), Some(TokenKind::Control));
}

#[test]
fn add_bos_follows_metadata_and_llama_cpp_defaults() {
    let specials = [("<s>", 3), ("</s>", 3)];
    let ids = [
        ("tokenizer.ggml.bos_token_id", Value::U32(256)),
        ("tokenizer.ggml.eos_token_id", Value::U32(257)),
    ];
    let with = |extra: &[(&str, Value)]| {
        let mut all: Vec<(&str, Value)> = ids.to_vec();
        all.extend(extra.iter().cloned());
        Tokenizer::from_gguf(&common::synthetic(&[], &specials, &all)).unwrap()
    };
    let llama3 = with(&[("tokenizer.ggml.pre", Value::String("llama-bpe".into()))]);
    assert!(
        llama3.add_bos(),
        "llama.cpp adds BOS for the Llama 3 family by default"
    );
    assert_eq!(
        llama3.encode("a", true, true).unwrap(),
        vec![256, b'a' as u32]
    );
    assert_eq!(llama3.encode("a", false, true).unwrap(), vec![b'a' as u32]);

    let qwen = with(&[]);
    assert!(!qwen.add_bos());
    let both = with(&[
        ("tokenizer.ggml.add_bos_token", Value::Bool(true)),
        ("tokenizer.ggml.add_eos_token", Value::Bool(true)),
    ]);
    assert_eq!(
        both.encode("a", true, true).unwrap(),
        vec![256, b'a' as u32, 257]
    );
}

#[test]
fn every_pre_tokenizer_round_trips() {
    let text = "Hello, world! It's 12345 apples\n\n  and 3.14 ünïcödé 中文 😀";
    for pre in ["default", "gpt-2", "smollm", "qwen2", "llama-bpe", "dbrx"] {
        let md = common::synthetic(
            &["Ġ t"],
            &[],
            &[("tokenizer.ggml.pre", Value::String(pre.into()))],
        );
        let tok = Tokenizer::from_gguf(&md).unwrap();
        let ids = tok.encode(text, true, true).unwrap();
        assert_eq!(tok.decode(&ids), text, "{pre}");
    }
}

#[test]
fn bad_metadata_is_a_clear_error() {
    let err = |extra: &[(&str, Value)]| {
        Tokenizer::from_gguf(&common::synthetic(&[], &[], extra)).unwrap_err()
    };

    let e = err(&[("tokenizer.ggml.model", Value::String("bert".into()))]);
    assert!(
        matches!(e, Error::UnsupportedModel(ref m) if m == "bert"),
        "{e}"
    );
    assert!(e.to_string().contains("'bert'"), "{e}");

    let e = err(&[("tokenizer.ggml.model", Value::String("llama".into()))]);
    assert!(e.to_string().contains("tokenizer.ggml.scores"), "{e}");

    let e = err(&[("tokenizer.ggml.pre", Value::String("klingon".into()))]);
    assert!(
        e.to_string().contains("tokenizer.ggml.pre 'klingon'"),
        "{e}"
    );

    let e = err(&[(
        "tokenizer.ggml.token_type",
        Value::Array(gguf::ValueType::I32, vec![Value::I32(1)]),
    )]);
    assert!(
        matches!(
            e,
            Error::LengthMismatch {
                key: "token_type",
                found: 1,
                expected: 256
            }
        ),
        "{e}"
    );

    let e = err(&[("tokenizer.ggml.merges", Value::strings(&["nospace"]))]);
    assert!(matches!(e, Error::BadMerge { index: 0, .. }), "{e}");

    let e = err(&[("tokenizer.ggml.merges", Value::strings(&["a q"]))]);
    assert!(
        matches!(e, Error::Tokenizer(_)),
        "merge result missing from the vocabulary: {e}"
    );

    let e = err(&[("tokenizer.ggml.eos_token_id", Value::U32(999))]);
    assert!(
        e.to_string().contains("tokenizer.ggml.eos_token_id = 999"),
        "{e}"
    );

    let e = err(&[("tokenizer.ggml.add_bos_token", Value::Bool(true))]);
    assert!(matches!(e, Error::MissingSpecialToken { .. }), "{e}");

    let e = err(&[("tokenizer.ggml.tokens", Value::U32(3))]);
    assert!(e.to_string().contains("tokenizer.ggml.tokens"), "{e}");
}
