//! A box on 127.0.0.1 and a head in this process: the split model's logits are the whole
//! model's bits, through batches of two sessions, drafts rolled back on both sides by a
//! commit (recurrent states on either side or both), a released session, prompts streamed
//! in chunks and rows submitted ahead of their step; a head of another model or split is
//! refused.

mod common;

use std::net::SocketAddr;
use std::sync::Arc;

use common::{config, load};
use device::Row;
use engine::{Enter, Executor, Out, Outputs};
use kv::SeqKv;
use model::{Model, Part};
use split::frame::StepRow;
use split::head::{BoxClient, StateType};
use split::worker::Access;
use split::Credentials;

fn start_box(file: &str, split: usize) -> SocketAddr {
    common::start_box(file, split, Access::default()).0
}

/// The head: blocks `split..n` and the output head on an executor of its own, and the box.
struct Head {
    exec: Executor,
    client: BoxClient,
    seqs: Vec<SeqKv>,
    /// Each session's tokens so far.
    tokens: Vec<Vec<u32>>,
}

impl Head {
    fn new(file: &str, split: usize, addr: SocketAddr) -> Head {
        Self::with_chunk(file, split, addr, split::head::DEFAULT_CHUNK)
    }

    /// A head whose prompt streams come in chunks of `chunk` rows.
    fn with_chunk(file: &str, split: usize, addr: SocketAddr, chunk: usize) -> Head {
        let model = load(file, Part::Last(split));
        Head {
            client: BoxClient::connect(addr, &model, StateType::F32, Credentials::default())
                .unwrap()
                .with_chunk(chunk),
            exec: Executor::new(model, config()).unwrap(),
            seqs: vec![SeqKv::default(); 2],
            tokens: vec![Vec::new(); 2],
        }
    }

    /// Computes `rows` (`(session, token)`, a session's rows together) and returns each
    /// row's logits.
    fn step(&mut self, rows: &[(usize, u32)]) -> Vec<Vec<f32>> {
        self.draft(rows, &[])
    }

    /// [`Self::step`] whose rows of session `s` are drafts from position `d` on, for each
    /// `(s, d)` of `drafts_from`.
    fn draft(&mut self, rows: &[(usize, u32)], drafts_from: &[(usize, usize)]) -> Vec<Vec<f32>> {
        let e = self.exec.model().hparams.hidden_width();
        let mut next: Vec<usize> = self.seqs.iter().map(|s| s.len()).collect();
        for &(s, d) in drafts_from {
            self.seqs[s].uncertain_from(d);
        }
        let drafts_from: Vec<(u64, u32)> = drafts_from
            .iter()
            .map(|&(s, d)| (s as u64, d as u32))
            .collect();
        let mut step_rows = Vec::new();
        let mut batch_rows = Vec::new();
        for &(s, token) in rows {
            step_rows.push(StepRow {
                session: s as u64,
                pos: next[s] as u32,
                token,
            });
            batch_rows.push(Row {
                pos: next[s],
                seq: s,
            });
            self.tokens[s].truncate(next[s]);
            self.tokens[s].push(token);
            next[s] += 1;
        }
        let mut hidden = vec![0f32; rows.len() * e];
        self.client
            .forward_rows(&step_rows, &drafts_from, &mut hidden)
            .unwrap();
        let all: Vec<usize> = (0..rows.len()).collect();
        let mut logits = vec![Vec::new(); rows.len()];
        let mut seqs: Vec<&mut SeqKv> = self.seqs.iter_mut().collect();
        let out = Out::Logits {
            rows: &all,
            on_logits: &mut |r, l| logits[r] = l.to_vec(),
        };
        let finite = self
            .exec
            .forward(
                &mut seqs,
                &batch_rows,
                Enter::States {
                    states: &hidden,
                    images: &[],
                },
                out,
            )
            .unwrap();
        assert!(finite.iter().all(|&ok| ok));
        logits
    }

    /// Session `s` is over here (its KV back in the pool).
    fn release(&mut self, s: usize) {
        self.exec.release(&mut self.seqs[s]);
    }

