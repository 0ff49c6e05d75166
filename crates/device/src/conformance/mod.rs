//! Op sequences every backend's tests run on the backend and on the reference, to compare
//! what they give (each test states its tolerance).

use gguf::GgmlType;
use kv::{KvConfig, BLOCK_SIZE};

use crate::testing::{data, source};
use crate::*;

mod deepseek;
pub use deepseek::{deepseek_agree, deepseek_case, Dsv4Route};

/// A buffer holding `data`.
pub fn buf(dev: &mut dyn Device, data: &[f32]) -> Buf {
    let b = dev.alloc(data.len()).unwrap();
    dev.upload(b, 0, data);
    b
}

pub fn read(dev: &mut dyn Device, b: Buf, n: usize) -> Vec<f32> {
    let mut out = vec![0f32; n];
    dev.download(b, 0, &mut out);
    out
}

/// How the rows of [`attention_case`]'s steps see one another.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seeing {
    Causal,
    /// Not causal: a block's rows see the step's later rows of their sequence
    /// ([`AttnSpec::causal`] false).
    Block,
    /// Causal but for the first step's last 7 rows of sequence 0, which see one another (an
    /// image's: [`Step::bidirectional`]).
    Image,
}

/// A step of `rows` over `tables`: every op that reads positions; attention as `seeing`
/// says.
pub fn attention_case(
    dev: &mut dyn Device,
    kv_ty: GgmlType,
    mode: RopeMode,
    window: Option<usize>,
    seeing: Seeing,
) -> Vec<f32> {
    let causal = seeing != Seeing::Block;
    let (nh, nkv, hd) = (6, 2, 64);
    let cfg = KvConfig {
        n_layer: 2,
        n_head_kv: nkv,
        head_dim: hd,
        ty: kv_ty,
        n_positions: 8 * BLOCK_SIZE,
        window: None,
        state: None,
        records: None,
        empty: 0,
    };
    dev.kv_alloc(cfg).unwrap();
    // Sequence 0 holds blocks 5, 1, 6 (40 positions); sequence 1 blocks 2, 0.
    let tables: [&[u32]; 2] = [&[5, 1, 6], &[2, 0]];
    let rope = RopeSpec {
        head_dim: hd,
        n_rot: hd,
        mode,
        freq_base: 10000.0,
        scaling: crate::RopeScaling::NONE,
    };
    let spec = AttnSpec {
        n_head: nh,
        n_head_kv: nkv,
        head_dim: hd,
        scale: 0.125,
        window,
        causal,
    };
    let (q, out) = (
        dev.alloc(40 * nh * hd).unwrap(),
        dev.alloc(40 * nh * hd).unwrap(),
    );
    let (k, v) = (
        dev.alloc(40 * nkv * hd).unwrap(),
        dev.alloc(40 * nkv * hd).unwrap(),
    );
    let mut result = Vec::new();
    // A prompt of 37 rows of sequence 0 and 20 of sequence 1 in two steps, then a step of
    // one row each (decode) and of 2 rows of sequence 0 (a verified draft).
    let steps: [Vec<Row>; 3] = [
        (0..37)
            .map(|pos| Row { pos, seq: 0 })
            .chain((0..3).map(|pos| Row { pos, seq: 1 }))
            .collect(),
        (3..20)
            .map(|pos| Row { pos, seq: 1 })
            .chain([Row { pos: 37, seq: 0 }])
            .collect(),
        (38..40).map(|pos| Row { pos, seq: 0 }).collect(),
    ];
    for (i, rows) in steps.iter().enumerate() {
        let n = rows.len();
        let bidirectional: &[usize] = match (seeing, i) {
            (Seeing::Image, 0) => &[30, NOT_BIDIRECTIONAL],
            _ => &[],
        };
        dev.begin(&Step {
            rows,
            tables: &tables,
            windowed: &[],
            states: &[],
            checkpoints: &[],
            bidirectional,
        });
        dev.upload(q, 0, &data(n * nh * hd, 10 + i as u64));
        dev.upload(k, 0, &data(n * nkv * hd, 20 + i as u64));
        dev.upload(v, 0, &data(n * nkv * hd, 30 + i as u64));
        dev.rope(q, nh, &rope);
        dev.rope(k, nkv, &rope);
        result.extend(read(dev, q, n * nh * hd));
        dev.kv_store(1, k, v);
        dev.attention(1, q, out, &spec);
        result.extend(read(dev, out, n * nh * hd));
        dev.finish();
    }
    result
}

