//! Taps: the hidden states of chosen blocks for chosen rows, as a drafter that reads the
//! target's features gets them, on SmolLM2-135M. A tap after block `l` is the state a
//! first stage of blocks `0..=l` gives for the row, bit for bit, and it does not depend on
//! the other rows of the forward; the engine hands a drafter the features of every row its
//! slot keeps, as a lone forward gives them.

#[allow(dead_code)]
mod common;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use common::{model_path, run_all, MODELS, PROMPTS};
use device::Row;
use engine::speculative::{
    Draft, DraftJob, DraftLog, Features, PolicyKind, Proposer, Scripted, SpecConfig, Speculation,
};
use engine::{ContextConfig, Enter, Executor, Out, RowOut, Taps};
use model::{Model, Part};
use text::Tokenizer;

fn executor(part: Part) -> Executor {
    let (_, file, name) = MODELS[0];
    let cfg = ContextConfig {
        n_ctx: 256,
        n_ubatch: 64,
        n_threads: 2,
        device: engine::DeviceKind::Cpu,
        n_seq: 2,
        ..ContextConfig::default()
    };
    Executor::new(
        Model::load_stage(model_path(file, name), part).unwrap(),
        cfg,
    )
    .unwrap()
}

const A: [u32; 7] = [1, 504, 3458, 282, 4649, 314, 2];
const B: [u32; 5] = [1, 1073, 8320, 355, 28];

/// The taps of `layers` for every row of sequence A (rows 0..7), alone or followed by
/// sequence B's rows in the same forward: `[layer][row]`.
fn taps(layers: &[usize], with_b: bool) -> Vec<Vec<Vec<f32>>> {
    let mut exec = executor(Part::Whole);
    let (mut a, mut b) = (kv::SeqKv::default(), kv::SeqKv::default());
    let mut rows: Vec<Row> = (0..A.len()).map(|pos| Row { pos, seq: 0 }).collect();
    let mut tokens = A.to_vec();
    if with_b {
        rows.extend((0..B.len()).map(|pos| Row { pos, seq: 1 }));
        tokens.extend(B);
    }
    let tapped: Vec<usize> = (0..A.len()).collect();
    let mut got = vec![vec![Vec::new(); A.len()]; layers.len()];
    let mut on_row = |r: usize, o: RowOut<'_>| {
        if let RowOut::Tap { layer, state } = o {
            let i = layers.iter().position(|&l| l == layer).unwrap();
            got[i][r] = state.to_vec();
        }
    };
    let out = Out::Rows {
        logits: &[],
        states: &[],
        taps: Taps {
            layers,
            rows: &tapped,
        },
        on_row: &mut on_row,
    };
    exec.forward(&mut [&mut a, &mut b], &rows, Enter::Tokens(&tokens), out)
        .unwrap();
    got
}

/// The final states of a first stage of blocks `0..n` for sequence A: `[row]`.
fn stage_states(n: usize) -> Vec<Vec<f32>> {
    let mut exec = executor(Part::First(n));
    let e = exec.model().hparams.n_embd;
    let mut seq = kv::SeqKv::default();
    let rows: Vec<Row> = (0..A.len()).map(|pos| Row { pos, seq: 0 }).collect();
    let mut states = vec![0f32; A.len() * e];
    exec.forward(
        &mut [&mut seq],
        &rows,
        Enter::Tokens(&A),
        Out::States(&mut states),
    )
    .unwrap();
    states.chunks(e).map(<[f32]>::to_vec).collect()
}

#[test]
fn a_tap_is_the_state_a_first_stage_ends_with_whatever_the_batch() {
    let layers = [0, 11, 28];
    let alone = taps(&layers, false);
    let batched = taps(&layers, true);
    assert_eq!(alone, batched, "taps do not depend on the other rows");
    for (i, &l) in layers.iter().enumerate() {
        assert_eq!(alone[i], stage_states(l + 1), "after block {l}");
    }
    assert_ne!(alone[0], alone[1], "blocks change the state");
}

#[test]
fn taps_outside_the_stage_or_out_of_order_are_refused() {
    let mut exec = executor(Part::Whole);
    let mut seq = kv::SeqKv::default();
    let rows = [Row { pos: 0, seq: 0 }];
    for layers in [&[40][..], &[5, 3]] {
        let out = Out::Rows {
            logits: &[],
            states: &[],
            taps: Taps { layers, rows: &[0] },
            on_row: &mut |_, _| {},
        };
        let e = exec.forward(&mut [&mut seq], &rows, Enter::Tokens(&[1]), out);
        assert!(e.is_err(), "{layers:?}");
    }
}

/// Per slot, the features the engine handed over, by position (a position seen again
/// drops what followed it, as the contract says).
type Seen = Arc<Mutex<Vec<BTreeMap<usize, Vec<f32>>>>>;

/// A scripted drafter that reads the target's taps after `TAPPED` and its final states.
struct Recorder {
    drafts: Scripted,
    seen: Seen,
}

const TAPPED: [usize; 2] = [0, 11];

impl Proposer for Recorder {
    fn name(&self) -> &str {
        "recorder"
    }

    fn propose(
        &mut self,
        jobs: &[DraftJob],
        out: &mut [Draft],
        log: &mut DraftLog,
    ) -> engine::Result<()> {
        self.drafts.propose(jobs, out, log)
    }

    fn release(&mut self, slot: usize) {
        self.drafts.release(slot);
    }

