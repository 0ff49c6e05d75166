//! The GPU backend against the reference backend, op by op, on random data: every weight
//! type at 1 to 64 rows, both KV types, both RoPE modes, a sliding window. Tolerances are
//! stated per op: both take f32 activations, so they differ by f32 against f64 sums.

mod common;

use common::*;
use device::testing::data;
use device::*;
use gguf::GgmlType;
use kv::{KvConfig, BLOCK_SIZE};

#[test]
fn matmul_of_every_weight_type_at_1_to_64_rows() {
    let (n, k) = (24, 512);
    for ty in weight_types() {
        let src = source(ty, n, k, 3);
        let bias = data(n, 9);
        for m in [1, 2, 3, 8, 9, 17, 64] {
            let x = data(m * k, 5 + m as u64);
            let res0 = data(m * n, 77);
            let Some(devs) = both() else { return };
            let mut got = Vec::new();
            for mut dev in devs {
                let mats = dev.upload_matrices(std::slice::from_ref(&src), &|_, _| {}).unwrap();
                let (xb, yb) = (buf(&mut *dev, &x), dev.alloc(m * n).unwrap());
                let (bb, rb) = (buf(&mut *dev, &bias), buf(&mut *dev, &res0));
                let plain = MatOut::to(yb);
                let fused = MatOut {
                    y: yb,
                    bias: Some(bb),
                    residual: Some(rb),
                };
                dev.matmul(&mats, xb, m, &[plain]);
                let y = read(&mut *dev, yb, m * n);
                dev.matmul(&mats, xb, m, &[fused]);
                got.push((y, read(&mut *dev, rb, m * n)));
            }
            assert!(rel(&got[0].0, &got[1].0, 1.0) < 1e-5, "{ty} m={m}");
            assert!(
                rel(&got[0].1, &got[1].1, 1.0) < 1e-5,
                "{ty} m={m} bias+residual"
            );
        }
    }
}

/// A step of `rows` over `tables`: every op that reads positions.
fn attention_case(
    dev: &mut dyn Device,
    kv_ty: GgmlType,
    mode: RopeMode,
    window: Option<usize>,
) -> Vec<f32> {
    let (nh, nkv, hd) = (6, 2, 64);
    let cfg = KvConfig {
        n_layer: 2,
        n_head_kv: nkv,
        head_dim: hd,
        ty: kv_ty,
        n_positions: 8 * BLOCK_SIZE,
        window: None,
    };
    dev.kv_alloc(cfg).unwrap();
    // Sequence 0 holds blocks 5, 1, 6 (40 positions); sequence 1 blocks 2, 0.
    let tables: [&[u32]; 2] = [&[5, 1, 6], &[2, 0]];
    let rope = RopeSpec {
        head_dim: hd,
        n_rot: hd,
        mode,
        freq_base: 10000.0,
    };
    let spec = AttnSpec {
        n_head: nh,
        n_head_kv: nkv,
        head_dim: hd,
        scale: 0.125,
        window,
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
    // 2 rows of sequence 0 (a verified draft).
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
        dev.begin(&Step {
            rows,
            tables: &tables,
            windowed: &[],
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

#[test]
fn rope_kv_store_and_paged_attention_for_every_kv_type() {
    for kv_ty in [GgmlType::F16, GgmlType::F32] {
        for (mode, window) in [
            (RopeMode::Normal, None),
            (RopeMode::Neox, None),
            (RopeMode::Neox, Some(7)),
        ] {
            let Some([mut a, mut b]) = both() else { return };
            let got = attention_case(&mut *a, kv_ty, mode, window);
            let want = attention_case(&mut *b, kv_ty, mode, window);
            let e = rel(&got, &want, 1.0);
            assert!(e < 2e-5, "{kv_ty} {mode:?} window {window:?}: {e}");
        }
    }
}

#[test]
fn norms_activations_rows_and_checks() {
    let (rows, width) = (7, 96);
    let x = data(rows * width, 1)
        .iter()
        .map(|v| v * 4.0)
        .collect::<Vec<_>>();
    let y = data(rows * width, 2);
    let w = data(width, 3);
    let Some(devs) = both() else { return };
    let mut outs = Vec::new();
    for mut dev in devs {
        let d = &mut *dev;
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
        outs.push(out);
    }
    let e = rel(&outs[0], &outs[1], 1.0);
    assert!(e < 1e-5, "{e}");
}

#[test]
fn embedding_rows_of_every_weight_type() {
    for ty in weight_types() {
        let mut src = source(ty, 50, 256, 4);
        src.role = Role::Rows;
        let Some(devs) = both() else { return };
        let mut outs = Vec::new();
        for mut dev in devs {
            let t = dev.upload_matrices(&[src.clone()], &|_, _| {}).unwrap()[0];
            let o = dev.alloc(3 * 256).unwrap();
            dev.embed(t, &[49, 0, 17], o);
            outs.push(read(&mut *dev, o, 3 * 256));
        }
        assert_eq!(outs[0], outs[1], "{ty}: both dequantize GGUF's way");
    }
}

#[test]
fn kv_blocks_copy_read_and_write() {
    let Some(mut d) = gpu() else { return };
    let cfg = KvConfig {
        n_layer: 2,
        n_head_kv: 1,
        head_dim: 32,
        ty: GgmlType::F16,
        n_positions: 4 * BLOCK_SIZE,
        window: None,
    };
    d.kv_alloc(cfg).unwrap();
    let rows: Vec<Row> = (0..BLOCK_SIZE).map(|pos| Row { pos, seq: 0 }).collect();
    let spec = AttnSpec {
        n_head: 1,
        n_head_kv: 1,
        head_dim: 32,
        scale: 0.2,
        window: None,
    };
    let d: &mut dyn Device = &mut d;
    let (q, k, v) = (
        buf(d, &data(16 * 32, 1)),
        buf(d, &data(16 * 32, 2)),
        buf(d, &data(16 * 32, 3)),
    );
    let (o1, o2) = (d.alloc(16 * 32).unwrap(), d.alloc(16 * 32).unwrap());
    let attend = |d: &mut dyn Device, block: u32, store: bool, out: Buf| {
        d.begin(&Step {
            rows: &rows,
            tables: &[&[block]],
            windowed: &[],
        });
        for layer in 0..2 {
            if store {
                d.kv_store(layer, k, v);
            }
            d.attention(layer, q, out, &spec);
        }
        d.finish();
        read(d, out, 16 * 32)
    };
    let original = attend(d, 3, true, o1);
    d.kv_copy_block(3, 1);
    assert_eq!(attend(d, 1, false, o2), original, "copied block");
    let mut bytes = Vec::new();
    d.kv_read_block(3, &mut bytes);
    assert_eq!(bytes.len(), 2 * 2 * cfg.block_bytes());
    d.kv_write_block(0, &bytes);
    assert_eq!(attend(d, 0, false, o2), original, "written block");
}