/// The recurrences of a state layer (KV layer 1 of 2): the causal convolution (with a bias
/// and SiLU), on the state after it the gated delta rule (2 key heads, 4 value heads of 16)
/// and after that Mamba-2's scan (4 heads of 16, 2 groups of a state of 16), over steps of
/// two sequences: a prompt in two steps, a step whose last rows are cut back (its
/// checkpoint taken before its third row, the state restored from it and the rows from
/// there computed again), a sequence starting over at position 0, and rows computed again
/// from a snapshot. Gives every step's outputs (convolution, delta rule, scan) and the
/// cut-back rows' outputs computed again.
pub fn recurrent_case(dev: &mut dyn Device) -> Vec<f32> {
    let (width, k) = (24, 4);
    let delta = DeltaSpec {
        n_k_heads: 2,
        n_v_heads: 4,
        head_dim: 16,
        at: (k - 1) * width,
    };
    let (wk, wv, hv) = (2 * 16, 4 * 16, 4);
    let scan = ScanSpec {
        n_head: 4,
        head_dim: 16,
        d_state: 16,
        n_group: 2,
        at: delta.at + delta.state_floats(),
    };
    let cfg = KvConfig {
        n_layer: 2,
        n_head_kv: 1,
        head_dim: 32,
        ty: GgmlType::F16,
        n_positions: 4 * BLOCK_SIZE,
        window: None,
        state: Some(kv::StateKv {
            layers: 0b10,
            floats: scan.at + scan.state_floats(),
            n_slots: 3,
            n_snaps: 2,
            rows: 3,
        }),
        records: None,
        empty: 0,
    };
    let snap_bytes = cfg.state.expect("state layers").snapshot_bytes();
    dev.kv_alloc(cfg).unwrap();
    let bias = buf(dev, &data(width, 9));
    let spec = ConvSpec {
        width,
        k,
        silu: true,
        bias: Some(bias),
    };
    let a: Vec<f32> = data(hv, 8).iter().map(|v| -1.0 - v.abs()).collect();
    let a = buf(dev, &a);
    let [q, kk, v, g, beta, o] = [wk, wk, wv, hv, hv, wv].map(|w| dev.alloc(16 * w).unwrap());
    let io = DeltaIo {
        q,
        k: kk,
        v,
        g,
        beta,
        a,
        out: o,
    };
    let skip = buf(dev, &data(hv, 10));
    let scanned = dev.alloc(16 * wv).unwrap();
    // The scan reads the delta rule's inputs: x = v, dt = g, B = q, C = k.
    let scan_io = ScanIo {
        x: v,
        dt: g,
        a,
        b: q,
        c: kk,
        d: skip,
        out: scanned,
    };
    let w = buf(dev, &data(width * k, 7));
    let (x, out) = (
        dev.alloc(16 * width).unwrap(),
        dev.alloc(16 * width).unwrap(),
    );
    let row = |seq, pos| Row { pos, seq };
    // Sequence 0 in slot 2, sequence 1 in slot 0.
    // Step 3 computes step 2's rows 9 and 10 again (inputs from its third row on); step 5
    // computes step 2's rows again in slot 1, from a snapshot of slot 2 taken before step 2
    // (read out to host bytes and written into another snapshot first); step 6 its row 11
    // from checkpoint row 2.
    let steps: [(Vec<Row>, u64, usize); 7] = [
        (
            (0..5)
                .map(|p| row(0, p))
                .chain((0..3).map(|p| row(1, p)))
                .collect(),
            1,
            0,
        ),
        ((5..7).map(|p| row(0, p)).chain([row(1, 3)]).collect(), 2, 0),
        ((7..12).map(|p| row(0, p)).collect(), 3, 0),
        ((9..11).map(|p| row(0, p)).collect(), 3, 2),
        ((0..2).map(|p| row(1, p)).collect(), 4, 0),
        ((7..12).map(|p| row(0, p)).collect(), 3, 0),
        (vec![row(0, 11)], 3, 4),
    ];
    let data = |n: usize, seed: u64, skip: usize| data(n + skip, seed).split_off(skip);
    let mut result = Vec::new();
    for (i, (rows, seed, skip)) in steps.iter().enumerate() {
        match i {
            2 => dev.state_save(2, 1),
            3 => dev.state_restore(2, 0),
            6 => dev.state_restore(2, 2),
            5 => {
                let mut bytes = Vec::new();
                dev.state_read(1, &mut bytes);
                assert_eq!(bytes.len(), snap_bytes, "a snapshot's bytes");
                dev.state_write(0, &bytes);
                dev.state_load(0, 1);
            }
            _ => {}
        }
        let n = rows.len();
        dev.begin(&Step {
            rows,
            tables: &[&[0], &[1]],
            windowed: &[],
            states: if i == 5 { &[1, 0] } else { &[2, 0] },
            checkpoints: if i == 2 { &[9, 0] } else { &[] },
            bidirectional: &[],
        });
        dev.upload(x, 0, &data(n * width, *seed, skip * width));
        dev.conv1d(1, x, w, out, &spec);
        result.extend(read(dev, out, n * width));
        for (b, w, unit) in [(q, wk, true), (kk, wk, true), (v, wv, false)] {
            let mut values = data(n * w, *seed + w as u64, skip * w);
            if unit {
                for head in values.chunks_exact_mut(16) {
                    let norm = head.iter().map(|x| x * x).sum::<f32>().sqrt();
                    head.iter_mut().for_each(|x| *x /= norm);
                }
            }
            dev.upload(b, 0, &values);
        }
        let rate = |v: f32| v.abs() * 2.0;
        let gate = |v: f32| 0.5 + v / 2.1;
        dev.upload(
            g,
            0,
            &data(n * hv, *seed + 1, skip * hv)
                .into_iter()
                .map(rate)
                .collect::<Vec<_>>(),
        );
        dev.upload(
            beta,
            0,
            &data(n * hv, *seed + 2, skip * hv)
                .into_iter()
                .map(gate)
                .collect::<Vec<_>>(),
        );
        dev.delta_net(1, &io, &delta);
        result.extend(read(dev, o, n * wv));
        dev.ssm_scan(1, &scan_io, &scan);
        result.extend(read(dev, scanned, n * wv));
        dev.finish();
    }
    // Steps 0 and 1 give 11 rows of `width + 2 · wv`; step 2 (5 rows) and step 3 (its third
    // and fourth rows again) give their convolutions, their delta rules, then their scans.
    let per = width + 2 * wv;
    let (s2, s3) = (11 * per, 16 * per);
    let (d2, c2) = (s2 + 5 * width, s2 + 5 * width + 5 * wv);
    let first = [
        &result[s2 + 2 * width..s2 + 4 * width],
        &result[d2 + 2 * wv..d2 + 4 * wv],
        &result[c2 + 2 * wv..c2 + 4 * wv],
    ];
    let again = [
        &result[s3..s3 + 2 * width],
        &result[s3 + 2 * width..s3 + 2 * width + 2 * wv],
        &result[s3 + 2 * width + 2 * wv..s3 + 2 * width + 4 * wv],
    ];
    assert_eq!(
        first, again,
        "rows computed again from the restored checkpoint"
    );
    let s5 = 20 * per;
    assert_eq!(
        result[s2..s2 + 5 * per],
        result[s5..s5 + 5 * per],
        "rows computed again from a snapshot loaded into another slot"
    );
    let s6 = 25 * per;
    let row_11 = [
        &result[s2 + 4 * width..s2 + 5 * width],
        &result[d2 + 4 * wv..d2 + 5 * wv],
        &result[c2 + 4 * wv..c2 + 5 * wv],
    ];
    let from_row_2 = [
        &result[s6..s6 + width],
        &result[s6 + width..s6 + width + wv],
        &result[s6 + width + wv..s6 + width + 2 * wv],
    ];
    assert_eq!(
        row_11, from_row_2,
        "a row computed again from checkpoint row 2"
    );
    result
}