    fn features(&self) -> Features {
        Features {
            taps: TAPPED.to_vec(),
            last: true,
        }
    }

    fn observe_state(&mut self, slot: usize, pos: usize, state: &[f32]) {
        let mut seen = self.seen.lock().unwrap();
        if seen.len() <= slot {
            seen.resize(slot + 1, BTreeMap::new());
        }
        seen[slot].split_off(&pos);
        seen[slot].insert(pos, state.to_vec());
    }
}

/// The features of every row of `tokens` computed alone: the taps of `TAPPED`, then the
/// normed final state, by position.
fn alone(tokens: &[u32]) -> BTreeMap<usize, Vec<f32>> {
    let mut exec = executor(Part::Whole);
    let mut seq = kv::SeqKv::default();
    let rows: Vec<Row> = (0..tokens.len()).map(|pos| Row { pos, seq: 0 }).collect();
    let all: Vec<usize> = (0..tokens.len()).collect();
    let parts = TAPPED.len() + 1;
    let mut got = vec![Vec::new(); tokens.len()];
    let mut on_row = |r: usize, o: RowOut<'_>| {
        let (k, state) = match o {
            RowOut::Tap { layer, state } => {
                (TAPPED.iter().position(|&l| l == layer).unwrap(), state)
            }
            RowOut::State(state) => (TAPPED.len(), state),
            RowOut::Logits(_) => return,
        };
        let e = state.len();
        got[r].resize(parts * e, f32::NAN);
        got[r][k * e..(k + 1) * e].copy_from_slice(state);
    };
    let out = Out::Rows {
        logits: &[],
        states: &all,
        taps: Taps {
            layers: &TAPPED,
            rows: &all,
        },
        on_row: &mut on_row,
    };
    exec.forward(&mut [&mut seq], &rows, Enter::Tokens(tokens), out)
        .unwrap();
    got.into_iter().enumerate().collect()
}

/// Two requests at once, drafted for by a drafter wrong at every third position (its
/// rejected rows are computed and handed over, then replaced): at the end each slot's
/// features are, position by position and bit for bit, those of its prompt and answer
/// (but the last token, which no row computed) computed alone.
#[test]
fn a_drafter_is_handed_the_features_of_every_row_its_slot_keeps() {
    let (_, file, name) = MODELS[0];
    let model = || Model::load(model_path(file, name)).unwrap();
    let tok = Arc::new(Tokenizer::from_gguf(&model().file.header.metadata).unwrap());
    let prompts: Vec<Vec<u32>> = PROMPTS[..2]
        .iter()
        .map(|p| tok.encode(p, true, false).unwrap())
        .collect();
    let n = 24;
    let cfg = common::engine_config(1024, 2, true);
    let plain = engine::start(model(), tok.clone(), cfg, None, None).unwrap();
    let answers: Vec<Vec<u32>> = run_all(&plain, &prompts, n)
        .into_iter()
        .map(|r| r.0)
        .collect();
    drop(plain);
    let scripts: Vec<Vec<u32>> = prompts
        .iter()
        .zip(&answers)
        .map(|(p, a)| [p.as_slice(), a].concat())
        .collect();
    let seen: Seen = Arc::default();
    let recorder = Recorder {
        drafts: Scripted::new(scripts.clone(), 3, 0),
        seen: seen.clone(),
    };
    let spec = SpecConfig {
        n_max: 4,
        policy: PolicyKind::Fixed,
        ..SpecConfig::default()
    };
    let handle = engine::start(
        model(),
        tok,
        cfg,
        Some(Speculation::with(recorder, spec)),
        None,
    )
    .unwrap();
    let got = run_all(&handle, &prompts, n);
    assert!(
        got.iter().all(|(_, s)| s.draft_n > s.draft_n_accepted),
        "some drafts rejected"
    );
    for ((t, _), a) in got.iter().zip(&answers) {
        assert_eq!(t, a, "the plain answers");
    }
    // The step hands the features over after its forward, after the answers went out: a
    // snapshot is answered between steps.
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
        .block_on(handle.snapshot())
        .unwrap();
    let seen = seen.lock().unwrap();
    for script in &scripts {
        let want = alone(&script[..script.len() - 1]);
        assert!(
            seen.contains(&want),
            "no slot was handed the features of {} rows as computed alone",
            want.len()
        );
    }
}

/// A drafter that taps blocks the target's stage does not hold is refused at start.
#[test]
fn a_drafter_tapping_blocks_past_the_stage_is_refused() {
    let (_, file, name) = MODELS[0];
    let model = Model::load(model_path(file, name)).unwrap();
    let tok = Arc::new(Tokenizer::from_gguf(&model.file.header.metadata).unwrap());
    struct Far;
    impl Proposer for Far {
        fn name(&self) -> &str {
            "far"
        }
        fn propose(
            &mut self,
            _: &[DraftJob],
            _: &mut [Draft],
            _: &mut DraftLog,
        ) -> engine::Result<()> {
            Ok(())
        }
        fn release(&mut self, _: usize) {}
        fn features(&self) -> Features {
            Features {
                taps: vec![5, 40],
                last: false,
            }
        }
    }
    let cfg = common::engine_config(256, 1, true);
    let s = Speculation::with(Far, SpecConfig::default());
    let err = engine::start(model, tok, cfg, Some(s), None)
        .err()
        .expect("refused");
    assert!(err.to_string().contains("[5, 40]"), "{err}");
}
