//! Taps: the hidden states of chosen blocks for chosen rows, as a drafter that reads the
//! target's features gets them, on SmolLM2-135M. A tap after block `l` is the state a
//! first stage of blocks `0..=l` gives for the row, bit for bit, and it does not depend on
//! the other rows of the forward.

#[allow(dead_code)]
mod common;

use common::{model_path, MODELS};
use device::Row;
use engine::{ContextConfig, Enter, Executor, Out, RowOut, Taps};
use model::{Model, Part};

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