/// One sequence's `n` rows in one step through the convolution (64 channels, 4 taps) and
/// the delta rule (one head of 128), checkpointed before row `n - 5` and each row after
/// it, then its last 5, 3 and 1 rows again from checkpoint rows 0, 2 and 4 (asserted
/// equal): a run long enough for a backend to cut it (llvmpipe's loop budget). The first
/// step's outputs, convolution's then the delta rule's.
pub fn long_run_case(dev: &mut dyn Device, n: usize) -> Vec<f32> {
    let (width, k, d) = (64, 4, 128);
    let delta = DeltaSpec {
        n_k_heads: 1,
        n_v_heads: 1,
        head_dim: d,
        at: (k - 1) * width,
    };
    dev.kv_alloc(KvConfig {
        n_layer: 1,
        n_head_kv: 1,
        head_dim: 32,
        ty: GgmlType::F16,
        n_positions: BLOCK_SIZE,
        window: None,
        state: Some(kv::StateKv {
            layers: 0b1,
            floats: delta.at + delta.state_floats(),
            n_slots: 1,
            n_snaps: 0,
            rows: 5,
        }),
        records: None,
        empty: 0,
    })
    .unwrap();
    let spec = ConvSpec {
        width,
        k,
        silu: true,
        bias: None,
    };
    let unit = |mut v: Vec<f32>| {
        for head in v.chunks_exact_mut(d) {
            let norm = head.iter().map(|x| x * x).sum::<f32>().sqrt();
            head.iter_mut().for_each(|x| *x /= norm);
        }
        v
    };
    let x = data(n * width, 1);
    let (q, kk, v) = (unit(data(n * d, 2)), unit(data(n * d, 3)), data(n * d, 4));
    let g: Vec<f32> = data(n, 5).iter().map(|v| v.abs() * 0.1).collect();
    let beta: Vec<f32> = data(n, 6).iter().map(|v| 0.5 + v / 2.1).collect();
    let [w, a] = [data(width * k, 7), vec![-1.0]].map(|v| buf(dev, &v));
    let io = DeltaIo {
        q: dev.alloc(n * d).unwrap(),
        k: dev.alloc(n * d).unwrap(),
        v: dev.alloc(n * d).unwrap(),
        g: dev.alloc(n).unwrap(),
        beta: dev.alloc(n).unwrap(),
        a,
        out: dev.alloc(n * d).unwrap(),
    };
    let (xb, out) = (dev.alloc(n * width).unwrap(), dev.alloc(n * width).unwrap());
    let cut = n - 5;
    let step = |dev: &mut dyn Device, from: usize, checkpoints: &[usize]| {
        let rows: Vec<Row> = (from..n).map(|pos| Row { pos, seq: 0 }).collect();
        dev.begin(&Step {
            rows: &rows,
            tables: &[&[0]],
            states: &[0],
            checkpoints,
            ..Step::default()
        });
        dev.upload(xb, 0, &x[from * width..]);
        dev.conv1d(0, xb, w, out, &spec);
        let mut got = read(dev, out, (n - from) * width);
        for (b, values, per) in [(io.q, &q, d), (io.k, &kk, d), (io.v, &v, d), (io.g, &g, 1)] {
            dev.upload(b, 0, &values[from * per..]);
        }
        dev.upload(io.beta, 0, &beta[from..]);
        dev.delta_net(0, &io, &delta);
        got.extend(read(dev, io.out, (n - from) * d));
        dev.finish();
        got
    };
    let first = step(dev, 0, &[cut]);
    let (conv, rule) = first.split_at(n * width);
    for row in [0, 2, 4] {
        dev.state_restore(0, row);
        // Checkpoint 0: the step takes no checkpoint (its rows start past position 0).
        let again = step(dev, cut + row, &[0]);
        let m = 5 - row;
        assert_eq!(
            [&conv[(cut + row) * width..], &rule[(cut + row) * d..]],
            [&again[..m * width], &again[m * width..]],
            "rows computed again from checkpoint row {row}"
        );
    }
    first
}

