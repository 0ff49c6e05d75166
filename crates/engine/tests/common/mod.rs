//! Shared helpers for the engine's model tests.

use std::path::PathBuf;

/// A real model from the cache (`$TANDEM_MODELS` or `<user cache>/tandem/models`).
pub fn model_path(file: &str, name: &str) -> PathBuf {
    let dir = std::env::var_os("TANDEM_MODELS")
        .map(PathBuf::from)
        .unwrap_or_else(|| dirs::cache_dir().unwrap().join("tandem").join("models"));
    let p = dir.join(file);
    assert!(
        p.is_file(),
        "{} missing: run `tandem pull {name}`",
        p.display()
    );
    p
}

pub fn log_softmax(logits: &[f32]) -> Vec<f64> {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    let lse = logits
        .iter()
        .map(|&v| (v as f64 - max).exp())
        .sum::<f64>()
        .ln()
        + max;
    logits.iter().map(|&v| v as f64 - lse).collect()
}

pub fn ids(v: &serde_json::Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_u64().unwrap() as u32)
        .collect()
}

/// `(file name, pull name)` of the three real models, by golden-file stem.
pub const MODELS: [(&str, &str, &str); 4] = [
    (
        "smollm2-135m-instruct-q4_1",
        "SmolLM2-135M-Instruct.Q4_1.gguf",
        "smollm2-135m",
    ),
    (
        "qwen2.5-coder-0.5b-instruct-q4_k_m",
        "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
        "qwen2.5-coder-0.5b",
    ),
    (
        "qwen2.5-coder-1.5b-instruct-q4_k_m",
        "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
        "qwen2.5-coder-1.5b",
    ),
    (
        "gemma-3-270m-q4_k_m",
        "gemma-3-270m-q4_k_m.gguf",
        "gemma3-270m",
    ),
];

/// Short prompts of different kinds (prose, code, SQL, verse), for the SmolLM2 engine tests.
pub const PROMPTS: [&str; 8] = [
    "The capital of France is",
    "def fibonacci(n):",
    "Once upon a time, in a small village,",
    "The three laws of thermodynamics are",
    "SELECT name FROM users WHERE",
    "A haiku about the sea:",
    "To make bread, you need",
    "In 1969, the first humans",
];

/// An engine of `n_parallel` slots over `n_ctx` positions (one pool when `kv_unified`) on
/// the CPU: batches of 64 rows in forwards of 32, 2 threads, an f16 cache.
pub fn engine_config(n_ctx: usize, n_parallel: usize, kv_unified: bool) -> engine::EngineConfig {
    engine::EngineConfig {
        n_ctx,
        n_parallel,
        kv_unified,
        n_batch: 64,
        n_ubatch: 32,
        n_threads: 2,
        kv_type: gguf::GgmlType::F16,
        queue_limit: 64,
        device: engine::DeviceKind::Cpu,
        step_budget: engine::StepBudget::AUTO,
        swa_full: false,
        ctx_checkpoints: 8,
        cache_ram_mib: 0,
        cache_dir: None,
    }
}

/// A greedy request for `prompt` of at most `max_tokens` tokens, its end token ignored; an
/// embedding request instead when `embed` says how to pool.
pub fn request(
    prompt: Vec<u32>,
    max_tokens: usize,
    embed: Option<engine::Pooling>,
) -> engine::GenRequest {
    engine::GenRequest {
        prompt,
        sampling: engine::SamplerConfig::greedy(),
        dry: None,
        max_tokens: Some(max_tokens),
        stop: vec![],
        shown_tokens: vec![],
        ignore_eos: true,
        logit_bias: vec![],
        think_budget: None,
        constraint: None,
        logprobs: None,
        post_sampling: false,
        cache_prompt: true,
        progress: false,
        slot: None,
        max_predict_time: None,
        cache_namespace: kv::SHARED,
        draft: Default::default(),
        embed,
        context_shift: None,
        lora: None,
        images: Vec::new(),
    }
}

