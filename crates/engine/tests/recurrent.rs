//! Models whose layers keep more than a key and a value per position (the test recipe
//! toyconv: attention blocks and causal-convolution blocks alternating; qwen35: Gated
//! DeltaNet and gated attention; nemotron_h_moe: Mamba-2, attention and mixtures, blocks
//! that keep nothing; deepseek4: compressed sparse attention with the lightning
//! indexer, hyper-connections, hash-routed experts; random weights, SmolLM2's tokenizer)
//! through the engine on the CPU: a user's greedy tokens do not depend on the others, on
//! prompts read in chunks, on rejected drafts (a state goes back to its checkpoint and the
//! engine computes again what was not kept; deepseek4's records are cut as keys are), on
//! the thread count, or on a resumed conversation (which reuses its prefix: a state model
//! from the snapshot of its state after the prefix's last block, deepseek4 its records),
//! whether the prefix stayed in the pool, went to the host tier or was saved by a slot,
//! or on the model being split between two local stages with states on either side.

#[allow(dead_code)]
mod common;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use engine::speculative::{PolicyKind, Scripted, SpecConfig, Speculation};
use engine::{
    ContextConfig, EngineConfig, EngineHandle, Enter, Executor, FrontSeq, LocalFront, Out,
};
use gguf::GgmlType;
use model::{Model, Part};
use text::Tokenizer;

/// The models, 4 blocks of 64 with SmolLM2's tokenizer: toyconv (blocks 1 and 3
/// convolutions), qwen35 (blocks 0 to 2 Gated DeltaNet, block 3 gated attention),
/// nemotron_h_moe (Mamba-2, a mixture, Mamba-2, attention) and deepseek4 (an 8-key window; blocks compressed at ratios 4, 128, 4 and not at all, the
/// indexer picking 4 blocks; block 0 routed by token).
fn models(dir: &Path) -> Vec<PathBuf> {
    let dsv4 = dir.join("deepseek4.gguf");
    common::write_deepseek4(&dsv4, 8, 16, 4);
    vec![
        common::write_synthetic(dir, "toyconv"),
        common::write_synthetic(dir, "qwen35"),
        common::write_nemotron_h(dir),
        dsv4,
    ]
}

/// Whether the model keeps records of positions (deepseek4) rather than a state.
fn keeps_records(path: &Path) -> bool {
    path.ends_with("deepseek4.gguf")
}

fn config(n_parallel: usize, device: engine::DeviceKind) -> EngineConfig {
    EngineConfig {
        n_ctx: 4096,
        n_parallel,
        kv_unified: true,
        n_batch: 64,
        n_ubatch: 32,
        n_threads: 2,
        kv_type: GgmlType::F16,
        queue_limit: 64,
        device,
        step_budget: engine::StepBudget::AUTO,
        swa_full: false,
        ctx_checkpoints: 8,
        cache_ram_mib: 0,
        cache_dir: None,
    }
}

fn start(path: &Path, n_parallel: usize, spec: Option<Speculation>) -> EngineHandle {
    start_on(path, n_parallel, spec, engine::DeviceKind::Cpu)
}

fn start_on(
    path: &Path,
    n_parallel: usize,
    spec: Option<Speculation>,
    device: engine::DeviceKind,
) -> EngineHandle {
    let model = Model::load(path).unwrap();
    let tok = Tokenizer::from_gguf(&model.file.header.metadata).unwrap();
    engine::start(model, Arc::new(tok), config(n_parallel, device), spec, None).unwrap()
}

/// Prompts of 9 to 75 tokens (deepseek4: to 150, so that a block of 128 compresses): the
/// longer ones are read in several forwards of 32 rows.
fn prompts(path: &Path) -> Vec<Vec<u32>> {
    let model = Model::load(path).unwrap();
    let tok = Tokenizer::from_gguf(&model.file.header.metadata).unwrap();
    let text = "The quick brown fox jumps over the lazy dog while the river runs to the sea. ";
    let times = if keeps_records(path) { 2 } else { 1 };
    (0..8)
        .map(|i| {
            tok.encode(&text.repeat((1 + i % 4) * times)[i..], true, false)
                .unwrap()
        })
        .collect()
}

/// Greedy tokens of one sequence, alone, a token a forward after its prompt (2 threads).
fn alone(path: &Path, prompt: &[u32], n: usize) -> Vec<u32> {
    alone_on(path, prompt, n, 2, engine::DeviceKind::Cpu)
}