/// Norms (per row and per head, in place), the activations, add, scale, gathered rows,
/// the finite check (asserted) and argmax of 7 rows of 96 on `d`.
pub fn norms_case(d: &mut dyn Device) -> Vec<f32> {
    let (rows, width) = (7, 96);
    let x = data(rows * width, 1)
        .iter()
        .map(|v| v * 4.0)
        .collect::<Vec<_>>();
    let y = data(rows * width, 2);
    let w = data(width, 3);
    let (xb, yb, wb, ob) = (
        buf(d, &x),
        buf(d, &y),
        buf(d, &w),
        d.alloc(rows * width).unwrap(),
    );
    let mut out = Vec::new();
    d.rms_norm(xb, wb, rows, width, 1e-6, ob);
    out.extend(read(d, ob, rows * width));
    let hw = buf(d, &w[..32]);
    d.rms_norm(xb, hw, rows * 3, 32, 1e-6, xb);
    out.extend(read(d, xb, rows * width));
    d.upload(xb, 0, &x);
    d.swiglu(xb, yb, rows * width);
    out.extend(read(d, xb, rows * width));
    d.upload(xb, 0, &x);
    d.gelu(xb, yb, rows * width);
    out.extend(read(d, xb, rows * width));
    d.upload(xb, 0, &x);
    d.add(xb, yb, rows * width);
    out.extend(read(d, xb, rows * width));
    d.scale(xb, rows * width, 25.3);
    out.extend(read(d, xb, rows * width));
    d.gather_rows(xb, &[5, 0, 5], width, ob);
    out.extend(read(d, ob, 3 * width));
    let mut z = x.clone();
    z[3 * width + 7] = f32::NAN;
    z[5 * width] = f32::INFINITY;
    d.upload(xb, 0, &z);
    let fin = d.all_finite(xb, rows, width);
    assert_eq!(fin, [true, true, true, false, true, false, true]);
    let am = d.argmax(yb, rows, width);
    out.extend(am.iter().map(|&i| i as f32));
    out
}

