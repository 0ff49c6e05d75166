//! Batch invariance of the whole model (DESIGN.md invariant 1) on SmolLM2-135M: a row's
//! logits have the same bits whether it is computed alone (M = 1), inside a forward of 8
//! or of 64 rows, beside rows of another sequence, and with 1 or 2 threads; and on Gemma 3
//! past its sliding window.

use std::sync::Arc;
#[allow(dead_code)]
mod common;

use common::{model_path, MODELS};
use engine::{ContextConfig, Executor, Outputs};
use kv::SeqKv;
use model::Model;

const N: usize = 64;

fn prompt(n: usize, seed: u32) -> Vec<u32> {
    (0..n as u32)
        .map(|i| (i.wrapping_mul(2654435761).wrapping_add(seed) >> 8) % 40_000 + 100)
        .collect()
}

fn context(model: &Arc<Model>, n_ubatch: usize, n_threads: usize) -> Executor {
    Executor::new(
        model.clone(),
        ContextConfig {
            n_ctx: 1024,
            n_ubatch,
            n_threads,
            ..Default::default()
        },
    )
    .unwrap()
}

/// Logits of every token of `tokens`, evaluated `n_ubatch` rows per forward.
fn all_logits(
    model: &Arc<Model>,
    tokens: &[u32],
    n_ubatch: usize,
    n_threads: usize,
) -> Vec<Vec<f32>> {
    let mut ctx = context(model, n_ubatch, n_threads);
    let mut out = vec![Vec::new(); tokens.len()];
    let mut seq = SeqKv::default();
    ctx.eval(&mut seq, tokens, Outputs::All, &mut |i, l| {
        out[i] = l.to_vec()
    })
    .unwrap();
    out
}

fn assert_same_bits(a: &[f32], b: &[f32], what: &str) {
    assert_eq!(a.len(), b.len());
    let first = a
        .iter()
        .zip(b)
        .position(|(x, y)| x.to_bits() != y.to_bits());
    assert!(first.is_none(), "{what}: logit {} differs", first.unwrap());
}

#[test]
fn rows_have_the_same_bits_at_any_batch_size_and_thread_count() {
    let (_, file, name) = MODELS[0];
    let model = Arc::new(Model::load(model_path(file, name)).unwrap());
    let tokens = prompt(N, 7);
    let reference = all_logits(&model, &tokens, N, 2);
    for (n_ubatch, n_threads) in [(1, 1), (1, 2), (8, 2), (8, 1), (64, 1)] {
        let got = all_logits(&model, &tokens, n_ubatch, n_threads);
        for (i, (g, r)) in got.iter().zip(&reference).enumerate() {
            assert_same_bits(g, r, &format!("row {i} at M={n_ubatch}, t={n_threads}"));
        }
    }

    // Rows 0..8 of the prompt inside one forward of 64 rows, after 56 rows of another
    // sequence, and rows 8..16 inside a forward of 8 rows mixed with 4 of the other.
    let mut ctx = context(&model, N, 2);
    let mut seqs = vec![SeqKv::default(), SeqKv::default()];
    let other = prompt(N, 99);
    let mut rows: Vec<(usize, u32)> = other[..56].iter().map(|&t| (1, t)).collect();
    rows.extend(tokens[..8].iter().map(|&t| (0, t)));
    let wanted: Vec<usize> = (56..64).collect();
    let mut got = vec![Vec::new(); 8];
    ctx.append(&mut seqs, &rows, &wanted, &mut |i, l| {
        got[i - 56] = l.to_vec()
    })
    .unwrap();
    for (i, g) in got.iter().enumerate() {
        assert_same_bits(
            g,
            &reference[i],
            &format!("row {i} inside M=64 beside another sequence"),
        );
    }
    let rows: Vec<(usize, u32)> = (0..8)
        .map(|i| {
            if i % 2 == 0 {
                (0, tokens[8 + i / 2])
            } else {
                (1, other[56 + i / 2])
            }
        })
        .chain((4..8).map(|i| (0, tokens[8 + i])))
        .collect();
    let wanted: Vec<usize> = (0..rows.len()).filter(|&i| rows[i].0 == 0).collect();
    let mut got = Vec::new();
    ctx.append(&mut seqs, &rows, &wanted, &mut |_, l| got.push(l.to_vec()))
        .unwrap();
    for (j, g) in got.iter().enumerate() {
        assert_same_bits(
            g,
            &reference[8 + j],
            &format!("row {} interleaved in M=12", 8 + j),
        );
    }
}

/// Gemma 3's windowed blocks see the last 512 positions: the last rows of a 600-token prompt
/// have the same logits bits read 600, 64 or 7 rows per forward, and decoded one by one
/// after the rest.
#[test]
fn windowed_rows_have_the_same_bits_at_any_batch_size() {
    let (_, file, name) = MODELS[3];
    let model = Arc::new(Model::load(model_path(file, name)).unwrap());
    let tokens = prompt(600, 11);
    let last = |n_ubatch: usize, chunks: &[usize]| {
        let mut ctx = context(&model, n_ubatch, 2);
        let mut seq = SeqKv::default();
        let mut out = Vec::new();
        let mut at = 0;
        for &end in chunks {
            ctx.eval(
                &mut seq,
                &tokens[at..end],
                Outputs::From(596usize.saturating_sub(at)),
                &mut |_, l| out.push(l.to_vec()),
            )
            .unwrap();
            at = end;
        }
        out
    };
    let whole = last(600, &[600]);
    assert_eq!(whole.len(), 4);
    let cases: [(usize, Vec<usize>); 3] = [
        (64, vec![600]),
        (7, vec![600]),
        (600, (597..=600).collect()),
    ];
    for (n_ubatch, chunks) in cases {
        let got = last(n_ubatch, &chunks);
        let got = &got[got.len() - 4..];
        for (i, (g, w)) in got.iter().zip(&whole).enumerate() {
            assert_same_bits(g, w, &format!("row {} at M={n_ubatch}", 596 + i));
        }
    }
}