fn alone_on(
    path: &Path,
    prompt: &[u32],
    n: usize,
    n_threads: usize,
    device: engine::DeviceKind,
) -> Vec<u32> {
    let cfg = ContextConfig {
        n_ctx: 512,
        n_ubatch: 32,
        n_threads,
        device,
        ..ContextConfig::default()
    };
    let mut ctx = Executor::new(Model::load(path).unwrap(), cfg).unwrap();
    common::greedy_alone(&mut ctx, prompt, n)
}

#[test]
fn eight_users_get_the_tokens_each_gets_alone() {
    let dir = tempfile::tempdir().unwrap();
    for path in models(dir.path()) {
        let prompts = prompts(&path);
        let n = 24;
        let handle = start(&path, 8, None);
        let together = common::run_all(&handle, &prompts, n);
        for (i, (p, (got, _))) in prompts.iter().zip(&together).enumerate() {
            let want = alone(&path, p, n);
            assert_eq!(got, &want, "{path:?} prompt {i} ({} tokens)", p.len());
        }
        let one_thread = alone_on(&path, &prompts[7], n, 1, engine::DeviceKind::Cpu);
        assert_eq!(one_thread, together[7].0, "{path:?}: one thread");
        let cfg = ContextConfig {
            n_ctx: 512,
            n_ubatch: 7,
            ..ContextConfig::default()
        };
        let mut ctx = Executor::new(Model::load(&path).unwrap(), cfg).unwrap();
        let small_ubatch = common::greedy_alone(&mut ctx, &prompts[7], n);
        assert_eq!(small_ubatch, together[7].0, "{path:?}: ubatch 7");
    }
}

/// On the wgpu backend (lavapipe in CI): each of 8 users gets the tokens it gets alone
/// there (the GPU's bits are its own, so alone on the GPU, not on the CPU).
#[test]
fn eight_users_on_the_gpu_get_the_tokens_each_gets_alone() {
    if !gpu::adapter_for_tests() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let gpu = engine::DeviceKind::Gpu;
    for path in models(dir.path()).into_iter().skip(1) {
        let prompts = prompts(&path);
        let n = 12;
        let together = common::run_all(&start_on(&path, 8, None, gpu), &prompts, n);
        for (i, (p, (got, _))) in prompts.iter().zip(&together).enumerate() {
            let want = alone_on(&path, p, n, 2, gpu);
            assert_eq!(got, &want, "{path:?} prompt {i} ({} tokens)", p.len());
        }
    }
}

#[test]
fn rejected_drafts_take_the_state_back_and_keep_the_text() {
    let dir = tempfile::tempdir().unwrap();
    for path in models(dir.path()) {
        rejected_drafts_keep_the_text(&path);
    }
}

fn rejected_drafts_keep_the_text(path: &Path) {
    let prompts = prompts(path);
    let n = 24;
    let want = common::run_all(&start(path, 8, None), &prompts, n);
    let scripts: Vec<Vec<u32>> = prompts
        .iter()
        .zip(&want)
        .map(|(p, w)| p.iter().chain(&w.0).copied().collect())
        .collect();
    let spec = |n_max| SpecConfig {
        n_max,
        policy: PolicyKind::Fixed,
        ..SpecConfig::default()
    };
    let arms = [
        (
            "self-draft",
            Speculation::draft_model(Model::load(path).unwrap(), spec(4)),
            true,
        ),
        (
            "scripted, every third position wrong",
            Speculation::with(Scripted::new(scripts, 3, 0), spec(5)),
            false,
        ),
    ];
    // Which positions a slot drafts depends on the steps the scheduler plans from measured
    // costs: rejections are counted over all prompts, not per prompt.
    for (name, s, all_accepted) in arms {
        let got = common::run_all(&start(path, 8, Some(s)), &prompts, n);
        let (mut drafted, mut accepted) = (0, 0);
        for (i, ((tokens, summary), w)) in got.iter().zip(&want).enumerate() {
            assert_eq!(tokens, &w.0, "{path:?} {name}: prompt {i}");
            drafted += summary.draft_n;
            accepted += summary.draft_n_accepted;
        }
        assert!(drafted > 0, "{name}: nothing was drafted");
        assert_eq!(
            accepted == drafted,
            all_accepted,
            "{name}: {accepted} of {drafted}"
        );
    }
}

#[test]
fn a_resumed_conversation_is_computed_again_with_the_same_tokens() {
    let dir = tempfile::tempdir().unwrap();
    for path in models(dir.path()) {
        resumed_conversation(&path);
    }
}