    /// Session `s` keeps positions `0..len`, here and on the box: as the engine does, the
    /// box keeps what this stage kept (a state's checkpoint, or nothing, where its memory
    /// could not keep `len`) and the rest is computed again.
    fn rollback(&mut self, s: usize, len: usize) {
        let kept = self.exec.truncate(&mut self.seqs[s], len);
        self.client.commit(&[(s as u64, kept as u32)]).unwrap();
        let again: Vec<(usize, u32)> = self.tokens[s][kept..len].iter().map(|&t| (s, t)).collect();
        if !again.is_empty() {
            self.step(&again);
        }
    }
}

/// The whole model's logits at every position of `tokens`.
fn whole(model: &Arc<Model>, tokens: &[u32]) -> Vec<Vec<f32>> {
    let mut ctx = Executor::new(model.clone(), config()).unwrap();
    let mut seq = SeqKv::default();
    let mut out = Vec::new();
    ctx.eval(&mut seq, tokens, Outputs::All, &mut |_, l| {
        out.push(l.to_vec())
    })
    .unwrap();
    out
}

fn same(a: &[f32], b: &[f32]) -> bool {
    a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
}

#[test]
fn a_split_model_computes_the_whole_models_bits() {
    for (file, split) in [("qwen3-tiny.gguf", 1), ("qwen3moe-moe-k5.gguf", 2)] {
        let addr = start_box(file, split);
        let mut head = Head::new(file, split, addr);
        let a: Vec<u32> = vec![1, 5, 9, 2, 33, 61, 7, 7];
        let b: Vec<u32> = vec![3, 3, 8, 50, 21];
        // Prompts together, then session 0 "drafts" three tokens of which one is kept.
        let mut rows: Vec<(usize, u32)> = a[..5].iter().map(|&t| (0, t)).collect();
        rows.extend(b.iter().map(|&t| (1, t)));
        let mut got0 = head.step(&rows)[..5].to_vec();
        let drafted = head.step(&[(0, a[5]), (0, 40), (0, 41), (1, 12)]);
        got0.push(drafted[0].clone());
        head.rollback(0, 6);
        for &t in &a[6..] {
            got0.push(head.step(&[(0, t)]).remove(0));
        }
        let model = Arc::new(load(file, Part::Whole));
        let want0 = whole(&model, &a);
        assert_eq!(got0.len(), want0.len());
        for (i, (g, w)) in got0.iter().zip(&want0).enumerate() {
            assert!(same(g, w), "{file}: session 0 position {i}");
        }
        let mut b_all = b.clone();
        b_all.push(12);
        let want1 = whole(&model, &b_all);
        assert!(same(&drafted[3], &want1[5]), "{file}: session 1 position 5");
        head.client.release(&[0, 1]).unwrap();
        head.client.ping().unwrap();
        // A released session starts again at position 0.
        head.seqs[0] = SeqKv::default();
        head.tokens[0].clear();
        let again = head.step(&[(0, a[0])]);
        assert!(same(&again[0], &want0[0]), "{file}: after release");
    }
}

/// deepseek4 (a small synthetic one: records of compressed rows and the indexer's keys on
/// both sides, hyper-connection streams crossing the split, hash-routed blocks in the box):
/// 44 tokens (11 compressed blocks of 4, the indexer picking 4), drafts rolled back.
#[test]
fn a_split_deepseek4_computes_the_whole_models_bits() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("deepseek4.gguf");
    model::synthetic::deepseek4::Dsv4Shape {
        n_embd: 64,
        n_layer: 4,
        n_head: 4,
        head_dim: 32,
        n_rot: 8,
        q_lora_rank: 32,
        o_lora_rank: 16,
        window: 8,
        compress_ratios: vec![4, 128, 4, 0],
        indexer_head_dim: 64,
        indexer_top_k: 4,
        ty: gguf::GgmlType::Q8_0,
        ..Default::default()
    }
    .write(&model::synthetic::Vocab::placeholder(64), &path)
    .unwrap();
    let file = path.to_str().unwrap();
    let addr = start_box(file, 2);
    let mut head = Head::new(file, 2, addr);
    let a: Vec<u32> = (0..44).map(|i| (i * 7 + 3) % 64).collect();
    let rows: Vec<(usize, u32)> = a[..40].iter().map(|&t| (0, t)).collect();
    let mut got = head.step(&rows);
    let drafted = head.step(&[(0, a[40]), (0, 9), (0, 10)]);
    got.push(drafted[0].clone());
    head.rollback(0, 41);
    for &t in &a[41..] {
        got.push(head.step(&[(0, t)]).remove(0));
    }
    let want = whole(&Arc::new(load(file, Part::Whole)), &a);
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert!(same(g, w), "deepseek4: position {i}");
    }
    let err = Model::load_stage(&path, Part::Last(1))
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("block 1 routes by token"), "{err}");
}

