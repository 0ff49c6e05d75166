//! A short stable run of the tokenizer fuzz target (`fuzz/`; the long runs are
//! `scripts/fuzz`): 3,000 mutants of texts, special tokens and broken UTF-8.

mod common;

use gguf::GgufFile;
use text::fuzz::{mutants, tokenizer};
use text::Tokenizer;

#[test]
fn tokenizer_smoke() {
    let path = common::model_path("smollm2-135m");
    let tok = Tokenizer::from_gguf(&GgufFile::open(&path).unwrap().header.metadata).unwrap();
    let prose = include_str!("../../../tests/data/eval-prose.txt");
    let code = include_str!("../../../tests/data/eval-code.txt");
    let mut seeds: Vec<Vec<u8>> = [
        &prose[..2000],
        &code[..2000],
        "<|im_start|>user\nHi<|im_end|>",
        "😀 é \u{FFFD} \t\r\n  ",
        "",
    ]
    .iter()
    .map(|s| s.as_bytes().to_vec())
    .collect();
    seeds.push(vec![0xF0, 0x9F, 0x98, 0xE4, 0xFF, 0xC0, 0x80]);
    // Found by `cargo fuzz`: U+9178B, whose lead byte 0xF2 has no token in SmolLM2.
    seeds.push(vec![
        210, 126, 190, 10, 60, 62, 242, 145, 158, 139, 101, 62, 190,
    ]);
    for input in mutants(&seeds, 3000) {
        tokenizer(&tok, &input);
    }
}