fn resumed_conversation(path: &Path) {
    let prompt = prompts(path).remove(7);
    let handle = start(path, 2, None);
    let (first, cold) = common::run_all(&handle, std::slice::from_ref(&prompt), 8).remove(0);
    let mut turn2 = prompt.clone();
    turn2.extend(&first);
    turn2.extend(&prompt[1..5]);
    let (second, warm) = common::run_all(&handle, std::slice::from_ref(&turn2), 8).remove(0);
    assert!(
        cold.cache_n == 0 && warm.cache_n > 0,
        "a prefix is shared (records, or a state's snapshot): {} then {}",
        cold.cache_n,
        warm.cache_n
    );
    assert_eq!(second, alone(path, &turn2, 8));
    let (again, _) = common::run_all(&handle, std::slice::from_ref(&prompt), 8).remove(0);
    assert_eq!(again, first);
}

#[test]
fn a_saved_slot_gives_a_fresh_engine_the_prefix_and_its_states() {
    let dir = tempfile::tempdir().unwrap();
    for path in models(dir.path()) {
        saved_slot(&path);
    }
}

/// A slot saved after a request, restored into a fresh engine: the engine holds the same
/// bytes (saved again, they are equal), the next turn starts from the restored blocks and
/// the states' snapshot after the last of them (deepseek4: the companions of its last
/// window, its records' recent parts), and its tokens are those computed alone.
/// Slot 0's cached prefix, saved.
fn save(rt: &tokio::runtime::Runtime, handle: &EngineHandle, path: &Path) -> engine::SavedPrefix {
    let op = rt.block_on(handle.slot(0, kv::SHARED, engine::SlotOp::Save));
    let Ok(Ok(engine::SlotDone::Saved(saved))) = op else {
        panic!("{}: the slot is saved: {op:?}", path.display())
    };
    *saved
}

fn saved_slot(path: &Path) {
    use engine::{SlotDone, SlotOp};
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let prompt = prompts(path).remove(7);
    let handle = start(path, 1, None);
    let (first, _) = common::run_all(&handle, std::slice::from_ref(&prompt), 8).remove(0);
    let saved = save(&rt, &handle, path);
    let (kv, n) = (&saved.kv, saved.tokens.len() / kv::BLOCK_SIZE);
    let state = kv.state.map_or(0, |s| s.snapshot_bytes());
    let window = kv.last_window_blocks(n) * kv.windowed_block_bytes();
    assert!(state + window > 0, "{}", path.display());
    assert_eq!(saved.data.len(), n * kv.full_block_bytes() + window + state);
    let fresh = start(path, 1, None);
    let op = rt.block_on(fresh.slot(0, kv::SHARED, SlotOp::Restore(Box::new(saved.clone()))));
    let Ok(Ok(SlotDone::Restored(n))) = op else {
        panic!("{}: the slot is restored: {op:?}", path.display())
    };
    assert_eq!(n, saved.tokens.len());
    assert!(
        save(&rt, &fresh, path) == saved,
        "{}: the fresh engine holds the blocks and states it was given",
        path.display()
    );
    let mut turn2 = prompt.clone();
    turn2.extend(&first);
    turn2.extend(&prompt[1..5]);
    let (second, warm) = common::run_all(&fresh, std::slice::from_ref(&turn2), 8).remove(0);
    assert_eq!(
        warm.cache_n,
        n,
        "{}: the restored prefix is used",
        path.display()
    );
    assert_eq!(second, alone(path, &turn2, 8), "{}", path.display());
}

#[test]
fn the_host_tier_gives_back_a_state_model_s_conversation() {
    let dir = tempfile::tempdir().unwrap();
    for path in models(dir.path()) {
        host_tier(&path, engine::DeviceKind::Cpu);
    }
}

/// As [`the_host_tier_gives_back_a_state_model_s_conversation`] on the wgpu backend
/// (lavapipe in CI), for qwen35, nemotron_h and deepseek4: a block's bytes leave the GPU's
/// stores of the layers that keep positions (deepseek4: its records' kept parts, and the
/// recent parts of its last window as companions), its snapshot the state layers'.
#[test]
fn the_host_tier_gives_back_a_state_model_s_conversation_on_the_gpu() {
    if !gpu::adapter_for_tests() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    for path in models(dir.path()).into_iter().skip(1) {
        host_tier(&path, engine::DeviceKind::Gpu);
    }
}