/// Hybrids of 4 blocks of 64 split where either side, or both, keep recurrent states:
/// qwen35 (blocks 0 to 2 Gated DeltaNet, block 3 attention) at 3 and 2, toyconv (blocks 1
/// and 3 convolutions) at 1. Drafts are rolled back with one accepted (a side with states
/// keeps its checkpoint and computes the accepted row again: the head as the engine does,
/// the box by itself when the head kept more), with none accepted, and once without having
/// been announced as drafts (a side with states keeps nothing and computes it all again).
#[test]
fn a_split_state_model_computes_the_whole_models_bits() {
    let dir = tempfile::tempdir().unwrap();
    for (arch, split) in [("qwen35", 3), ("qwen35", 2), ("toyconv", 1)] {
        let path = dir.path().join(format!("{arch}.gguf"));
        model::synthetic::Synthetic::small(model::Arch::from_name(arch).unwrap())
            .write_placeholder_vocab(64, &path)
            .unwrap();
        let file = path.to_str().unwrap();
        let addr = start_box(file, split);
        let mut head = Head::new(file, split, addr);
        let a: Vec<u32> = (0..14).map(|i| (i * 7 + 3) % 64).collect();
        let b: Vec<u32> = vec![3, 3, 8, 50, 21];
        let mut rows: Vec<(usize, u32)> = a[..5].iter().map(|&t| (0, t)).collect();
        rows.extend(b.iter().map(|&t| (1, t)));
        let mut got = head.step(&rows)[..5].to_vec();
        // a[5] then drafts a[6] (accepted) and 60 (rejected) beside session 1's token.
        let drafted = head.draft(&[(0, a[5]), (0, a[6]), (0, 60), (1, 12)], &[(0, 6)]);
        got.extend_from_slice(&drafted[..2]);
        head.rollback(0, 7);
        // a[7] then two drafts, both rejected.
        got.push(
            head.draft(&[(0, a[7]), (0, 61), (0, 62)], &[(0, 8)])
                .remove(0),
        );
        head.rollback(0, 8);
        // a[8], a[9] and a rejected row no one said was a draft.
        got.extend(
            head.step(&[(0, a[8]), (0, a[9]), (0, 63)])
                .into_iter()
                .take(2),
        );
        head.rollback(0, 10);
        for &t in &a[10..] {
            got.push(head.step(&[(0, t)]).remove(0));
        }
        let model = Arc::new(load(file, Part::Whole));
        let want = whole(&model, &a);
        assert_eq!(got.len(), want.len());
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert!(same(g, w), "{arch} split at {split}: position {i}");
        }
        let mut b_all = b.clone();
        b_all.push(12);
        let want1 = whole(&model, &b_all);
        assert!(
            same(&drafted[3], &want1[5]),
            "{arch} split at {split}: session 1"
        );
    }
}

