//! The multi-user engine on SmolLM2-135M: continuous batching, preemption and the prefix
//! cache give the same greedy tokens as one sequence evaluated alone.

#[allow(dead_code)]
mod common;

use std::sync::Arc;

use common::{model_path, MODELS, PROMPTS};
use engine::speculative::{Ngram, PolicyKind, Scripted, SpecConfig, Speculation};
use engine::{
    ContextConfig, EngineConfig, EngineHandle, Event, Executor, FinishReason, GenRequest, Outputs,
    Summary,
};
use gguf::GgmlType;
use model::Model;
use text::Tokenizer;

/// Engines here measure their costs when they start and plan steps by them, and two
/// tests are timed: each test runs alone, so that another test's model loading or forwards
/// do not enter this one's measurements.
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn load() -> (Model, Arc<Tokenizer>) {
    let (_, file, name) = MODELS[0];
    let model = Model::load(model_path(file, name)).unwrap();
    let tok = Tokenizer::from_gguf(&model.file.header.metadata).unwrap();
    (model, Arc::new(tok))
}

fn config(n_ctx: usize, n_parallel: usize) -> EngineConfig {
    EngineConfig {
        n_ctx,
        n_parallel,
        kv_unified: true,
        n_batch: 64,
        n_ubatch: 32,
        n_threads: 2,
        kv_type: GgmlType::F16,
        queue_limit: 64,
        device: engine::DeviceKind::Cpu,
        step_budget: engine::StepBudget::AUTO,
        swa_full: false,
        ctx_checkpoints: 8,
        cache_ram_mib: 0,
        cache_dir: None,
    }
}

fn greedy(prompt: Vec<u32>, max_tokens: usize) -> GenRequest {
    common::request(prompt, max_tokens, None)
}

/// Collects a request's tokens, text and summary.
fn collect(mut events: engine::EventStream) -> (Vec<u32>, String, Summary) {
    let (mut tokens, mut text) = (Vec::new(), String::new());
    loop {
        match events.blocking_recv().expect("engine answers") {
            Event::Delta {
                text: t,
                tokens: ids,
                ..
            } => {
                tokens.extend(ids);
                text.push_str(&t);
            }
            Event::Done(s) => return (tokens, text, s),
            Event::Rejected(m) | Event::Failed(m) | Event::Unavailable(m) => {
                panic!("request failed: {m}")
            }
            Event::Embedding(_) => panic!("a generation request answered an embedding"),
            Event::Progress(_) => {}
        }
    }
}

/// Greedy tokens of one sequence through the single-sequence context.
fn reference(model: &Model, prompt: &[u32], n: usize) -> Vec<u32> {
    let mut ctx = Executor::new(
        Model::load(&model.file.path).unwrap(),
        ContextConfig {
            n_ctx: 512,
            n_ubatch: 32,
            n_threads: 2,
            kv_type: GgmlType::F16,
            ..ContextConfig::default()
        },
    )
    .unwrap();
    common::greedy_alone(&mut ctx, prompt, n)
}

fn run_all(handle: &EngineHandle, prompts: &[Vec<u32>], n: usize) -> Vec<(Vec<u32>, Summary)> {
    let streams: Vec<_> = prompts
        .iter()
        .map(|p| handle.submit(greedy(p.clone(), n)).unwrap().1)
        .collect();
    streams
        .into_iter()
        .map(|s| {
            let (t, _, sum) = collect(s);
            (t, sum)
        })
        .collect()
}

fn snapshot(handle: &EngineHandle) -> engine::Snapshot {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
        .block_on(handle.snapshot())
        .unwrap()
}

#[test]
fn batched_greedy_equals_alone_and_single_context() {
    let _serial = serial();
    let (model, tok) = load();
    let prompts: Vec<Vec<u32>> = PROMPTS
        .iter()
        .map(|p| tok.encode(p, true, false).unwrap())
        .collect();
    let want: Vec<Vec<u32>> = prompts.iter().map(|p| reference(&model, p, 24)).collect();
    let handle = engine::start(model, tok, config(2048, 8), None, None).unwrap();
    for (p, w) in prompts.iter().zip(&want).take(2) {
        assert_eq!(&run_all(&handle, std::slice::from_ref(p), 24)[0].0, w);
    }
    let together = run_all(&handle, &prompts, 24);
    for ((got, summary), w) in together.iter().zip(&want) {
        assert_eq!(got, w);
        assert_eq!(summary.finish, FinishReason::MaxTokens);
        assert_eq!(summary.predicted_n, 24);
    }
}