/// Greedy tokens of one sequence alone on `exec`: its prompt in one evaluation, then a
/// token a forward; its KV is released after.
pub fn greedy_alone(exec: &mut engine::Executor, prompt: &[u32], n: usize) -> Vec<u32> {
    let mut seq = kv::SeqKv::default();
    let mut sampler = engine::Sampler::new(engine::SamplerConfig::greedy());
    let (mut next, mut out) = (0, Vec::new());
    let last = engine::Outputs::Last;
    exec.eval(&mut seq, prompt, last, &mut |_, l| {
        next = sampler.sample(l, &[])
    })
    .unwrap();
    for _ in 0..n {
        out.push(next);
        exec.eval(&mut seq, &[next], last, &mut |_, l| {
            next = sampler.sample(l, &[])
        })
        .unwrap();
    }
    exec.release(&mut seq);
    out
}

/// `dir/{arch}.gguf`: 4 blocks of 64 (4 heads, 2 KV heads), Q8_0 random weights with
/// SmolLM2's tokenizer; qwen35's blocks 0 to 2 Gated DeltaNet (kernel 4, heads of 16, 2 key
/// and 4 value heads), block 3 gated attention.
pub fn write_synthetic(dir: &std::path::Path, arch: &str) -> PathBuf {
    let (_, file, name) = MODELS[0];
    let tokenizer = gguf::GgufFile::open(model_path(file, name)).unwrap();
    let path = dir.join(format!("{arch}.gguf"));
    let arch = model::Arch::from_name(arch).unwrap();
    model::synthetic::Synthetic::small(arch)
        .write(&tokenizer, &path)
        .unwrap();
    path
}

/// A nemotron_h_moe of 4 blocks of 64 (Mamba-2, a mixture, Mamba-2, attention: `MEM*`)
/// with SmolLM2's vocabulary in `dir`: Mamba-2 of 4 heads of 32 over a state of 16 in 2
/// groups, 2 of 8 experts of 32 and a shared one of 128, attention of 4 heads over 2.
pub fn write_nemotron_h(dir: &std::path::Path) -> PathBuf {
    let (_, file, name) = MODELS[0];
    let tokenizer = gguf::GgufFile::open(model_path(file, name)).unwrap();
    let path = dir.join("nemotron_h_moe.gguf");
    model::synthetic::nemotron_h::NemotronShape {
        n_embd: 64,
        pattern: "MEM*".into(),
        n_head: 4,
        n_head_kv: 2,
        n_ff: 128,
        experts: Some(model::synthetic::ExpertShape {
            n_expert: 8,
            n_expert_used: 2,
            n_ff_exp: 32,
        }),
        mamba: model::layers::mamba2::Mamba2Shape {
            conv_kernel: 4,
            d_inner: 128,
            d_state: 16,
            n_head: 4,
            n_group: 2,
        },
        ty: gguf::GgmlType::Q8_0,
        seed: 5,
    }
    .write_vocab(&model::synthetic::Vocab::copied(&tokenizer).unwrap(), &path)
    .unwrap();
    path
}

/// A deepseek4 of 4 blocks of 64 (heads of 32, blocks compressed at ratios 4, 128, 4 and not
/// at all, 4 streams, block 0 routed by token) with SmolLM2's vocabulary, at `path`: a
/// `window`-key window, the indexer's `indexer_heads` heads picking `top_k` blocks.
pub fn write_deepseek4(path: &std::path::Path, window: usize, indexer_heads: usize, top_k: usize) {
    let (_, file, name) = MODELS[0];
    let tokenizer = gguf::GgufFile::open(model_path(file, name)).unwrap();
    deepseek4_shape(window, indexer_heads, top_k)
        .write(&model::synthetic::Vocab::copied(&tokenizer).unwrap(), path)
        .unwrap();
}

/// The shape [`write_deepseek4`] writes.
pub fn deepseek4_shape(
    window: usize,
    indexer_heads: usize,
    top_k: usize,
) -> model::synthetic::deepseek4::Dsv4Shape {
    model::synthetic::deepseek4::Dsv4Shape {
        n_embd: 64,
        n_layer: 4,
        n_head: 4,
        head_dim: 32,
        n_rot: 8,
        q_lora_rank: 32,
        o_groups: 2,
        o_lora_rank: 16,
        window,
        compress_ratios: vec![4, 128, 4, 0],
        indexer_heads,
        indexer_head_dim: 64,
        indexer_top_k: top_k,
        hash_layers: 1,
        experts: model::synthetic::ExpertShape {
            n_expert: 8,
            n_expert_used: 2,
            n_ff_exp: 32,
        },
        ty: gguf::GgmlType::Q8_0,
        seed: 5,
        ..Default::default()
    }
}

