//! The CPU backend against the reference backend, op by op, on random data: every weight
//! type at 1 to 64 rows, every KV type, both RoPE modes, both gatings. Tolerances are
//! stated per op; with f32 activations the two differ only by f32 against f64 rounding.

use std::sync::Arc;

use device::reference::Reference;
use device::*;
use gguf::GgmlType;
use kv::{KvConfig, BLOCK_SIZE};

use super::Cpu;
use crate::ThreadPool;
use device::conformance::{
    attention_case, buf, deepseek_agree, long_run_case, moe_agrees, norms_case, prims_agree, read,
    recurrent_case, rel, Seeing,
};
use device::testing::{data, source};
use device::Precision;

/// Every weight type the CPU backend takes: its table's rows.
fn weight_types() -> impl Iterator<Item = GgmlType> {
    crate::forms::FORMS.iter().map(|f| f.ty)
}

fn cpu(precision: Precision) -> Cpu {
    Cpu::new(Arc::new(ThreadPool::new(2)), precision)
}

/// Both devices, and the same ops run on each.
fn both(precision: Precision) -> [Box<dyn Device>; 2] {
    [Box::new(cpu(precision)), Box::new(Reference::new())]
}

#[test]
fn matmul_of_every_weight_type_at_1_to_64_rows() {
    let (n, k) = (24, 512);
    for ty in weight_types() {
        let src = source(ty, n, k, 3);
        let w: Vec<f32> = {
            let mut w = vec![0f32; n * k];
            let rb = src.bytes.as_slice().len() / n;
            for r in 0..n {
                let row = &src.bytes.as_slice()[r * rb..(r + 1) * rb];
                formats::dequantize_row(ty, row, &mut w[r * k..(r + 1) * k]).unwrap();
            }
            w
        };
        let bias = data(n, 9);
        for m in [1, 2, 3, 8, 17, 64] {
            let x = data(m * k, 5 + m as u64);
            let res0 = data(m * n, 77);
            let mut got = Vec::new();
            for precision in [Precision::F32, Precision::Int8] {
                for mut dev in both(precision) {
                    let mats = dev
                        .upload_matrices(std::slice::from_ref(&src), &|_, _| {})
                        .unwrap();
                    let (xb, yb) = (buf(&mut *dev, &x), dev.alloc(m * n).unwrap());
                    let (bb, rb) = (buf(&mut *dev, &bias), buf(&mut *dev, &res0));
                    let out = MatOut {
                        y: yb,
                        bias: Some(bb),
                        residual: Some(rb),
                    };
                    dev.matmul(&mats, xb, m, &[out]);
                    got.push((read(&mut *dev, yb, m * n), read(&mut *dev, rb, m * n)));
                }
            }
            let reference = &got[1];
            // f32 activations: f32 against f64 sums.
            assert!(rel(&got[0].0, &reference.0, 1.0) < 1e-5, "{ty} m={m} f32");
            assert!(
                rel(&got[0].1, &reference.1, 1.0) < 1e-5,
                "{ty} m={m} residual"
            );
            // 8-bit activations: each x is off by at most half a step of its block's
            // scale, amax/127; a product by at most Σ|w| · amax / 254 (+ f32 rounding).
            let amax = x.iter().fold(0f32, |a, v| a.max(v.abs()));
            for r in 0..m {
                for j in 0..n {
                    let wsum: f32 = w[j * k..(j + 1) * k].iter().map(|v| v.abs()).sum();
                    let bound = wsum * amax / 254.0 * 1.01 + 1e-4;
                    let d = (got[2].0[r * n + j] - reference.0[r * n + j]).abs();
                    assert!(d <= bound, "{ty} m={m} int8 [{r}, {j}]: {d} > {bound}");
                }
            }
        }
    }
}

#[test]
fn rope_kv_store_and_paged_attention_for_every_kv_type() {
    for kv_ty in [GgmlType::F16, GgmlType::BF16, GgmlType::Q8_0, GgmlType::F32] {
        for (mode, window, seeing) in [
            (RopeMode::Normal, None, Seeing::Causal),
            (RopeMode::Neox, None, Seeing::Causal),
            (RopeMode::Neox, Some(7), Seeing::Causal),
            (RopeMode::Neox, None, Seeing::Block),
            (RopeMode::Neox, Some(7), Seeing::Image),
        ] {
            let [mut a, mut b] = both(Precision::Int8);
            let got = attention_case(&mut *a, kv_ty, mode, window, seeing);
            let want = attention_case(&mut *b, kv_ty, mode, window, seeing);
            let e = rel(&got, &want, 1.0);
            // The keys differ by f32 rounding before they are stored; a Q8_0 cache may
            // round such a key to the next of its 255 steps, which moves a score further.
            let bound = if kv_ty == GgmlType::Q8_0 { 1e-3 } else { 2e-5 };
            assert!(
                e < bound,
                "{kv_ty} {mode:?} window {window:?} {seeing:?}: {e}"
            );
        }
    }
}

