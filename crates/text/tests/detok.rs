//! Incremental detokenization: whole characters only, control tokens hidden by default.

mod common;

use text::{ControlTokens, Detokenizer, Tokenizer};

fn real(model: &str) -> Tokenizer {
    let file = common::open(model);
    Tokenizer::from_gguf(&file.header.metadata).expect("tokenizer")
}

/// The token whose piece is exactly `byte`.
fn byte_token(tok: &Tokenizer, byte: u8) -> u32 {
    (0..tok.n_vocab() as u32)
        .find(|&id| tok.token_to_piece(id) == [byte])
        .expect("byte token")
}

/// Streams `ids` and returns the deltas plus the final flush.
fn stream(tok: &Tokenizer, det: &mut Detokenizer, ids: &[u32]) -> (Vec<String>, String) {
    let deltas = ids.iter().map(|&id| det.push(tok, id)).collect();
    (deltas, det.finish())
}

#[test]
fn emoji_and_cjk_split_across_byte_tokens() {
    let text = "emoji 😀🚀 and CJK 中文字符 日本語 🇺🇸🏳️\u{200d}🌈";
    for model in ["smollm2-135m", "qwen2.5-coder-0.5b"] {
        let tok = real(model);
        let ids = tok.encode(text, false, false).unwrap();
        let mut det = Detokenizer::new();
        let mut held_back = 0;
        let mut out = String::new();
        for &id in &ids {
            let delta = det.push(&tok, id);
            if det.pending_len() > 0 {
                held_back += 1;
            }
            out.push_str(&delta);
            assert!(
                !out.contains('\u{FFFD}'),
                "{model}: a character was split: {out:?}"
            );
        }
        assert_eq!(det.finish(), "");
        assert_eq!(out, text, "{model}");
        assert!(
            held_back > 0,
            "{model}: expected some token to end mid-character"
        );
    }
}

#[test]
fn held_back_bytes_complete_on_the_next_token() {
    let tok = real("smollm2-135m");
    let grin = "😀".as_bytes();
    let ids: Vec<u32> = grin.iter().map(|&b| byte_token(&tok, b)).collect();
    let mut det = Detokenizer::new();
    let (deltas, rest) = stream(&tok, &mut det, &ids);
    assert_eq!(deltas, ["", "", "", "😀"]);
    assert_eq!(rest, "");
}

#[test]
fn invalid_and_unfinished_bytes_become_replacement_characters() {
    let tok = real("smollm2-135m");
    let (cont, e4, a) = (
        byte_token(&tok, 0x80),
        byte_token(&tok, 0xE4),
        byte_token(&tok, b'a'),
    );
    let mut det = Detokenizer::new();
    assert_eq!(
        det.push(&tok, cont),
        "\u{FFFD}",
        "a continuation byte can never start a character"
    );
    assert_eq!(det.push(&tok, e4), "");
    assert_eq!(det.pending_len(), 1);
    assert_eq!(
        det.push(&tok, a),
        "\u{FFFD}a",
        "0xE4 followed by 'a' is broken for good"
    );
    assert_eq!(det.push(&tok, e4), "");
    assert_eq!(det.finish(), "\u{FFFD}");
    assert_eq!(det.pending_len(), 0);
}

#[test]
fn control_tokens_are_hidden_unless_rendered() {
    let tok = real("qwen2.5-coder-0.5b");
    let ids = tok
        .encode("<|im_start|>assistant\nHi<|im_end|>", false, true)
        .unwrap();
    let (deltas, _) = stream(&tok, &mut Detokenizer::new(), &ids);
    assert_eq!(deltas.concat(), "assistant\nHi");
    let (deltas, _) = stream(
        &tok,
        &mut Detokenizer::with_control(ControlTokens::Render),
        &ids,
    );
    assert_eq!(deltas.concat(), "<|im_start|>assistant\nHi<|im_end|>");
    assert_eq!(Detokenizer::new().push(&tok, u32::MAX), "\u{FFFD}");
}

#[test]
fn streaming_a_whole_file_gives_the_file() {
    let text = common::eval_text("eval-prose.txt");
    let tok = real("qwen2.5-coder-0.5b");
    let ids = tok.encode(&text, false, false).unwrap();
    let mut det = Detokenizer::new();
    let (deltas, rest) = stream(&tok, &mut det, &ids);
    assert_eq!(deltas.concat() + &rest, text);
}

#[test]
fn shown_control_tokens_keep_their_text() {
    let tok = real("qwen2.5-coder-0.5b");
    let ids = tok.encode("<|im_start|>hi<|im_end|>", false, true).unwrap();
    let (start, end) = (ids[0], *ids.last().unwrap());
    assert!(tok.is_control(start) && tok.is_control(end));
    let (deltas, rest) = stream(&tok, &mut Detokenizer::new(), &ids);
    assert_eq!(deltas.concat() + &rest, "hi");
    let mut shown = Detokenizer::new().showing(vec![end]);
    let (deltas, rest) = stream(&tok, &mut shown, &ids);
    assert_eq!(deltas.concat() + &rest, "hi<|im_end|>");
}
