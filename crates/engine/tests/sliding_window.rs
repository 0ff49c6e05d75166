//! Sliding-window KV on a synthetic Gemma 3 (window 64, 5 of 6 blocks windowed; Gemma 3
//! 270M's plan at a long context): the windowed layers keep only their window's blocks, and
//! a long prompt, its decoding and a draft's rollback give the same logits bits as with
//! every position kept (`--swa-full`); the engine's prefix cache reuses a prefix as far back
//! as its window is kept, and the tokens stay those of the prompt evaluated alone; a saved
//! slot and the host tier carry its last window. DeepSeek-V4's record layers keep their
//! recent parts (raw keys, compressor rows) the same way, and only compressed rows for
//! every position.

use std::path::{Path, PathBuf};
use std::sync::Arc;
#[allow(dead_code)]
mod common;

use common::{model_path, MODELS};
use engine::{ContextConfig, EngineConfig, EngineHandle, Event, Executor, Outputs, Summary};
use kv::SeqKv;
use model::Model;
use text::Tokenizer;

/// Positions a windowed block of [`write_gemma`]'s model sees.
const WINDOW: usize = 64;

/// A gemma3 of 6 blocks of 64 (4 heads over 2; blocks 0 to 4 windowed, block 5 global)
/// with a window of [`WINDOW`] positions and SmolLM2's vocabulary, at `dir/gemma3.gguf`.
fn write_gemma(dir: &Path) -> PathBuf {
    let (_, file, name) = MODELS[0];
    let tokenizer = gguf::GgufFile::open(model_path(file, name)).unwrap();
    let path = dir.join("gemma3.gguf");
    model::synthetic::Synthetic {
        n_layer: 6,
        window: Some(WINDOW),
        ..model::synthetic::Synthetic::small(model::Arch::from_name("gemma3").unwrap())
    }
    .write(&tokenizer, &path)
    .unwrap();
    path
}

/// [`write_gemma`]'s model in a folder of its own, loaded.
fn gemma() -> (tempfile::TempDir, PathBuf, Arc<Model>) {
    let dir = tempfile::tempdir().unwrap();
    let path = write_gemma(dir.path());
    let model = Arc::new(Model::load(&path).unwrap());
    (dir, path, model)
}

fn config(n_ctx: usize, swa_full: bool) -> ContextConfig {
    ContextConfig {
        n_ctx,
        n_ubatch: 64,
        n_threads: 2,
        n_seq: 1,
        swa_full,
        ..Default::default()
    }
}

/// One slot of 2,048 positions, forwards of 32 rows, 2 threads, on the CPU.
fn engine_config() -> EngineConfig {
    EngineConfig {
        n_ctx: 2048,
        n_parallel: 1,
        kv_unified: true,
        n_batch: 64,
        n_ubatch: 32,
        n_threads: 2,
        kv_type: gguf::GgmlType::F16,
        queue_limit: 8,
        device: engine::DeviceKind::Cpu,
        step_budget: engine::StepBudget::AUTO,
        swa_full: false,
        ctx_checkpoints: 8,
        cache_ram_mib: 0,
        cache_dir: None,
    }
}

fn tokens(n: usize, seed: u32) -> Vec<u32> {
    (0..n as u32)
        .map(|i| (i.wrapping_mul(2654435761).wrapping_add(seed) >> 8) % 40_000 + 100)
        .collect()
}

/// What [`run`] saw.
struct Run {
    /// The logits of the last 8 prompt rows, of 6 tokens decoded one by one, of a forward
    /// of 4 draft rows, and of the token after keeping only the first draft row.
    logits: Vec<Vec<f32>>,
    /// The windowed blocks at the end ([`kv::KvPool::window_table`]).
    window_table: Vec<u32>,
    /// Positions kept when cut back to 1000 at the end.
    kept_at_1000: usize,
}