/// A conversation whose blocks the pool (96 positions, one snapshot; deepseek4: its
/// conversation's positions and a block) gave up to another's is read back from host memory
/// (`--cache-ram`) up to its last block with a snapshot, whose states the sequence loads
/// (deepseek4: with the companions of its last window): the next turn's tokens are those computed alone, and its
/// prefix, saved, is the one an engine that kept the conversation in its pool saves (its
/// tokens and bytes).
fn host_tier(path: &Path, device: engine::DeviceKind) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let p = prompts(path);
    let (prompt, other) = (&p[7], &p[3]);
    let conversation = |tier: bool| {
        let model = Model::load(path).unwrap();
        let tok = Tokenizer::from_gguf(&model.file.header.metadata).unwrap();
        let cfg = match tier {
            true => EngineConfig {
                n_ctx: match keeps_records(path) {
                    true => (prompt.len() + 8).div_ceil(kv::BLOCK_SIZE) * kv::BLOCK_SIZE + 16,
                    false => 96,
                },
                cache_ram_mib: 64,
                ctx_checkpoints: 1,
                ..config(1, device)
            },
            false => config(1, device),
        };
        let handle = engine::start(model, Arc::new(tok), cfg, None, None).unwrap();
        let (first, _) = common::run_all(&handle, std::slice::from_ref(prompt), 8).remove(0);
        if tier {
            common::run_all(&handle, std::slice::from_ref(other), 8);
        }
        let mut turn2 = prompt.clone();
        turn2.extend(&first);
        turn2.extend(&prompt[1..5]);
        let (second, warm) = common::run_all(&handle, std::slice::from_ref(&turn2), 8).remove(0);
        let full_blocks = (prompt.len() + first.len() - 1) / kv::BLOCK_SIZE * kv::BLOCK_SIZE;
        assert_eq!(warm.cache_n, full_blocks, "{}: reused", path.display());
        let want = alone_on(path, &turn2, 8, 2, device);
        assert_eq!(second, want, "{}", path.display());
        let saved = save(&rt, &handle, path);
        (saved.tokens, saved.data)
    };
    assert!(
        conversation(true) == conversation(false),
        "{}: the blocks and states read back are those computed",
        path.display()
    );
}

/// Eight users of a state model split between two local stages (a [`LocalFront`] holding
/// the embeddings and the first blocks), drafts every third of them wrong: each gets the
/// tokens of the whole model alone, whether the states sit before the split, after it or on
/// both sides (a side that keeps only a state's checkpoint computes the rest again).
#[test]
fn a_split_state_model_with_rejected_drafts_keeps_the_text() {
    let dir = tempfile::tempdir().unwrap();
    let models = models(dir.path());
    for (path, at) in [
        (&models[1], 3),
        (&models[1], 2),
        (&models[0], 1),
        (&models[2], 2),
    ] {
        let (prompts, want) = (prompts(path), whole_answers(path));
        let handle = split_with_wrong_drafts(path, at, &want, |f| Box::new(f));
        let got = common::run_all(&handle, &prompts, 16);
        let (mut drafted, mut accepted) = (0, 0);
        for (i, ((tokens, summary), w)) in got.iter().zip(&want).enumerate() {
            assert_eq!(tokens, &w.0, "{path:?} split at {at}: prompt {i}");
            drafted += summary.draft_n;
            accepted += summary.draft_n_accepted;
        }
        assert!(
            accepted > 0 && accepted < drafted,
            "{accepted} of {drafted}"
        );
    }
}

