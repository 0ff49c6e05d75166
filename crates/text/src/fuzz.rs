//! The tokenizer fuzz target's body (`fuzz/`: `cargo +nightly fuzz run tokenizer`), shared
//! with the stable smoke test. On any bytes: encoding returns ids inside the vocabulary or
//! an error, plain text survives encode → decode unchanged but for the bytes the vocabulary
//! has no token for (like llama.cpp, encoding drops them), and streaming detokenization of arbitrary ids gives exactly the text of
//! decoding them at once.

use crate::{Detokenizer, Tokenizer};

pub fn tokenizer(tok: &Tokenizer, data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let n_vocab = tok.n_vocab();
    for (add_special, parse_special) in [(false, false), (true, true)] {
        if let Ok(ids) = tok.encode(&text, add_special, parse_special) {
            assert!(ids.iter().all(|&id| (id as usize) < n_vocab));
            if !add_special && !parse_special && tok.decode(&ids) != text {
                let back: Vec<u8> = ids
                    .iter()
                    .flat_map(|&id| tok.token_to_piece(id).iter().copied())
                    .collect();
                assert_eq!(back, representable(tok, &text), "round trip of {ids:?}");
            }
        }
    }
    let ids: Vec<u32> = data
        .chunks(3)
        .map(|c| c.iter().fold(0u32, |a, &b| a << 8 | b as u32) % n_vocab as u32)
        .collect();
    let mut d = Detokenizer::new();
    let mut streamed: String = ids.iter().map(|&id| d.push(tok, id)).collect();
    streamed += &d.finish();
    assert_eq!(
        streamed,
        tok.decode(&ids),
        "streamed detokenization of {ids:?}"
    );
}

/// The bytes of `text` that have a token of their own (a byte-level vocabulary may lack
/// some: SmolLM2's has none for 0x04, 0x06 or 0xF2).
fn representable(tok: &Tokenizer, text: &str) -> Vec<u8> {
    let mut has = [false; 256];
    for id in 0..tok.n_vocab() as u32 {
        if let [b] = tok.token_to_piece(id) {
            has[*b as usize] = true;
        }
    }
    text.bytes().filter(|&b| has[b as usize]).collect()
}

/// `n` inputs for a stable smoke run of a fuzz target, from a fixed random stream: each a
/// seed (chosen in turn) with 1–4 edits: a byte overwritten, inserted or deleted, or a
/// piece of another seed spliced in.
pub fn mutants(seeds: &[Vec<u8>], n: usize) -> Vec<Vec<u8>> {
    let mut s = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s as usize
    };
    (0..n)
        .map(|i| {
            let mut b = seeds[i % seeds.len()].clone();
            for _ in 0..1 + next() % 4 {
                let at = next() % (b.len() + 1);
                match next() % 4 {
                    0 if at < b.len() => b[at] = next() as u8,
                    1 => b.insert(at, next() as u8),
                    2 if at < b.len() => {
                        b.remove(at);
                    }
                    _ => {
                        let other = &seeds[next() % seeds.len()];
                        let from = next() % (other.len() + 1);
                        let len = (next() % 16).min(other.len() - from);
                        b.splice(at..at, other[from..from + len].iter().copied());
                    }
                }
            }
            b
        })
        .collect()
}