fn run(ctx: &mut Executor, prompt: &[u32]) -> Run {
    let mut seq = SeqKv::default();
    let mut out = Vec::new();
    let n = prompt.len();
    ctx.eval(&mut seq, prompt, Outputs::From(n - 8), &mut |_, l| {
        out.push(l.to_vec())
    })
    .unwrap();
    let mut push = |ctx: &mut Executor, seq: &mut SeqKv, toks: &[u32]| {
        let rows: Vec<(usize, u32)> = toks.iter().map(|&t| (0, t)).collect();
        let all: Vec<usize> = (0..toks.len()).collect();
        ctx.append(std::slice::from_mut(seq), &rows, &all, &mut |_, l| {
            out.push(l.to_vec())
        })
        .unwrap();
    };
    for t in tokens(6, 5) {
        push(ctx, &mut seq, &[t]);
    }
    push(ctx, &mut seq, &tokens(4, 9));
    assert_eq!(
        ctx.truncate(&mut seq, n + 7),
        n + 7,
        "a draft's rollback keeps"
    );
    push(ctx, &mut seq, &[17]);
    let window_table = ctx.kv().window_table(&seq);
    let kept_at_1000 = ctx.truncate(&mut seq, 1000);
    ctx.release(&mut seq);
    Run {
        logits: out,
        window_table,
        kept_at_1000,
    }
}

#[test]
fn a_2000_token_prompt_has_the_same_bits_with_the_window_s_blocks_freed() {
    let (_dir, _, model) = gemma();
    let prompt = tokens(2000, 3);
    let mut full = Executor::new(model.clone(), config(2048, true)).unwrap();
    let mut windowed = Executor::new(model.clone(), config(2048, false)).unwrap();
    let (f, w) = (full.kv().config().clone(), windowed.kv().config().clone());
    assert!(f.window.is_none());
    let win = w.window.expect("gemma3 has windowed layers");
    assert_eq!(win.layers, 0b11111);
    assert_eq!(win.n_blocks, 4 + 2 + 4, "one window and one forward's rows");
    let blocks = |c: &kv::KvConfig| (0..6).map(|l| c.store_blocks(l, false)).sum::<usize>();
    assert_eq!((blocks(&f), blocks(&w)), (6 * 128, 128 + 5 * 10));

    let want = run(&mut full, &prompt);
    let got = run(&mut windowed, &prompt);
    assert_eq!(got.logits.len(), want.logits.len());
    for (i, (g, w)) in got.logits.iter().zip(&want.logits).enumerate() {
        let first = g
            .iter()
            .zip(w)
            .position(|(x, y)| x.to_bits() != y.to_bits());
        assert!(first.is_none(), "output {i}: logit {first:?} differs");
    }

    let table = &got.window_table;
    let kept = table.iter().filter(|&&b| b != u32::MAX).count();
    assert!(kept <= win.n_blocks, "{kept} windowed blocks");
    assert!(
        table[..100].iter().all(|&b| b == u32::MAX),
        "early ones freed"
    );
    assert_eq!(want.kept_at_1000, 1000);
    assert_eq!(
        got.kept_at_1000, 0,
        "the window before 1000 is gone: start over"
    );
    assert_eq!(windowed.kv().free_blocks(), w.n_blocks());
    assert_eq!(windowed.kv().window_available(), win.n_blocks);
}

/// Gemma 3 270M (window 512, 15 of 18 blocks windowed) at `-c 32768` with the server's 4
/// slots: the KV plan is under a quarter of full attention's on every layer.
#[test]
fn a_long_context_costs_the_global_layers_and_one_window_per_slot() {
    let (_, file, name) = MODELS[3];
    let model = Model::load(model_path(file, name)).unwrap();
    let plan = |swa_full| {
        let cfg = ContextConfig {
            n_seq: 4,
            n_ubatch: 512,
            ..config(32768, swa_full)
        };
        cfg.kv_config(&model).total_bytes()
    };
    let (windowed, full) = (plan(false), plan(true));
    let mib = |b: u64| b as f64 / (1 << 20) as f64;
    eprintln!(
        "KV at -c 32768, 4 slots: {:.1} MiB windowed, {:.1} MiB full ({:.1}%)",
        mib(windowed),
        mib(full),
        100.0 * windowed as f64 / full as f64
    );
    assert!(windowed * 4 < full);
}