/// What [`prims_case`] gives: per op, the values it computed; and the top-k pairs (indices
/// and copied values, which every backend must give exactly).
pub struct Prims {
    pub values: Vec<(&'static str, Vec<f32>)>,
    pub top: Vec<(u32, f32)>,
}

/// The generic primitives on 7 rows of 96 (a width no multiple of 64): softmax with a
/// masked (-∞) value, the L2 norm per row and per head (one row small enough that `eps`
/// bounds its norm), sigmoid and softplus over ±30 (both sides of softplus's threshold),
/// copied columns (two row blocks side by side, as a NextN block joins its inputs), mul,
/// the squared ReLU, DFlash 2's block convolution over two blocks, and
/// the top 5 and top 1 of rows with ties and a NaN. Asserted on `d` itself: a row softmaxed
/// or normed alone has the bits it has among the others, the columns are copied exactly,
/// and top 1 is argmax.
pub fn prims_case(d: &mut dyn Device) -> Prims {
    let (rows, width) = (7, 96);
    let mut x: Vec<f32> = data(rows * width, 11).iter().map(|v| v * 4.0).collect();
    x[6 * width..].iter_mut().for_each(|v| *v *= 1e-8);
    let mut masked = x.clone();
    masked[2 * width + 5] = f32::NEG_INFINITY;
    let y = data(rows * width, 12);
    let (xb, yb, ob) = (buf(d, &x), buf(d, &y), d.alloc(rows * width).unwrap());
    let alone = d.alloc(width).unwrap();
    let row4 = &x[4 * width..5 * width];
    let mut values = Vec::new();
    let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();

    d.l2_norm_rows(xb, rows, width, 1e-6, ob);
    let normed = read(d, ob, rows * width);
    d.upload(alone, 0, row4);
    d.l2_norm_rows(alone, 1, width, 1e-6, alone);
    let one = read(d, alone, width);
    assert_eq!(
        bits(&one),
        bits(&normed[4 * width..5 * width]),
        "l2 norm alone"
    );
    values.push(("l2_norm_rows", normed));
    d.l2_norm_rows(xb, rows * 3, 32, 1e-6, xb);
    values.push(("l2_norm_rows per head", read(d, xb, rows * width)));

    d.upload(xb, 0, &masked);
    d.softmax_rows(xb, rows, width);
    let probs = read(d, xb, rows * width);
    assert_eq!(probs[2 * width + 5], 0.0, "a masked value");
    d.upload(alone, 0, row4);
    d.softmax_rows(alone, 1, width);
    let one = read(d, alone, width);
    assert_eq!(
        bits(&one),
        bits(&probs[4 * width..5 * width]),
        "softmax alone"
    );
    values.push(("softmax_rows", probs));

    let wide: Vec<f32> = x.iter().map(|v| v * 7.5).collect();
    d.upload(xb, 0, &wide);
    d.sigmoid(xb, rows * width);
    values.push(("sigmoid", read(d, xb, rows * width)));
    d.upload(xb, 0, &wide);
    d.softplus(xb, rows * width);
    values.push(("softplus", read(d, xb, rows * width)));
    d.upload(xb, 0, &x);
    let joined = buf(d, &vec![0.0; rows * 64]);
    let cols = |x_at, out_at| Cols {
        x_width: width,
        x_at,
        out_width: 64,
        out_at,
        width: 32,
    };
    d.copy_cols(xb, joined, rows, &cols(8, 0));
    d.copy_cols(yb, joined, rows, &cols(0, 32));
    let want: Vec<f32> = (0..rows)
        .flat_map(|r| [&x[r * width + 8..][..32], &y[r * width..][..32]].concat())
        .collect();
    let got = read(d, joined, rows * 64);
    assert_eq!(bits(&got), bits(&want), "copied columns");
    values.push(("copy_cols", got));
    d.mul(xb, yb, rows * width);
    values.push(("mul", read(d, xb, rows * width)));
    d.relu_sqr(xb, rows * width);
    values.push(("relu_sqr", read(d, xb, rows * width)));

    // Two blocks of 3 and 4 rows: each row convolves only its own block's rows.
    let blocks: Vec<Row> = (0..rows)
        .map(|r| Row {
            pos: 20 + r,
            seq: usize::from(r >= 3),
        })
        .collect();
    d.begin(&Step {
        rows: &blocks,
        ..Step::default()
    });
    let conv = |side| BlockConv {
        width,
        k: 3,
        group: 32,
        side,
    };
    let coef = buf(d, &data(rows * 18, 13));
    let base = buf(d, &data(6 * width, 14));
    d.upload(xb, 0, &x);
    for side in [0, 1] {
        d.block_conv(xb, coef, base, rows, &conv(side), ob);
        values.push(("block_conv", read(d, ob, rows * width)));
    }
    d.finish();

    let mut ties: Vec<f32> = y.iter().map(|v| (v * 3.0).round()).collect();
    ties[width + 3] = f32::NAN;
    ties[3 * width..4 * width].fill(-0.0);
    ties[3 * width + 9] = 0.0;
    d.upload(yb, 0, &ties);
    let top = d.top_k_rows(yb, rows, width, 5);
    let first = d.top_k_rows(yb, rows, width, 1);
    let argmax = d.argmax(yb, rows, width);
    let first: Vec<u32> = first.iter().map(|p| p.0).collect();
    assert_eq!(first, argmax, "top 1 is argmax");
    Prims { values, top }
}

/// [`prims_case`] on the two devices: the top-k pairs equal; each op's values (all finite,
/// so that [`rel`] sees every one) within `tol` of each other, the largest difference over
/// the op's largest value (at least 1).
pub fn prims_agree(a: &mut dyn Device, b: &mut dyn Device, tol: f32) {
    let (got, want) = (prims_case(a), prims_case(b));
    assert_eq!(got.top, want.top, "top k");
    for ((op, g), (_, w)) in got.values.iter().zip(&want.values) {
        assert!(g.iter().chain(w).all(|v| v.is_finite()), "{op}: finite");
        let e = rel(g, w, 1.0);
        assert!(e < tol, "{op}: {e} (bound {tol})");
    }
}

/// A mixture of 6 experts, `k` per row, with a shared expert: SwiGLU experts and the shared
/// expert's gate, or (`net` [`ExpertNet::ReluSqr`]) squared-ReLU experts chosen with a bias
/// added to their probabilities and an ungated shared expert (Nemotron-H's); with `dsv4`,
/// SwiGLU clamped at 0.5 and experts chosen with a bias or given per row (DeepSeek-V4's).
pub fn moe_case(
    dev: &mut dyn Device,
    (gating, net, dsv4): (Gating, ExpertNet, Option<Dsv4Route>),
    k: usize,
    rows: usize,
) -> Vec<f32> {
    let (e, ff, ne) = (256, 64, 6);
    let ty = GgmlType::Q4_K;
    let mut srcs = vec![source(GgmlType::Q8_0, ne, e, 1)];
    srcs.extend((0..ne).map(|i| source(ty, ff, e, 10 + i as u64)));
    srcs.extend((0..ne).map(|i| source(ty, ff, e, 20 + i as u64)));
    srcs.extend((0..ne).map(|i| source(GgmlType::Q5_0, e, ff, 30 + i as u64)));
    let m = dev.upload_matrices(&srcs, &|_, _| {}).unwrap();
    let x = buf(dev, &data(rows * e, 2));
    let hidden = buf(dev, &data(rows * e, 3));
    let shared = buf(dev, &data(rows * e, 4));
    let gate = buf(dev, &data(e, 5));
    let relu = net == ExpertNet::ReluSqr;
    let biased = relu || dsv4 == Some(Dsv4Route::Bias);
    let bias = biased.then(|| buf(dev, &data(ne, 6)));
    let given: Vec<u32> = (0..rows * k)
        .map(|i| ((i / k + i % k) % ne) as u32)
        .collect();
    let given = (dsv4 == Some(Dsv4Route::Given)).then_some(&given[..]);
    let mut z = |n| dev.alloc(n).unwrap();
    let scratch = MoeScratch {
        probs: z(rows * ne),
        x: z(rows * k * e),
        gate: z(rows * k * ff),
        up: z(rows * k * ff),
        out: z(rows * k * e),
    };
    let spec = MoeSpec {
        router: m[0],
        gate: &m[1..1 + ne],
        up: &m[1 + ne..1 + 2 * ne],
        down: &m[1 + 2 * ne..1 + 3 * ne],
        routing: Routing {
            n_expert: ne,
            k,
            gating,
            norm_weights: gating == Gating::Sigmoid,
            weights_scale: 1.5,
        },
        n_embd: e,
        n_ff_exp: ff,
        shared: Some(SharedIn {
            out: shared,
            gate: (!relu).then_some(gate),
        }),
        choice_bias: bias,
        given,
        limit: dsv4.map(|_| 0.5),
        net,
        scratch,
    };
    dev.moe(&spec, x, rows, hidden);
    read(dev, hidden, rows * e)
}

/// The largest `|a - b|` over the largest `|b|` (at least `floor`).
pub fn rel(a: &[f32], b: &[f32], floor: f32) -> f32 {
    assert_eq!(a.len(), b.len());
    let scale = b.iter().fold(floor, |m, v| m.max(v.abs()));
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0f32, f32::max)
        / scale
}