/// The tokens and summary of one request's stream (a failed request panics).
pub fn collect(mut events: engine::EventStream) -> (Vec<u32>, engine::Summary) {
    let mut tokens = Vec::new();
    loop {
        match events.blocking_recv().expect("engine answers") {
            engine::Event::Delta { tokens: ids, .. } => tokens.extend(ids),
            engine::Event::Done(s) => return (tokens, s),
            engine::Event::Rejected(m)
            | engine::Event::Failed(m)
            | engine::Event::Unavailable(m) => {
                panic!("request failed: {m}")
            }
            engine::Event::Embedding(_) => panic!("a generation request answered an embedding"),
            engine::Event::Progress(_) => {}
        }
    }
}

/// Greedy requests of `n` tokens for `prompts`, submitted at once: each one's tokens and
/// summary.
pub fn run_all(
    handle: &engine::EngineHandle,
    prompts: &[Vec<u32>],
    n: usize,
) -> Vec<(Vec<u32>, engine::Summary)> {
    let streams: Vec<_> = prompts
        .iter()
        .map(|p| handle.submit(request(p.clone(), n, None)).unwrap().1)
        .collect();
    streams.into_iter().map(collect).collect()
}

/// What [`drafts_equal_golden`] asks a drafter for at each call.
#[derive(Debug, Clone, Copy)]
pub enum Asked {
    /// As many drafts as llama.cpp drafted.
    AsDrafted,
    /// Up to `n` drafts at `p_min` (llama.cpp's were cut where the drafter's confidence
    /// fell below it), and at most the tokens left to generate but one, as llama-server
    /// asks: the drafter must stop where llama.cpp's stopped.
    Upto(usize, f32),
}

/// Compares `drafter`'s drafts with llama.cpp's in `golden` (a `scripts/golden_drafts.py`
/// file) call by call, `seq` being the prompt and the answer: each draft must be llama.cpp's
/// first candidate, or either of its top two where their probabilities are closer than
/// `tie` (after which, for a drafter whose drafts follow one another (`chained`) and where
/// it took the second, the call's later drafts are not compared: they follow another
/// token); at least 90% of the drafts must be compared.
/// `asked` says what each call asks for.
pub fn drafts_equal_golden(
    drafter: &mut dyn engine::speculative::Proposer,
    golden: &serde_json::Value,
    seq: &[u32],
    tie: f64,
    chained: bool,
    asked: Asked,
) {
    use engine::speculative::{Draft, DraftJob, DraftLog};
    let (mut compared, mut ties, mut total) = (0, 0, 0);
    for step in golden["steps"].as_array().unwrap() {
        let n_past = step["n_past"].as_u64().unwrap() as usize;
        assert_eq!(seq[n_past], step["id_last"].as_u64().unwrap() as u32);
        let cands = step["candidates"].as_array().unwrap();
        let (n_max, p_min) = match asked {
            Asked::AsDrafted => (cands.len(), 0.0),
            Asked::Upto(n, p) => (n.min(seq.len() - n_past - 2), p),
        };
        let job = DraftJob {
            slot: 0,
            tokens: &seq[..=n_past],
            n_max,
            sampling: engine::SamplerConfig::greedy(),
            p_min,
        };
        let mut out = [Draft::default()];
        drafter
            .propose(&[job], &mut out, &mut DraftLog::default())
            .unwrap();
        assert_eq!(out[0].len(), cands.len(), "a draft of every length asked");
        total += cands.len();
        for (i, c) in cands.iter().enumerate() {
            let top = |k: usize| (c[k][0].as_u64().unwrap() as u32, c[k][1].as_f64().unwrap());
            let ours = out[0].tokens[i];
            if top(0).1 - top(1).1 < tie {
                assert!(
                    ours == top(0).0 || ours == top(1).0,
                    "after {n_past} tokens, draft {i}: {ours} is neither of llama.cpp's tied {:?}",
                    [top(0), top(1)]
                );
                ties += 1;
                match chained && ours != top(0).0 {
                    true => break,
                    false => continue,
                }
            }
            assert_eq!(
                ours,
                top(0).0,
                "after {n_past} tokens, draft {i}: llama.cpp drafts {:?}",
                top(0)
            );
            compared += 1;
        }
    }
    assert!(
        compared * 10 >= total * 9,
        "only {compared} of {total} drafts compared ({ties} ties)"
    );
}