#[test]
fn norms_activations_rows_and_checks() {
    let outs: Vec<Vec<f32>> = both(Precision::Int8)
        .into_iter()
        .map(|mut dev| norms_case(&mut *dev))
        .collect();
    let e = rel(&outs[0], &outs[1], 1.0);
    assert!(e < 1e-5, "{e}");
}

#[test]
fn embedding_rows_of_every_weight_type() {
    for ty in weight_types() {
        let mut src = source(ty, 50, 256, 4);
        src.role = Role::Rows;
        let mut outs = Vec::new();
        for mut dev in both(Precision::Int8) {
            let t = dev.upload_matrices(&[src.clone()], &|_, _| {}).unwrap()[0];
            let o = dev.alloc(3 * 256).unwrap();
            dev.embed(t, &[49, 0, 17], o);
            outs.push(read(&mut *dev, o, 3 * 256));
        }
        assert_eq!(outs[0], outs[1], "{ty}: both dequantize GGUF's way");
    }
}

#[test]
fn mixture_of_experts_with_a_gated_shared_expert() {
    moe_agrees(&mut || Some(both(Precision::F32)));
}

#[test]
fn copied_kv_blocks_attend_like_the_originals() {
    for mut dev in both(Precision::Int8) {
        let d = &mut *dev;
        let cfg = KvConfig {
            n_layer: 1,
            n_head_kv: 1,
            head_dim: 32,
            ty: GgmlType::F16,
            n_positions: 4 * BLOCK_SIZE,
            window: None,
            state: None,
            records: None,
            empty: 0,
        };
        d.kv_alloc(cfg).unwrap();
        let rows: Vec<Row> = (0..BLOCK_SIZE).map(|pos| Row { pos, seq: 0 }).collect();
        let spec = AttnSpec {
            n_head: 1,
            n_head_kv: 1,
            head_dim: 32,
            scale: 0.2,
            window: None,
            causal: true,
        };
        let (q, k, v) = (
            buf(d, &data(16 * 32, 1)),
            buf(d, &data(16 * 32, 2)),
            buf(d, &data(16 * 32, 3)),
        );
        let (o1, o2) = (d.alloc(16 * 32).unwrap(), d.alloc(16 * 32).unwrap());
        d.begin(&Step {
            rows: &rows,
            tables: &[&[3]],
            windowed: &[],
            states: &[],
            checkpoints: &[],
            bidirectional: &[],
        });
        d.kv_store(0, k, v);
        d.attention(0, q, o1, &spec);
        d.finish();
        d.kv_copy_block(3, 1);
        d.begin(&Step {
            rows: &rows,
            tables: &[&[1]],
            windowed: &[],
            states: &[],
            checkpoints: &[],
            bidirectional: &[],
        });
        d.attention(0, q, o2, &spec);
        d.finish();
        assert_eq!(
            read(d, o1, 16 * 32),
            read(d, o2, 16 * 32),
            "{}",
            d.describe()
        );
    }
}

#[test]
fn the_state_recurrences_agree_with_the_reference() {
    let want = recurrent_case(&mut Reference::new());
    let got = recurrent_case(&mut cpu(Precision::Int8));
    assert!(rel(&got, &want, 1.0) < 1e-6, "{}", rel(&got, &want, 1.0));
    let want = long_run_case(&mut Reference::new(), 40);
    let got = long_run_case(&mut cpu(Precision::Int8), 40);
    assert!(rel(&got, &want, 1.0) < 1e-6, "{}", rel(&got, &want, 1.0));
}

/// f32 sums and exps against f64: within 1e-5 of the largest value (at least 1).
#[test]
fn generic_primitives_agree_with_the_reference() {
    prims_agree(&mut cpu(Precision::Int8), &mut Reference::new(), 1e-5);
}

/// The clamped SwiGLU (the lanes' exp against the scalar one) and hyper-connections (the
/// host's code on both): within 1e-6 of the largest value (at least 1).
#[test]
fn deepseek_s_swiglu_and_hyper_connections_agree_with_the_reference() {
    deepseek_agree(&mut cpu(Precision::Int8), &mut Reference::new(), 1e-6);
}

#[test]
fn encoder_ops_agree_with_the_reference_and_across_thread_counts() {
    let want = device::conformance::encoder_case(&mut Reference::new());
    let got = device::conformance::encoder_case(&mut cpu(Precision::Int8));
    let err = rel(&got, &want, 1.0);
    assert!(err < 2e-6, "CPU against the reference: {err}");
    let one = Cpu::new(Arc::new(ThreadPool::new(1)), Precision::Int8);
    let alone = device::conformance::encoder_case(&mut { one });
    assert_eq!(
        alone, got,
        "the attention's rows split over threads changed bits"
    );
}