/// [`moe_case`] with both gatings (and Nemotron-H's squared-ReLU experts with sigmoid
/// gating, DeepSeek-V4's √softplus with both its routes), 1, 2 and 4 experts per row over
/// 1, 5 and 9 rows, on the two devices `pair` makes (none: the check is skipped): the same
/// sums within 1e-5, one block, the same experts streamed.
pub fn moe_agrees(pair: &mut dyn FnMut() -> Option<[Box<dyn Device>; 2]>) {
    let kinds = [
        (Gating::Softmax, ExpertNet::Swiglu, None),
        (Gating::Sigmoid, ExpertNet::Swiglu, None),
        (Gating::Sigmoid, ExpertNet::ReluSqr, None),
        (
            Gating::SqrtSoftplus,
            ExpertNet::Swiglu,
            Some(Dsv4Route::Bias),
        ),
        (
            Gating::SqrtSoftplus,
            ExpertNet::Swiglu,
            Some(Dsv4Route::Given),
        ),
    ];
    for kind in kinds {
        for (k, rows) in [(1, 1), (2, 5), (4, 9)] {
            let Some([mut a, mut b]) = pair() else { return };
            let got = moe_case(&mut *a, kind, k, rows);
            let want = moe_case(&mut *b, kind, k, rows);
            let e = rel(&got, &want, 1.0);
            assert!(e < 1e-5, "{kind:?} k={k} rows={rows}: {e}");
            assert_eq!(a.moe_stats().blocks, 1);
            assert_eq!(a.moe_stats(), b.moe_stats(), "the same experts streamed");
        }
    }
}