#[test]
fn preemption_under_a_small_pool_keeps_the_tokens() {
    let _serial = serial();
    let (model, tok) = load();
    let prompts: Vec<Vec<u32>> = PROMPTS[..4]
        .iter()
        .map(|p| tok.encode(p, true, false).unwrap())
        .collect();
    let want: Vec<Vec<u32>> = prompts.iter().map(|p| reference(&model, p, 40)).collect();
    // 96 positions for 4 sequences of ~50: they cannot all be resident at once.
    let handle = engine::start(model, tok, config(96, 4), None, None).unwrap();
    let got = run_all(&handle, &prompts, 40);
    for ((g, _), w) in got.iter().zip(&want) {
        assert_eq!(g, w);
    }
    assert!(snapshot(&handle).counters.requests.preemptions_total > 0);
}

/// A prompt read one row per step while another request streams (the step budget at 1×
/// the decoding step leaves prompts the one row every step gets) gives the tokens it gives
/// alone, and the stream goes on receiving tokens meanwhile.
#[test]
fn a_prompt_read_in_chunks_while_another_streams_gives_its_tokens_alone() {
    let _serial = serial();
    let (model, tok) = load();
    let long = tok
        .encode(&PROMPTS.join(" ").repeat(2), true, false)
        .unwrap();
    let short = tok.encode(PROMPTS[0], true, false).unwrap();
    let (want_long, want_short) = (reference(&model, &long, 8), reference(&model, &short, 40));
    assert!(long.len() > 100, "{} tokens", long.len());
    let cfg = EngineConfig {
        step_budget: engine::StepBudget::Times(100),
        ..config(1024, 2)
    };
    let handle = engine::start(model, tok, cfg, None, None).unwrap();
    let timed = |mut events: engine::EventStream, first: Option<std::sync::mpsc::Sender<()>>| {
        let (mut tokens, mut at) = (Vec::new(), Vec::new());
        loop {
            match events.blocking_recv().expect("engine answers") {
                Event::Delta { tokens: ids, .. } => {
                    tokens.extend(ids);
                    at.push(std::time::Instant::now());
                    if let Some(tx) = &first {
                        let _ = tx.send(());
                    }
                }
                Event::Done(_) => return (tokens, at),
                other => panic!("request failed: {other:?}"),
            }
        }
    };
    let (started, streaming) = std::sync::mpsc::channel();
    let stream = handle.submit(greedy(short, 40)).unwrap().1;
    let streamer = std::thread::spawn(move || timed(stream, Some(started)));
    streaming.recv().unwrap();
    let sent = std::time::Instant::now();
    let (got_long, long_at) = timed(handle.submit(greedy(long, 8)).unwrap().1, None);
    let (got_short, short_at) = streamer.join().unwrap();
    assert_eq!(got_long, want_long, "the chunked prompt's tokens");
    assert_eq!(got_short, want_short, "the stream's tokens");
    let meanwhile = short_at
        .iter()
        .filter(|&&t| t > sent && t < long_at[0])
        .count();
    assert!(
        meanwhile >= 30,
        "the stream got {meanwhile} of its 40 tokens while the prompt was read"
    );
}