/// Greedy tokens of `prompt` evaluated alone with every position kept.
fn alone(model: &Arc<Model>, prompt: &[u32], n: usize) -> Vec<u32> {
    let mut ctx = Executor::new(model.clone(), config(2048, true)).unwrap();
    let mut seq = SeqKv::default();
    let argmax = |l: &[f32]| (0..l.len()).fold(0, |b, i| if l[i] > l[b] { i } else { b }) as u32;
    let (mut next, mut out) = (0, Vec::new());
    ctx.eval(&mut seq, prompt, Outputs::Last, &mut |_, l| {
        next = argmax(l)
    })
    .unwrap();
    while out.len() < n {
        out.push(next);
        ctx.eval(&mut seq, &[next], Outputs::Last, &mut |_, l| {
            next = argmax(l)
        })
        .unwrap();
    }
    out
}

fn generate(handle: &EngineHandle, prompt: &[u32], n: usize) -> (Vec<u32>, Summary) {
    let mut events = handle
        .submit(common::request(prompt.to_vec(), n, None))
        .unwrap()
        .1;
    let mut tokens = Vec::new();
    loop {
        match events.blocking_recv().expect("engine answers") {
            Event::Delta { tokens: t, .. } => tokens.extend(t),
            Event::Done(s) => return (tokens, s),
            other => panic!("expected tokens, got {other:?}"),
        }
    }
}

#[test]
fn a_conversation_resumed_past_the_window_reuses_its_prefix_and_keeps_its_tokens() {
    let (_dir, path, model) = gemma();
    let tok = Arc::new(Tokenizer::from_gguf(&model.file.header.metadata).unwrap());
    let prose = include_str!("../../../tests/data/eval-prose.txt");
    let prompt = tok.encode(&prose[..3200], true, false).unwrap();
    assert!(prompt.len() > 600, "past the window: {}", prompt.len());
    let cfg = engine_config();
    let engine_model = Model::load(&path).unwrap();
    let handle = engine::start(engine_model, tok.clone(), cfg, None, None).unwrap();

    let (first, cold) = generate(&handle, &prompt, 8);
    assert_eq!(cold.cache_n, 0);
    assert_eq!(first, alone(&model, &prompt, 8));

    let mut turn2 = prompt.clone();
    turn2.extend(&first);
    turn2.extend(tok.encode(" And then", false, false).unwrap());
    let (second, warm) = generate(&handle, &turn2, 8);
    assert_eq!(warm.cache_n, (prompt.len() + first.len() - 1) / 16 * 16);
    assert_eq!(second, alone(&model, &turn2, 8), "a reused window");

    // An early part of the prompt: its blocks are cached, but its window's were reused
    // for later positions, so less (or nothing) of it is taken and the rest computed.
    let early = &prompt[..prompt.len() - 200];
    let (third, partial) = generate(&handle, early, 8);
    assert!(
        partial.cache_n < (early.len() - 1) / 16 * 16,
        "{}",
        partial.cache_n
    );
    assert_eq!(third, alone(&model, early, 8));
}