#[test]
fn streamed_prompts_arrive_chunk_by_chunk_with_the_whole_models_bits() {
    let (file, split) = ("qwen3-tiny.gguf", 1);
    let addr = start_box(file, split);
    let mut head = Head::with_chunk(file, split, addr, 5);
    let a: Vec<u32> = (0..23).map(|i| (i * 7 + 3) % 60).collect();
    let b: Vec<u32> = (0..17).map(|i| (i * 11 + 1) % 60).collect();
    head.client.stream(0, 0, &a).unwrap();
    head.client.stream(1, 0, &b).unwrap();
    assert!(head.client.streams(0) && head.client.streams(1));
    // Parts of both streams in one step, each cutting a chunk.
    let mut rows: Vec<(usize, u32)> = a[..7].iter().map(|&t| (0, t)).collect();
    rows.extend(b[..4].iter().map(|&t| (1, t)));
    let first = head.step(&rows);
    // The rest of both, and two rows of session 0 past its stream (its drafts), which the
    // box may only compute after the stream's last chunk.
    let mut rows: Vec<(usize, u32)> = a[7..].iter().map(|&t| (0, t)).collect();
    rows.extend([(0, 40), (0, 41)]);
    rows.extend(b[4..].iter().map(|&t| (1, t)));
    let second = head.step(&rows);
    assert!(!head.client.streams(0) && !head.client.streams(1));
    let got0: Vec<&Vec<f32>> = first[..7].iter().chain(&second[..18]).collect();
    let got1: Vec<&Vec<f32>> = first[7..].iter().chain(&second[18..]).collect();
    let model = Arc::new(load(file, Part::Whole));
    let mut a_all = a.clone();
    a_all.extend([40, 41]);
    for (s, got, want) in [
        (0, got0, whole(&model, &a_all)),
        (1, got1, whole(&model, &b)),
    ] {
        assert_eq!(got.len(), want.len(), "session {s}");
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert!(same(g, w), "session {s} position {i}");
        }
    }
    let stats = head.client.stats();
    assert_eq!(stats.rows, 23 + 17 + 2);
    // Five chunks of a's stream, four of b's, and the fast request of a's two rows.
    assert_eq!(stats.requests, 5 + 4 + 1);
    // A session released mid-stream (preempted) and streamed again at once: the chunks
    // of its first stream still on their way are not taken for the second's.
    head.client.release(&[0, 1]).unwrap();
    head.release(0);
    head.release(1);
    head.client.stream(0, 0, &a).unwrap();
    head.step(&a[..3].iter().map(|&t| (0, t)).collect::<Vec<_>>());
    head.client.release(&[0]).unwrap();
    head.release(0);
    let c: Vec<u32> = a.iter().rev().copied().collect();
    head.client.stream(0, 0, &c).unwrap();
    let got = head.step(&c.iter().map(|&t| (0, t)).collect::<Vec<_>>());
    let want = whole(&model, &c);
    assert!(got.iter().zip(&want).all(|(g, w)| same(g, w)));
}

#[test]
fn rows_submitted_ahead_are_the_ones_their_step_takes() {
    let (file, split) = ("qwen3-tiny.gguf", 1);
    let addr = start_box(file, split);
    let mut head = Head::new(file, split, addr);
    let (a, b) = ([1u32, 5, 9, 2], [3u32, 3, 8]);
    // b's step goes to the box before a's is computed, as the engine sends one cohort's
    // step while it finishes the other's.
    let ahead: Vec<StepRow> = (0..b.len())
        .map(|i| StepRow {
            session: 1,
            pos: i as u32,
            token: b[i],
        })
        .collect();
    head.client.submit(&ahead, &[]).unwrap();
    let got_a = head.step(&a.map(|t| (0, t)));
    let got_b = head.step(&b.map(|t| (1, t)));
    assert_eq!(head.client.stats().requests, 2, "b's rows were sent once");
    let model = Arc::new(load(file, Part::Whole));
    for (got, want) in [(got_a, whole(&model, &a)), (got_b, whole(&model, &b))] {
        assert_eq!(got.len(), want.len());
        assert!(got.iter().zip(&want).all(|(g, w)| same(g, w)));
    }
}

#[test]
fn a_head_of_another_model_or_split_is_refused() {
    let addr = start_box("qwen3-tiny.gguf", 1);
    let other = load("qwen2-tiny.gguf", Part::Last(1));
    let err = BoxClient::connect(addr, &other, StateType::F32, Credentials::default())
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("is not the box's"), "{err}");
    let addr = start_box("qwen3moe-moe-k5.gguf", 1);
    let wrong_split = load("qwen3moe-moe-k5.gguf", Part::Last(2));
    let err = BoxClient::connect(addr, &wrong_split, StateType::F32, Credentials::default())
        .err()
        .unwrap()
        .to_string();
    assert!(
        err.contains("starts at block 2") && err.contains("ends at block 1"),
        "{err}"
    );
}
