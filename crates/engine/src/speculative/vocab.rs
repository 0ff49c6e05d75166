//! Choosing the tokens a draft model's reduced output head keeps.

use std::path::{Path, PathBuf};

use text::Tokenizer;

/// Text the token counts come from: code (CPython's argparse.py) and prose (the GPL v3).
const CORPUS: [&str; 2] = [
    include_str!("../../../../tests/data/eval-code.txt"),
    include_str!("../../../../tests/data/eval-prose.txt"),
];

/// The `n` tokens a draft head keeps: every end-of-generation token, then the tokens of
/// the built-in corpus by decreasing count, then the lowest ids (a BPE vocabulary numbers
/// its tokens in merge order, roughly by frequency). Sorted by id.
pub fn frequent_tokens(tok: &Tokenizer, n: usize) -> Vec<u32> {
    let n_vocab = tok.n_vocab();
    let n = n.min(n_vocab);
    let mut count = vec![0u64; n_vocab];
    for text in CORPUS {
        for t in tok.encode(text, false, false).unwrap_or_default() {
            count[t as usize] += 1;
        }
    }
    let mut keep = vec![false; n_vocab];
    let mut chosen = 0;
    let mut take = |t: u32, keep: &mut Vec<bool>| {
        if chosen < n && !keep[t as usize] {
            keep[t as usize] = true;
            chosen += 1;
        }
    };
    for &t in tok.eog_ids() {
        take(t, &mut keep);
    }
    let mut seen: Vec<u32> = (0..n_vocab as u32)
        .filter(|&t| count[t as usize] > 0)
        .collect();
    seen.sort_by_key(|&t| std::cmp::Reverse(count[t as usize]));
    for t in seen.into_iter().chain(0..n_vocab as u32) {
        take(t, &mut keep);
    }
    (0..n_vocab as u32).filter(|&t| keep[t as usize]).collect()
}

/// Where the chosen tokens of `model` are stored: beside it.
pub fn stored_path(model: &Path, n: usize) -> PathBuf {
    let mut name = model.file_name().unwrap_or_default().to_os_string();
    name.push(format!(".draft-vocab-{n}.txt"));
    model.with_file_name(name)
}

/// The tokens stored beside `model` for a head of `n`, or chosen now and stored (a
/// failure to store is only a warning: the choice is the same next time).
pub fn load_or_choose(tok: &Tokenizer, model: &Path, n: usize) -> Vec<u32> {
    let path = stored_path(model, n);
    let stored: Option<Vec<u32>> = std::fs::read_to_string(&path).ok().and_then(|s| {
        s.split_whitespace()
            .map(|w| {
                w.parse()
                    .ok()
                    .filter(|&t: &u32| (t as usize) < tok.n_vocab())
            })
            .collect()
    });
    if let Some(ids) = stored.filter(|ids| ids.len() == n.min(tok.n_vocab())) {
        return ids;
    }
    let ids = frequent_tokens(tok, n);
    let text: Vec<String> = ids.iter().map(u32::to_string).collect();
    if let Err(e) = std::fs::write(&path, text.join("\n")) {
        eprintln!(
            "warning: cannot store the draft vocabulary at {}: {e}",
            path.display()
        );
    }
    ids
}