/// With a state kept before each draft row (`state_rows` 4), a cut within a forward's
/// drafts keeps every accepted row, and the next row's logits are those of the accepted
/// tokens computed alone (bit for bit); past the kept rows, a cut keeps the last of them;
/// with the checkpoint alone (`state_rows` 1) it keeps only the rows before the drafts. On
/// the CPU and, where one is, the GPU.
#[test]
fn a_cut_within_the_drafts_keeps_the_accepted_rows_with_their_states() {
    let dir = tempfile::tempdir().unwrap();
    let mut devices = vec![engine::DeviceKind::Cpu];
    if gpu::adapter_for_tests() {
        devices.push(engine::DeviceKind::Gpu);
    }
    for path in models(dir.path()).iter().filter(|p| !keeps_records(p)) {
        for &device in &devices {
            let exec = |state_rows| {
                let cfg = ContextConfig {
                    n_ctx: 256,
                    n_ubatch: 32,
                    n_threads: 2,
                    device,
                    state_rows,
                    ..ContextConfig::default()
                };
                Executor::new(Model::load(path).unwrap(), cfg).unwrap()
            };
            let tokens: Vec<u32> = (0..20).map(|i| (i * 37 + 11) % 300 + 50).collect();
            let next = |e: &mut Executor, seq: &mut kv::SeqKv, toks: &[u32]| {
                let rows: Vec<(usize, u32)> = toks.iter().map(|&t| (0, t)).collect();
                let mut last = Vec::new();
                let out = [toks.len() - 1];
                e.append(std::slice::from_mut(seq), &rows, &out, &mut |_, l| {
                    last = l.iter().map(|v| v.to_bits()).collect()
                })
                .unwrap();
                last
            };
            let want = |cut: usize| {
                let (mut e, mut alone) = (exec(1), kv::SeqKv::default());
                next(&mut e, &mut alone, &tokens[..cut]);
                next(&mut e, &mut alone, &[7])
            };
            for (rows, cut, kept) in [(4, 13, 13), (4, 15, 14), (1, 13, 11)] {
                let mut e = exec(rows);
                let mut seq = kv::SeqKv::default();
                next(&mut e, &mut seq, &tokens[..10]);
                seq.uncertain_from(11);
                next(&mut e, &mut seq, &tokens[10..16]);
                let at = format!("{path:?} {device:?} rows {rows} cut {cut}");
                assert_eq!(e.truncate(&mut seq, cut), kept, "{at}");
                if kept < cut {
                    next(&mut e, &mut seq, &tokens[kept..cut]);
                }
                assert!(
                    next(&mut e, &mut seq, &[7]) == want(cut),
                    "{at}: the next row's logits"
                );
            }
        }
    }
}

/// A first stage's sequence (qwen35's blocks 0 to 2, all Gated DeltaNet) cut back keeps
/// its state's checkpoint where the drafts were said to start and computes again only the
/// accepted rows after it; cut back where no drafts were announced, it computes all again.
#[test]
fn a_first_stage_computes_again_only_what_its_state_could_not_keep() {
    let dir = tempfile::tempdir().unwrap();
    let path = common::write_synthetic(dir.path(), "qwen35");
    let first = Model::load_stage(&path, Part::First(3)).unwrap();
    let cfg = ContextConfig {
        n_ctx: 256,
        n_ubatch: 32,
        n_threads: 1,
        ..ContextConfig::default()
    };
    let mut exec = Executor::new(first, cfg).unwrap();
    let mut seq = FrontSeq::default();
    let forward =
        |exec: &mut Executor, seq: &mut FrontSeq, from: usize, to: usize, drafts: Option<usize>| {
            let rows: Vec<device::Row> =
                (from..to).map(|pos| device::Row { pos, seq: 0 }).collect();
            let tokens: Vec<u32> = (from..to).map(|p| (p * 7 + 3) as u32).collect();
            seq.enter((from..to).zip(tokens.iter().copied()), drafts);
            exec.forward(
                &mut [&mut seq.kv],
                &rows,
                Enter::Tokens(&tokens),
                Out::Nothing,
            )
            .unwrap();
        };
    forward(&mut exec, &mut seq, 0, 10, None);
    forward(&mut exec, &mut seq, 10, 14, Some(11));
    assert_eq!(seq.truncate(&mut exec, 12).unwrap(), 1, "row 11 again");
    assert_eq!(seq.kv.len(), 12);
    forward(&mut exec, &mut seq, 12, 16, None);
    assert_eq!(
        seq.truncate(&mut exec, 14).unwrap(),
        14,
        "no checkpoint: all again"
    );
    assert_eq!(seq.truncate(&mut exec, 20).unwrap(), 0, "nothing to cut");
    assert_eq!(seq.kv.len(), 14);
}

/// A first stage that loses its sessions at every fifth forward, as a box restarted between
/// two forwards of a step, and refuses a replayed row whose token is not the one it first
/// computed there (as a box's state hash would).
struct Flaky {
    inner: LocalFront,
    calls: usize,
    seen: HashMap<(u64, usize), u32>,
}