#[test]
fn requests_running_at_once_share_their_common_prefix_and_keep_their_tokens() {
    let _serial = serial();
    let (model, tok) = load();
    let text = PROMPTS.join(" ").repeat(2);
    let prompt = tok.encode(&text, true, false).unwrap();
    let want = reference(&model, &prompt, 64);
    let handle = engine::start(model, tok.clone(), config(2048, 4), None, None).unwrap();
    let mut first = handle.submit(greedy(prompt.clone(), 64)).unwrap().1;
    let mut tokens = match first.blocking_recv().expect("engine answers") {
        Event::Delta { tokens, .. } => tokens,
        other => panic!("expected the first token, got {other:?}"),
    };
    // The first request is decoding, and goes on after the second is done: its prompt's
    // full blocks are computed and held, and the second holds them too.
    let second = handle.submit(greedy(prompt.clone(), 24)).unwrap().1;
    let (shared, _, summary) = collect(second);
    let (rest, _, _) = collect(first);
    tokens.extend(rest);
    assert_eq!(summary.cache_n, (prompt.len() - 1) / 16 * 16);
    assert_eq!(tokens, want);
    assert_eq!(shared, want[..24], "a shared prefix gives the same tokens");
    // Both let go: every block is free again or in the prefix cache, none lost.
    let (again, _) = run_all(&handle, std::slice::from_ref(&prompt), 64).remove(0);
    assert_eq!(again, want);
    let free = snapshot(&handle);
    assert_eq!(
        free.kv_blocks_free + free.kv_blocks_cached,
        free.kv_blocks_total
    );
}

#[test]
fn prefix_cache_reuses_a_resumed_conversation() {
    let _serial = serial();
    let (model, tok) = load();
    let text = PROMPTS.join(" ").repeat(3);
    let prompt = tok.encode(&text, true, false).unwrap();
    let handle = engine::start(model, tok.clone(), config(1024, 2), None, None).unwrap();
    let (first, cold) = run_all(&handle, std::slice::from_ref(&prompt), 8).remove(0);
    assert_eq!(cold.cache_n, 0);
    let mut turn2 = prompt.clone();
    turn2.extend(&first);
    turn2.extend(tok.encode(" And then", false, false).unwrap());
    let (_, warm) = run_all(&handle, std::slice::from_ref(&turn2), 8).remove(0);
    let full_blocks = (prompt.len() + first.len() - 1) / 16 * 16;
    assert_eq!(warm.cache_n, full_blocks);
    let (again, _) = run_all(&handle, std::slice::from_ref(&prompt), 8).remove(0);
    assert_eq!(again, first, "reused KV gives the same tokens");
}

/// A conversation whose blocks the pool gave up to another's is read back from the host
/// tier (`--cache-ram`) with the same tokens; without the tier it is computed again.
#[test]
fn the_host_tier_gives_back_a_conversation_the_pool_gave_up() {
    let _serial = serial();
    let (model, tok) = load();
    let prompt = tok
        .encode(&PROMPTS.join(" ").repeat(3), true, false)
        .unwrap();
    let other = tok
        .encode(&PROMPTS.join(" - ").repeat(4), true, false)
        .unwrap();
    let n_ctx = (other.len() + 8).div_ceil(16) * 16 + 32;
    assert!(
        prompt.len() + other.len() > n_ctx,
        "the pool holds one of them"
    );
    let turn = |mib: usize| {
        let cfg = EngineConfig {
            cache_ram_mib: mib,
            ..config(n_ctx, 1)
        };
        let handle = engine::start(load().0, tok.clone(), cfg, None, None).unwrap();
        let (first, _) = run_all(&handle, std::slice::from_ref(&prompt), 8).remove(0);
        run_all(&handle, std::slice::from_ref(&other), 8);
        let mut turn2 = prompt.clone();
        turn2.extend(&first);
        turn2.extend(tok.encode(" And then", false, false).unwrap());
        let (second, warm) = run_all(&handle, std::slice::from_ref(&turn2), 8).remove(0);
        (
            second,
            warm.cache_n,
            (prompt.len() + first.len() - 1) / 16 * 16,
        )
    };
    let (want, cold, _) = turn(0);
    let (got, warm, full_blocks) = turn(64);
    assert!(
        cold <= full_blocks / 4,
        "the pool gave most of it up: {cold} kept"
    );
    assert_eq!(warm, full_blocks, "read back from host memory");
    assert_eq!(got, want);
    drop(model);
}