/// The drafts llama-server verified and accepted over its answer in `golden` (each call's
/// first candidates, or only its length where none was accepted, against the answer's next tokens, `seq` being the prompt and the
/// answer): `(verified, accepted)`, the accepted checked against its timings.
pub fn golden_verified_accepted(golden: &serde_json::Value, seq: &[u32]) -> (usize, usize) {
    let (mut verified, mut accepted) = (0, 0);
    for step in golden["steps"].as_array().unwrap() {
        let n_past = step["n_past"].as_u64().unwrap() as usize;
        let drafts = step["candidates"].as_array().unwrap();
        if let Some(n) = step.get("n_draft").filter(|_| drafts.is_empty()) {
            // Lengths alone (DFlash 2): a call's drafts are known to be rejected only
            // where none was accepted in the whole answer.
            assert_eq!(
                golden["draft_n_accepted"].as_u64(),
                Some(0),
                "drafts unknown"
            );
            verified += n.as_u64().unwrap().min(1) as usize;
            continue;
        }
        let a = drafts
            .iter()
            .map(|c| c[0][0].as_u64().unwrap() as u32)
            .zip(&seq[n_past + 1..])
            .take_while(|(d, t)| d == *t)
            .count();
        accepted += a;
        verified += (a + 1).min(drafts.len());
    }
    assert_eq!(
        accepted as u64,
        golden["draft_n_accepted"].as_u64().unwrap()
    );
    (verified, accepted)
}

/// A one-sequence CPU context of 512 positions with an f32 cache, as the drafter tests use.
pub fn f32_context() -> engine::ContextConfig {
    engine::ContextConfig {
        n_ctx: 512,
        n_ubatch: 64,
        n_threads: 2,
        device: engine::DeviceKind::Cpu,
        kv_type: gguf::GgmlType::F32,
        ..engine::ContextConfig::default()
    }
}

/// The target at `path`'s features of every position of `tokens`, as the engine hands a
/// drafter them ([`engine::speculative::Features`]): the states after blocks `taps` (each
/// `[hidden_width]`), then, with `last`, the normed final state (`[n_embd]`), side by side.
pub fn target_features(
    path: &std::path::Path,
    tokens: &[u32],
    taps: &[usize],
    last: bool,
) -> Vec<Vec<f32>> {
    use engine::{Enter, Executor, Out, RowOut, Taps};
    let model = model::Model::load(path).unwrap();
    let mut exec = Executor::new(model, f32_context()).unwrap();
    let parts = taps.len() + last as usize;
    let mut seq = kv::SeqKv::default();
    let mut features = vec![Vec::new(); tokens.len()];
    for (c, chunk) in tokens.chunks(64).enumerate() {
        let rows: Vec<device::Row> = (0..chunk.len())
            .map(|i| device::Row {
                pos: c * 64 + i,
                seq: 0,
            })
            .collect();
        let all: Vec<usize> = (0..chunk.len()).collect();
        let mut on_row = |r: usize, o: RowOut<'_>| {
            let (k, state) = match o {
                RowOut::Tap { layer, state } => {
                    (taps.iter().position(|&l| l == layer).unwrap(), state)
                }
                RowOut::State(state) => (taps.len(), state),
                RowOut::Logits(_) => return,
            };
            let f = &mut features[c * 64 + r];
            f.resize(parts * state.len(), f32::NAN);
            f[k * state.len()..(k + 1) * state.len()].copy_from_slice(state);
        };
        let states: &[usize] = if last { &all } else { &[] };
        let out = Out::Rows {
            logits: &[],
            states,
            taps: Taps {
                layers: taps,
                rows: &all,
            },
            on_row: &mut on_row,
        };
        exec.forward(&mut [&mut seq], &rows, Enter::Tokens(chunk), out)
            .unwrap();
    }
    features
}

/// llama-mtmd-cli's dump of an image's embeddings (`tests/golden/NAME`: `[i32 n_tokens][i32
/// n_embd][f32 …]`): its rows and their values.
pub fn image_rows(name: &str) -> (usize, Vec<f32>) {
    let bytes = std::fs::read(std::path::Path::new("tests/golden").join(name)).unwrap();
    let n = i32::from_le_bytes(bytes[..4].try_into().unwrap()) as usize;
    let values = bytes[8..]
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
        .collect();
    (n, values)
}