/// A Gemma 3's slot saved after a prompt past its window, restored into a fresh engine: the
/// file holds the whole blocks and, of the windowed layers, only the companions of the last
/// window; the fresh engine holds the same bytes (saved again, they are equal), and the
/// next turn reuses the whole restored prefix with the tokens computed alone — also when it
/// is restored into the first engine, whose cache still holds the prompt's blocks without
/// their window.
#[test]
fn a_saved_slot_carries_the_companions_of_its_last_window() {
    use engine::{SlotDone, SlotOp};
    let (_dir, path, model) = gemma();
    let tok = Arc::new(Tokenizer::from_gguf(&model.file.header.metadata).unwrap());
    let prose = include_str!("../../../tests/data/eval-prose.txt");
    let prompt = tok.encode(&prose[..3200], true, false).unwrap();
    let start = || {
        let model = Model::load(&path).unwrap();
        engine::start(model, tok.clone(), engine_config(), None, None).unwrap()
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let save = |handle: &EngineHandle| match rt.block_on(handle.slot(0, kv::SHARED, SlotOp::Save)) {
        Ok(Ok(SlotDone::Saved(saved))) => *saved,
        other => panic!("the slot is saved: {other:?}"),
    };
    let handle = start();
    let (first, _) = generate(&handle, &prompt, 8);
    let saved = save(&handle);
    let n = saved.tokens.len() / kv::BLOCK_SIZE;
    assert_eq!(n, (prompt.len() + first.len() - 1) / kv::BLOCK_SIZE);
    let (kv, window) = (&saved.kv, saved.kv.last_window_blocks(n));
    assert!(window > 0 && window < n, "{window} of {n} blocks");
    let bytes = n * kv.full_block_bytes() + window * kv.windowed_block_bytes();
    assert_eq!(saved.data.len(), bytes);
    let fresh = start();
    let op = rt.block_on(fresh.slot(0, kv::SHARED, SlotOp::Restore(Box::new(saved.clone()))));
    assert!(matches!(op, Ok(Ok(SlotDone::Restored(r))) if r == n * kv::BLOCK_SIZE));
    assert!(
        save(&fresh) == saved,
        "the fresh engine holds what it was given"
    );
    let mut turn2 = prompt.clone();
    turn2.extend(&first);
    turn2.extend(tok.encode(" And then", false, false).unwrap());
    let (second, warm) = generate(&fresh, &turn2, 8);
    assert_eq!(
        warm.cache_n,
        n * kv::BLOCK_SIZE,
        "the restored prefix is used"
    );
    assert_eq!(second, alone(&model, &turn2, 8));
    // Restored where the cache still holds the prompt's blocks but another prompt took
    // their window: the restored blocks replace them.
    let other = tok.encode(&prose[3200..6400], true, false).unwrap();
    generate(&handle, &other, 8);
    let op = rt.block_on(handle.slot(0, kv::SHARED, SlotOp::Restore(Box::new(saved))));
    assert!(matches!(op, Ok(Ok(SlotDone::Restored(_)))));
    let (again, warm) = generate(&handle, &turn2, 8);
    assert_eq!(
        warm.cache_n,
        n * kv::BLOCK_SIZE,
        "restored over the cached blocks"
    );
    assert_eq!(again, second);
}

/// Mistral's shape on a tiny synthetic model (scripts/make_synthetic.py): every block
/// windowed (5 positions), so no layer keeps a whole prefix; 300 positions read 7 rows per
/// forward give the bits of `--swa-full`.
#[test]
fn every_block_windowed_keeps_only_the_window() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../model/tests/fixtures/mistral-tiny.gguf"
    );
    let model = Arc::new(Model::load(path).unwrap());
    let prompt: Vec<u32> = (0..300u32).map(|i| i * 7 % 64).collect();
    let logits = |swa_full| {
        let cfg = ContextConfig {
            n_ubatch: 7,
            ..config(512, swa_full)
        };
        let mut ctx = Executor::new(model.clone(), cfg).unwrap();
        let kv = ctx.kv().config();
        let blocks: usize = (0..kv.n_layer).map(|l| kv.store_blocks(l, false)).sum();
        let mut seq = SeqKv::default();
        let mut out = Vec::new();
        ctx.eval(&mut seq, &prompt, Outputs::All, &mut |_, l| {
            out.extend(l.iter().map(|v| v.to_bits()))
        })
        .unwrap();
        (out, blocks)
    };
    let (want, full_blocks) = logits(true);
    let (got, windowed_blocks) = logits(false);
    assert_eq!((full_blocks, windowed_blocks), (2 * 32, 2 * 4));
    assert!(got == want, "the same bits");
}