impl engine::Front for Flaky {
    fn forward(
        &mut self,
        rows: &[(u64, usize, u32)],
        drafts_from: &[(u64, usize)],
        images: &[engine::Placed<'_>],
        hidden: &mut [f32],
    ) -> Result<(), String> {
        self.calls += 1;
        if self.calls.is_multiple_of(5) {
            self.inner.reconnect()?;
            return Err("the front restarted".into());
        }
        self.seen.extend(rows.iter().map(|&(s, p, t)| ((s, p), t)));
        self.inner.forward(rows, drafts_from, images, hidden)
    }
    fn submit(&mut self, rows: &[(u64, usize, u32)], d: &[(u64, usize)]) -> Result<(), String> {
        self.inner.submit(rows, d)
    }
    fn truncate(&mut self, session: u64, len: usize) -> Result<(), String> {
        self.inner.truncate(session, len)
    }
    fn release(&mut self, session: u64) -> Result<(), String> {
        self.inner.release(session)
    }
    fn reconnect(&mut self) -> Result<(), String> {
        self.inner.reconnect()
    }
    fn replay(&mut self, rows: &[(u64, usize, u32)]) -> Result<(), String> {
        if let Some(&(s, p, _)) = rows
            .iter()
            .find(|&&(s, p, t)| self.seen.get(&(s, p)) != Some(&t))
        {
            return Err(format!(
                "session {s} position {p} replayed with another token"
            ));
        }
        self.inner.replay(rows)
    }
    fn grace(&self) -> std::time::Duration {
        self.inner.grace()
    }
    fn pipelined(&self) -> bool {
        false
    }
    fn stream(&mut self, session: u64, from: usize, tokens: &[u32]) -> Result<(), String> {
        self.inner.stream(session, from, tokens)
    }
    fn streams(&self, session: u64) -> bool {
        self.inner.streams(session)
    }
    fn heartbeat(&mut self) -> Result<(), String> {
        self.inner.heartbeat()
    }
    fn take_busy(&mut self) -> Vec<(std::time::Instant, std::time::Instant)> {
        self.inner.take_busy()
    }
    fn stats(&self) -> engine::FrontStats {
        self.inner.stats()
    }
}

/// qwen35 split at block 2, its first stage lost at every fifth forward while 8 users'
/// steps (drafts every third wrong, several forwards a step) run: every live session is
/// replayed with the tokens its rows were computed with — a step's drafts, whatever its
/// verification made of them so far — and each user gets the whole model's tokens.
#[test]
fn a_front_lost_mid_step_is_replayed_with_the_rows_it_computed() {
    let dir = tempfile::tempdir().unwrap();
    let path = &models(dir.path())[1];
    let (prompts, want) = (prompts(path), whole_answers(path));
    let handle = split_with_wrong_drafts(path, 2, &want, |inner| {
        Box::new(Flaky {
            inner,
            calls: 0,
            seen: HashMap::new(),
        })
    });
    let got = common::run_all(&handle, &prompts, 16);
    for (i, ((tokens, _), w)) in got.iter().zip(&want).enumerate() {
        assert_eq!(tokens, &w.0, "prompt {i}");
    }
}

/// The whole model's 16 greedy tokens for each of [`prompts`], 8 users at once.
fn whole_answers(path: &Path) -> Vec<(Vec<u32>, engine::Summary)> {
    common::run_all(&start(path, 8, None), &prompts(path), 16)
}

/// An engine of 8 slots on `path` split at block `at`, its first stage `front` made of a
/// [`LocalFront`], drafting the answers `want` to [`prompts`] 4 at a time, every third wrong.
fn split_with_wrong_drafts(
    path: &Path,
    at: usize,
    want: &[(Vec<u32>, engine::Summary)],
    front: impl FnOnce(LocalFront) -> Box<dyn engine::Front>,
) -> EngineHandle {
    let scripts = prompts(path)
        .iter()
        .zip(want)
        .map(|(p, w)| p.iter().chain(&w.0).copied().collect())
        .collect();
    let spec = SpecConfig {
        n_max: 4,
        policy: PolicyKind::Fixed,
        ..SpecConfig::default()
    };
    let spec = Speculation::with(Scripted::new(scripts, 3, 0), spec);
    let cfg = config(8, engine::DeviceKind::Cpu);
    let first = Model::load_stage(path, Part::First(at)).unwrap();
    let last = Model::load_stage(path, Part::Last(at)).unwrap();
    let tok = Tokenizer::from_gguf(&last.file.header.metadata).unwrap();
    let first = front(LocalFront::new(first, cfg.context_config()).unwrap());
    engine::start(last, Arc::new(tok), cfg, Some(spec), Some(first)).unwrap()
}