/// The tokens of `text[0]` (with BOS), `n` placeholders for an image's rows, then
/// `text[1]`; and where the image starts.
pub fn pictured(tok: &text::Tokenizer, text: [&str; 2], n: usize) -> (Vec<u32>, usize) {
    let mut prompt = tok.encode(text[0], true, true).unwrap();
    let at = prompt.len();
    prompt.extend(std::iter::repeat_n(0, n));
    prompt.extend(tok.encode(text[1], false, true).unwrap());
    (prompt, at)
}

/// The target of a DSpark drafter over DeepSeek-V4 stages ([`write_dsv4`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dsv4Target {
    /// The llama of `scripts/gen_drafter_golden.sh` (256 × 6, f32): llama.cpp reads it the
    /// same whether a token is decoded alone or verified among drafts, so its drafter's
    /// features, and drafts, are golden data.
    Llama,
    /// The deepseek4 `tandem synth --arch deepseek4` writes by default (6 blocks of 256, 4
    /// streams, f32, no NextN block): the seeds' pairing.
    Deepseek4,
    /// A deepseek4 of 2 blocks of 64, its drafter one stage reading block 1's input, which
    /// lavapipe runs in seconds.
    Small,
}

/// A target and a DSpark drafter over DeepSeek-V4 stages in `dir`: two stages of the
/// target's width (no compression, routed by score, a window of 16) reading the inputs of
/// blocks 1, 3 and 5 (one stage reading block 1's for [`Dsv4Target::Small`]), each using all
/// 4 of its experts (a random router ties otherwise every few hundred tokens, which the two
/// implementations' rounding breaks differently), with a Markov
/// head of rank 32 (and its confidence head), a block of 8, its own embeddings and head.
pub fn write_dsv4(
    dir: &std::path::Path,
    confidence: bool,
    target: Dsv4Target,
) -> (std::path::PathBuf, std::path::PathBuf) {
    let (_, file, name) = MODELS[0];
    let tokenizer = gguf::GgufFile::open(model_path(file, name)).unwrap();
    let vocab = model::synthetic::Vocab::cut(&tokenizer, 320).unwrap();
    let (t, drafter) = (dir.join("t.gguf"), dir.join("d.gguf"));
    let shape = match target {
        Dsv4Target::Small => model::synthetic::deepseek4::Dsv4Shape {
            n_layer: 2,
            compress_ratios: vec![4, 128],
            ..deepseek4_shape(8, 4, 2)
        },
        _ => model::synthetic::deepseek4::Dsv4Shape::default(),
    };
    match target {
        Dsv4Target::Llama => model::synthetic::Synthetic {
            arch: model::Arch::from_name("llama").unwrap(),
            n_embd: 256,
            n_layer: 6,
            n_head: 4,
            n_head_kv: 2,
            n_ff: 512,
            experts: None,
            delta: None,
            nextn: 0,
            window: None,
            ty: gguf::GgmlType::F32,
            seed: 7,
        }
        .write_vocab(&vocab, &t),
        _ => model::synthetic::deepseek4::Dsv4Shape {
            nextn: 0,
            ty: gguf::GgmlType::F32,
            seed: 3,
            ..shape.clone()
        }
        .write(&vocab, &t),
    }
    .unwrap();
    let (n_layer, target_layers) = match target {
        Dsv4Target::Small => (1, vec![1]),
        _ => (2, vec![1, 3, 5]),
    };
    let backbone = model::synthetic::deepseek4::Dsv4Shape {
        n_layer,
        ty: gguf::GgmlType::F32,
        experts: model::synthetic::ExpertShape {
            n_expert: 4,
            n_expert_used: 4,
            ..shape.experts
        },
        ..shape
    };
    model::synthetic::dflash::DflashShape {
        n_embd: backbone.n_embd,
        n_layer,
        n_head: backbone.n_head,
        n_head_kv: 1,
        n_ff: 2816,
        target_layers,
        block: 8,
        own_head: true,
        draft_vocab: None,
        ty: gguf::GgmlType::F32,
        seed: 19,
        dspark: Some(model::synthetic::dflash::Dspark {
            rank: 32,
            confidence,
            from_anchor: true,
        }),
        dflash2: None,
        backbone: Some(backbone),
    }
    .write(&vocab, &drafter)
    .unwrap();
    (t, drafter)
}