#[test]
fn stop_strings_end_the_text_and_dropped_requests_free_their_slot() {
    let _serial = serial();
    let (model, tok) = load();
    let prompt = tok.encode(PROMPTS[2], true, false).unwrap();
    let handle = engine::start(model, tok, config(1024, 2), None, None).unwrap();
    let (_, full, _) = collect(handle.submit(greedy(prompt.clone(), 30)).unwrap().1);
    let cut = full.char_indices().nth(full.chars().count() / 2).unwrap().0;
    let word: String = full[cut..].chars().take(3).collect();
    let mut req = greedy(prompt.clone(), 30);
    req.stop = vec![word.clone()];
    let (_, text, s) = collect(handle.submit(req).unwrap().1);
    assert_eq!(s.finish, FinishReason::StopWord(word.clone()));
    assert_eq!(text, full[..full.find(&word).unwrap()]);

    let (_, events) = handle.submit(greedy(prompt, 200)).unwrap();
    drop(events);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
    loop {
        let snap = snapshot(&handle);
        if snap.slots.iter().all(|s| s.task.is_none()) && snap.n_queued == 0 {
            assert_eq!(snap.counters.requests.requests_cancelled, 1);
            break;
        }
        assert!(std::time::Instant::now() < deadline, "slot still busy");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

fn spec(n_max: usize, policy: PolicyKind) -> SpecConfig {
    SpecConfig {
        n_max,
        policy,
        ..SpecConfig::default()
    }
}

#[test]
fn speculation_gives_the_plain_text_alone_and_with_8_users() {
    let _serial = serial();
    let (model, tok) = load();
    let prompts: Vec<Vec<u32>> = PROMPTS
        .iter()
        .map(|p| tok.encode(p, true, false).unwrap())
        .collect();
    let n = 40;
    let plain = engine::start(model, tok.clone(), config(4096, 8), None, None).unwrap();
    let want: Vec<Vec<u32>> = run_all(&plain, &prompts, n)
        .into_iter()
        .map(|r| r.0)
        .collect();
    let (_, stop_text, _) = collect(plain.submit(greedy(prompts[2].clone(), n)).unwrap().1);
    let word: String = stop_text.chars().skip(20).take(4).collect();
    let mut stopped = greedy(prompts[2].clone(), n);
    stopped.stop = vec![word.clone()];
    let (_, plain_stopped, _) = collect(plain.submit(stopped.clone()).unwrap().1);
    drop(plain);
    let scripts: Vec<Vec<u32>> = prompts
        .iter()
        .zip(&want)
        .map(|(p, w)| p.iter().chain(w).copied().collect())
        .collect();
    // The adaptive policy drafts only when it pays, so its arms use drafters that cost
    // nothing (a self-draft costs as much as the target: it is rightly never started).
    let arms: Vec<(&str, Speculation, bool)> = vec![
        (
            "self-draft, fixed",
            Speculation::draft_model(load().0, spec(4, PolicyKind::Fixed)),
            true,
        ),
        (
            "scripted and always right, adaptive",
            Speculation::with(
                Scripted::new(scripts.clone(), 0, 0),
                spec(6, PolicyKind::Adaptive),
            ),
            true,
        ),
        (
            "n-gram, fixed",
            Speculation::with(Ngram::default(), spec(6, PolicyKind::Fixed)),
            false,
        ),
        (
            "n-gram, adaptive",
            Speculation::with(Ngram::default(), spec(6, PolicyKind::Adaptive)),
            false,
        ),
        (
            "scripted, every third position wrong",
            Speculation::with(
                Scripted::new(scripts.clone(), 3, 0),
                spec(5, PolicyKind::Fixed),
            ),
            false,
        ),
    ];
    for (name, s, all_accepted) in arms {
        let handle = engine::start(load().0, tok.clone(), config(4096, 8), Some(s), None).unwrap();
        let alone = run_all(&handle, &prompts[..1], n);
        assert_eq!(alone[0].0, want[0], "{name}: alone");
        let together = run_all(&handle, &prompts, n);
        for (i, ((got, summary), w)) in together.iter().zip(&want).enumerate() {
            assert_eq!(got, w, "{name}: prompt {i} with 8 users");
            assert_eq!(summary.predicted_n, n);
            if all_accepted {
                assert_eq!(summary.draft_n, summary.draft_n_accepted, "{name}");
            }
        }
        let c = snapshot(&handle).counters;
        assert!(
            c.spec.spec_draft_tokens_total > 0,
            "{name}: nothing was drafted"
        );
        assert_eq!(
            all_accepted,
            c.spec.spec_accepted_tokens_total == c.spec.spec_draft_tokens_total,
            "{name}: {} of {} accepted",
            c.spec.spec_accepted_tokens_total,
            c.spec.spec_draft_tokens_total
        );
    }
    let exact = Speculation::with(Scripted::new(scripts, 0, 0), spec(8, PolicyKind::Fixed));
    let handle = engine::start(load().0, tok, config(4096, 8), Some(exact), None).unwrap();
    let (_, text, s) = collect(handle.submit(stopped).unwrap().1);
    assert_eq!(s.finish, FinishReason::StopWord(word));
    assert_eq!(text, plain_stopped, "a stop string inside an accepted run");
    assert!(s.draft_n_accepted > 0);
}

/// A tiny random model with SmolLM2's tokenizer (2 blocks of 64), for the reference
/// backend: its scalar ops are slow, and the scheduler's behaviour does not need a large
/// model.
fn tiny(dir: &std::path::Path) -> std::path::PathBuf {
    let (_, file, name) = MODELS[0];
    let tokenizer = gguf::GgufFile::open(model_path(file, name)).unwrap();
    let path = dir.join("tiny.gguf");
    model::synthetic::Synthetic {
        arch: model::Arch::from_name("llama").unwrap(),
        n_embd: 64,
        n_layer: 2,
        n_head: 4,
        n_head_kv: 2,
        n_ff: 128,
        experts: None,
        delta: None,
        nextn: 0,
        window: None,
        ty: GgmlType::Q8_0,
        seed: 11,
    }
    .write(&tokenizer, &path)
    .unwrap();
    path
}

/// On the reference backend: batched greedy equals the single-sequence executor's, a
/// small pool preempts and keeps the tokens, and the target as its own draft accepts
/// every token with the text unchanged.
#[test]
fn the_scheduler_on_the_reference_backend() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let path = tiny(dir.path());
    let (_, tok) = load();
    let prompts: Vec<Vec<u32>> = PROMPTS[..4]
        .iter()
        .map(|p| tok.encode(p, true, false).unwrap())
        .collect();
    let on_ref = |n_ctx, n_parallel| EngineConfig {
        device: engine::DeviceKind::Reference,
        ..config(n_ctx, n_parallel)
    };
    let n = 24;
    let mut ctx = Executor::new(
        Model::load(&path).unwrap(),
        ContextConfig {
            n_ctx: 512,
            device: engine::DeviceKind::Reference,
            ..ContextConfig::default()
        },
    )
    .unwrap();
    assert!(ctx.device().describe().starts_with("reference"));
    let want: Vec<Vec<u32>> = prompts
        .iter()
        .map(|p| {
            let mut seq = kv::SeqKv::default();
            let mut next = 0;
            let mut out = Vec::new();
            // The requests ignore end-of-generation tokens: they are never picked.
            let greedy = |l: &[f32]| {
                let mut l = l.to_vec();
                tok.eog_ids()
                    .iter()
                    .for_each(|&id| l[id as usize] = f32::NEG_INFINITY);
                engine::sampling::argmax(&l)
            };
            let mut pick = |_: usize, l: &[f32]| next = greedy(l);
            ctx.eval(&mut seq, p, Outputs::Last, &mut pick).unwrap();
            for _ in 0..n {
                out.push(next);
                let last = [next];
                let mut pick = |_: usize, l: &[f32]| next = greedy(l);
                ctx.eval(&mut seq, &last, Outputs::Last, &mut pick).unwrap();
            }
            ctx.release(&mut seq);
            out
        })
        .collect();
    let model = || Model::load(&path).unwrap();
    for (cfg, what) in [
        (on_ref(2048, 4), "batched"),
        (on_ref(96, 4), "a small pool"),
    ] {
        let handle = engine::start(model(), tok.clone(), cfg, None, None).unwrap();
        let got = run_all(&handle, &prompts, n);
        for ((g, _), w) in got.iter().zip(&want) {
            assert_eq!(g, w, "{what}");
        }
        if cfg.n_ctx == 96 {
            assert!(snapshot(&handle).counters.requests.preemptions_total > 0);
        }
    }
    let s = Speculation::draft_model(model(), spec(4, PolicyKind::Fixed));
    let handle = engine::start(model(), tok, on_ref(2048, 4), Some(s), None).unwrap();
    for ((got, summary), w) in run_all(&handle, &prompts, n).iter().zip(&want) {
        assert_eq!(got, w, "self-draft");
        assert!(summary.draft_n > 0);
        assert_eq!(summary.draft_n, summary.draft_n_accepted, "self-draft");
    }
}

/// A drafter wrong on the first 8 tokens of every answer is paused: the target then
/// computes the rows plain decoding computes, and nothing else but the draft rows
/// rejected when the paused drafter probes; once resumed after the 8th token (by a probe
/// or the policy's choice) it catches up on everything missed and its drafts are
/// accepted; the texts are the plain ones.
///
/// Whether the policy pauses and resumes is its reading of the measured step costs: it
/// pauses where rejected drafts cost, and probes where accepted ones would pay. On this
/// machine each is clear only by some percent (on the CPU backend two rows cost little
/// more than one, on the reference backend a row costs about a token), and one noisy
/// measurement tips it. So each run's texts and rows are checked, and the run is repeated,
/// up to [`ATTEMPTS`] times, until one has both paused and accepted drafts.
#[test]
fn paused_drafts_leave_the_plain_rows() {
    const ATTEMPTS: usize = 5;
    let _serial = serial();
    let (_, tok) = load();
    let (_, file, name) = MODELS[0];
    let model = || Model::load(model_path(file, name)).unwrap();
    let prompts: Vec<Vec<u32>> = PROMPTS[..2]
        .iter()
        .map(|p| tok.encode(p, true, false).unwrap())
        .collect();
    let n = 40;
    let plain = engine::start(model(), tok.clone(), config(2048, 4), None, None).unwrap();
    let want: Vec<Vec<u32>> = run_all(&plain, &prompts, n)
        .into_iter()
        .map(|r| r.0)
        .collect();
    let plain_rows = snapshot(&plain).counters.tokens.rows_total;
    drop(plain);
    let longest = prompts.iter().map(Vec::len).max().unwrap();
    let scripts: Vec<Vec<u32>> = prompts
        .iter()
        .zip(&want)
        .map(|(p, w)| [p.as_slice(), w].concat())
        .collect();
    let mut runs = Vec::new();
    for _ in 0..ATTEMPTS {
        let drafter = Scripted::new(scripts.clone(), 0, longest + 8);
        let s = Speculation::with(drafter, spec(4, PolicyKind::Adaptive));
        let handle = engine::start(model(), tok.clone(), config(2048, 4), Some(s), None).unwrap();
        for ((got, _), w) in run_all(&handle, &prompts, n).iter().zip(&want) {
            assert_eq!(got, w, "across pause and resume");
        }
        let c = snapshot(&handle).counters;
        let rejected = c.spec.spec_rejected_rows_total;
        assert!(rejected >= c.spec.spec_draft_tokens_total - c.spec.spec_accepted_tokens_total);
        assert_eq!(
            c.tokens.rows_total - rejected,
            plain_rows,
            "the rows of plain decoding (an accepted draft row is the row of its token), and \
             the rejected draft rows of probes: {:?}",
            c.spec
        );
        if c.spec.spec_paused_slot_steps_total > 0 && c.spec.spec_accepted_tokens_total > 0 {
            return;
        }
        runs.push(c.spec);
    }
    panic!("no run both paused and accepted drafts: {runs:#?}");
}

/// Events of a request to its end: progress reports, the slot of each delta, the tokens.
fn with_progress(
    mut events: engine::EventStream,
) -> (Vec<engine::Progress>, Vec<usize>, Vec<u32>, Summary) {
    let (mut reports, mut slots, mut tokens) = (Vec::new(), Vec::new(), Vec::new());
    loop {
        match events.blocking_recv().expect("engine answers") {
            Event::Progress(p) => {
                assert!(tokens.is_empty(), "progress comes before the first token");
                reports.push(p);
            }
            Event::Delta {
                slot, tokens: t, ..
            } => {
                slots.push(slot);
                tokens.extend(t);
            }
            Event::Done(s) => return (reports, slots, tokens, s),
            other => panic!("request failed: {other:?}"),
        }
    }
}

/// A request that asks is told how far its prompt has been read, once before any row and
/// after each forward that read some of it; a request pinned to a slot runs there, one pinned
/// to a busy slot waits for it without holding up the requests behind it.
#[test]
fn progress_is_reported_per_forward_and_pinned_requests_keep_their_slot() {
    let _serial = serial();
    let (model, tok) = load();
    let long = tok.encode(&PROMPTS.join(" "), true, false).unwrap();
    let short = tok.encode(PROMPTS[0], true, false).unwrap();
    let handle = engine::start(model, tok, config(2048, 4), None, None).unwrap();

    let mut req = greedy(long.clone(), 4);
    (req.progress, req.slot) = (true, Some(3));
    let (reports, slots, _, _) = with_progress(handle.submit(req).unwrap().1);
    assert!(
        reports.len() >= 3,
        "{} rows in forwards of 32: {reports:?}",
        long.len()
    );
    assert_eq!((reports[0].processed, reports[0].cache), (0, 0));
    assert!(reports
        .windows(2)
        .all(|w| w[0].processed < w[1].processed && w[0].time_ms <= w[1].time_ms));
    let last = reports.last().unwrap();
    assert_eq!((last.processed, last.total), (long.len(), long.len()));
    assert!(slots.iter().all(|&s| s == 3), "{slots:?}");
    let (again, ..) = with_progress(handle.submit(greedy(long.clone(), 2)).unwrap().1);
    assert!(again.is_empty(), "no progress unless asked");

    let pinned = |n| {
        let mut r = greedy(short.clone(), n);
        r.slot = Some(0);
        r
    };
    let a = handle.submit(pinned(16)).unwrap().1;
    let b = handle.submit(pinned(8)).unwrap().1;
    let c = handle.submit(greedy(short.clone(), 8)).unwrap().1;
    let (a, b, c) = (with_progress(a), with_progress(b), with_progress(c));
    assert_eq!((a.3.slot, b.3.slot, c.3.slot), (0, 0, 1));
    assert_eq!(
        b.2,
        a.2[..8],
        "the pinned request that waited gives the same tokens"
    );
    assert_eq!(c.2, b.2);
}

/// After the idle time it is given, the engine releases its executor and prefix cache; the
/// next request builds them again and gives the same tokens. (With 100 ms of idle time the
/// engine could fall asleep again between a request's end and the check, on a loaded CI.)
#[test]
fn an_idle_engine_sleeps_and_the_next_request_wakes_it() {
    let _serial = serial();
    let (model, tok) = load();
    let prompt = tok.encode(&PROMPTS.join(" "), true, false).unwrap();
    let handle = engine::start(model, tok, config(2048, 2), None, None).unwrap();
    handle
        .sleep_after(Some(std::time::Duration::from_millis(1500)))
        .unwrap();
    let (first, _, _) = collect(handle.submit(greedy(prompt.clone(), 8)).unwrap().1);
    let (again, _, cached) = collect(handle.submit(greedy(prompt.clone(), 8)).unwrap().1);
    assert!(cached.cache_n > 0, "awake, the prefix is reused");
    assert!(!snapshot(&handle).sleeping);
    std::thread::sleep(std::time::Duration::from_millis(4000));
    let asleep = snapshot(&handle);
    assert!(asleep.sleeping && asleep.kv_blocks_free == asleep.kv_blocks_total);
    let (woken, _, summary) = collect(handle.submit(greedy(prompt, 8)).unwrap().1);
    assert_eq!((&first, &again), (&woken, &woken));
    assert_eq!(
        summary.cache_n, 0,
        "the prefix cache went with the executor"
    );
    assert!(!snapshot(&handle).sleeping);
    assert_eq!(snapshot(&handle).counters.requests.requests_done, 3);
}