/// A deepseek4 with a 40-key window ([`common::write_deepseek4`]), forwards of 100 rows and
/// a prompt of 2040, so that blocks of 128 positions are compressed from rows of earlier
/// forwards, and by the drafts after the prompt.
#[test]
fn deepseek4_keeps_a_window_of_records_and_compressed_rows_of_every_position() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("deepseek4.gguf");
    common::write_deepseek4(&path, 40, 4, 8);
    let model = Arc::new(Model::load(&path).unwrap());
    let prompt = tokens(2040, 11);
    let config = |swa_full| ContextConfig {
        n_ubatch: 100,
        ..config(2304, swa_full)
    };
    let mut full = Executor::new(model.clone(), config(true)).unwrap();
    let mut windowed = Executor::new(model.clone(), config(false)).unwrap();
    let (f, w) = (full.kv().config().clone(), windowed.kv().config().clone());
    assert!(f.window.is_none());
    let win = w.window.expect("records keep their recent parts windowed");
    assert_eq!(
        (win.layers, win.size),
        (0b1111, 128),
        "the 128-ratio compressor's rows"
    );
    assert_eq!(
        win.n_blocks,
        8 + 2 + 7,
        "one lookback and one forward's rows"
    );
    let (d, c, f16) = (32, 64, 2);
    let per_token = f16 * ((d + c) / 4 + d / 16 + (d + c) / 4);
    assert_eq!(w.full_block_bytes(), kv::BLOCK_SIZE * per_token);
    let recent = 4 * ((d + 4 * d + 4 * c) * 2 + (d + 2 * d) + d);
    assert_eq!(
        w.total_bytes(),
        (144 * kv::BLOCK_SIZE * per_token + 17 * kv::BLOCK_SIZE * recent) as u64,
        "the pool: compressed rows of every position, the recent parts of the window's"
    );

    let want = run(&mut full, &prompt);
    let got = run(&mut windowed, &prompt);
    assert_eq!(got.logits.len(), want.logits.len());
    for (i, (g, w)) in got.logits.iter().zip(&want.logits).enumerate() {
        let same = g.iter().zip(w).all(|(x, y)| x.to_bits() == y.to_bits());
        assert!(same, "output {i} differs");
    }
    let kept = got.window_table.iter().filter(|&&b| b != u32::MAX).count();
    assert!(kept <= win.n_blocks, "{kept} windowed blocks");
    assert!(got.window_table[..64].iter().all(|&b| b == u32::MAX));
    assert_eq!((want.kept_at_1000, got.kept_at_1000), (1000, 0));
}

/// A Gemma 3 with a host tier (`--cache-ram`) and a pool of 1,024 positions: a conversation
/// past the window, given up to another prompt, is read back for its next turn with the
/// companions of its last window (a block's bytes carry its companion's), so that the whole
/// prefix is reused; the tokens are those computed alone, and the prefix, saved, is the one
/// an engine that kept the conversation in its pool saves.
#[test]
fn the_host_tier_gives_back_a_conversation_with_its_last_window() {
    use engine::{SlotDone, SlotOp};
    let (_dir, path, model) = gemma();
    let tok = Arc::new(Tokenizer::from_gguf(&model.file.header.metadata).unwrap());
    let prose = include_str!("../../../tests/data/eval-prose.txt");
    let prompt = tok.encode(&prose[..3000], true, false).unwrap();
    let other = tok.encode(&prose[3000..6000], true, false).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let conversation = |tier: bool| {
        let cfg = match tier {
            true => EngineConfig {
                n_ctx: 1024,
                cache_ram_mib: 256,
                ..engine_config()
            },
            false => engine_config(),
        };
        let engine_model = Model::load(&path).unwrap();
        let handle = engine::start(engine_model, tok.clone(), cfg, None, None).unwrap();
        let (first, _) = generate(&handle, &prompt, 8);
        if tier {
            generate(&handle, &other, 8);
        }
        let mut turn2 = prompt.clone();
        turn2.extend(&first);
        turn2.extend(tok.encode(" And then", false, false).unwrap());
        let (second, warm) = generate(&handle, &turn2, 8);
        let full_blocks = (prompt.len() + first.len() - 1) / 16 * 16;
        assert_eq!(warm.cache_n, full_blocks, "reused (tier: {tier})");
        assert_eq!(second, alone(&model, &turn2, 8), "tier: {tier}");
        match rt.block_on(handle.slot(0, kv::SHARED, SlotOp::Save)) {
            Ok(Ok(SlotDone::Saved(saved))) => (saved.tokens, saved.data),
            other => panic!("the slot is saved: {other:?}"),
        }
    };
    assert!(
        conversation(true) == conversation(false),
        "the blocks and the window read back are those computed"
    );
}