/// The encoder's ops ([`crate::encoder::EncoderDevice`]) on random data, chained as a tower
/// layer chains them: layer norm, attention over 48 rows of 3 heads of 40, both activations, and a
/// 2 × 2 pool of the 6 × 6 grid of the first 36 rows. Everything they wrote, in order.
pub fn encoder_case(dev: &mut dyn crate::encoder::EncoderDevice) -> Vec<f32> {
    use crate::encoder::{Act, DenseIo, DenseSpec, PoolSpec};
    let (n, heads, hd) = (48, 3, 40);
    let w = heads * hd;
    let x = buf(
        dev,
        &data(n * w, 11)
            .iter()
            .map(|v| 3.0 * v + 0.5)
            .collect::<Vec<_>>(),
    );
    let gamma = buf(dev, &data(w, 12));
    let beta = buf(dev, &data(w, 13));
    let normed = dev.alloc(n * w).unwrap();
    dev.layer_norm(x, gamma, beta, n, w, 1e-6, normed);
    let q = buf(dev, &data(n * w, 14));
    let k = buf(dev, &data(n * w, 15));
    let out = dev.alloc(n * w).unwrap();
    let io = DenseIo {
        q,
        k,
        v: normed,
        out,
    };
    let spec = DenseSpec {
        rows: n,
        heads,
        head_dim: hd,
        scale: 2.0 / (hd as f32).sqrt(),
    };
    dev.dense_attention(&io, &spec);
    let act = buf(
        dev,
        &data(n * w, 16).iter().map(|v| 4.0 * v).collect::<Vec<_>>(),
    );
    dev.activate(act, n * w / 2, Act::Gelu);
    dev.activate(act, n * w, Act::GeluQuick);
    let pool = PoolSpec {
        side: 6,
        kernel: 2,
        width: w,
    };
    let pooled = dev.alloc(pool.rows_out() * w).unwrap();
    dev.avg_pool_2d(out, pooled, &pool);
    let mut all = read(dev, normed, n * w);
    all.extend(read(dev, out, n * w));
    all.extend(read(dev, act, n * w));
    all.extend(read(dev, pooled, pool.rows_out() * w));
    all
}
