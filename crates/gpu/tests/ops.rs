//! The GPU backend against the reference backend, op by op, on random data: every weight
//! type at 1 to 64 rows, both KV types, both RoPE modes, a sliding window. Tolerances are
//! stated per op: both take f32 activations, so they differ by f32 against f64 sums.

mod common;

use common::*;
use device::conformance::{
    attention_case, deepseek_agree, encoder_case, long_run_case, moe_agrees, norms_case,
    prims_agree, recurrent_case, Seeing,
};
use device::reference::Reference;
use device::testing::data;
use device::*;
use gguf::GgmlType;
use kv::{KvConfig, BLOCK_SIZE};

/// Matmul shapes to try (threads per output column, subgroup shuffles where the device
/// has them): lavapipe's own choice, real GPUs' (32 threads; lavapipe's subgroups hold 8,
/// so in workgroup memory there), and 8 threads meeting by shuffles.
const MATMUL_SHAPES: [(u32, bool); 3] = [(1, false), (32, true), (8, true)];

#[test]
fn matmul_of_every_weight_type_at_1_to_64_rows() {
    let (n, k) = (24, 512);
    for ty in weight_types() {
        let src = source(ty, n, k, 3);
        let bias = data(n, 9);
        for m in [1, 2, 3, 8, 9, 17, 64] {
            let x = data(m * k, 5 + m as u64);
            let res0 = data(m * n, 77);
            for (threads, subgroups) in MATMUL_SHAPES {
                let Some(g) = gpu() else { return };
                let g = g.with_matmul_threads(threads, subgroups);
                let shape = g.matmul_shape();
                let devs: [Box<dyn Device>; 2] = [Box::new(g), Box::new(Reference::new())];
                let mut got = Vec::new();
                for mut dev in devs {
                    let mats = dev
                        .upload_matrices(std::slice::from_ref(&src), &|_, _| {})
                        .unwrap();
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
                let at = format!("{ty} m={m}, (threads per column, shuffles) {shape:?}");
                assert!(rel(&got[0].0, &got[1].0, 1.0) < 1e-5, "{at}");
                assert!(rel(&got[0].1, &got[1].1, 1.0) < 1e-5, "{at} bias+residual");
            }
        }
    }
}

/// llvmpipe ends an invocation's loops once they have run 65535 iterations in all
/// (`gpu::LOOP_BUDGET`), silently: 40 rows of 2048 (Gemma 3's feed-forward), 8192 and
/// 65536 elements on the adapter's own kernel shape, which lost every row but the first
/// before a thread's chunks were kept within it.
#[test]
fn matmul_rows_past_llvmpipes_loop_budget() {
    let (n, m) = (16, 40);
    for (ty, k) in [
        (GgmlType::Q6_K, 2048),
        (GgmlType::Q8_0, 8192),
        (GgmlType::Q8_0, 65536),
    ] {
        let src = source(ty, n, k, 4);
        let x = data(m * k, 6);
        let Some(devs) = both() else { return };
        let mut got = Vec::new();
        for mut dev in devs {
            let mats = dev
                .upload_matrices(std::slice::from_ref(&src), &|_, _| {})
                .unwrap();
            let (xb, yb) = (buf(&mut *dev, &x), dev.alloc(m * n).unwrap());
            dev.matmul(&mats, xb, m, &[MatOut::to(yb)]);
            got.push(read(&mut *dev, yb, m * n));
        }
        let e = rel(&got[0], &got[1], 1.0);
        assert!(e < 1e-5, "{ty} k={k}: {e}");
    }
}

#[test]
fn a_matmul_rows_bits_do_not_depend_on_the_other_rows() {
    let (n, k, m) = (40, 768, 40);
    let x = data(m * k, 21);
    for ty in [GgmlType::Q4_K, GgmlType::Q8_0, GgmlType::F16] {
        let src = source(ty, n, k, 8);
        for (threads, subgroups) in MATMUL_SHAPES {
            let Some(g) = gpu() else { return };
            let mut dev = g.with_matmul_threads(threads, subgroups);
            let shape = dev.matmul_shape();
            let mats = dev
                .upload_matrices(std::slice::from_ref(&src), &|_, _| {})
                .unwrap();
            let yb = dev.alloc(m * n).unwrap();
            let xb = buf(&mut dev, &x);
            let mut batches = Vec::new();
            for rows in [m, 11] {
                dev.matmul(&mats, xb, rows, &[MatOut::to(yb)]);
                batches.push((rows, read(&mut dev, yb, rows * n)));
            }
            for (rows, all) in batches {
                for r in [0, 5, 10, 33, 39].into_iter().filter(|&r| r < rows) {
                    let xr = buf(&mut dev, &x[r * k..(r + 1) * k]);
                    dev.matmul(&mats, xr, 1, &[MatOut::to(yb)]);
                    let alone = read(&mut dev, yb, n);
                    assert_eq!(
                        bits(&alone),
                        bits(&all[r * n..(r + 1) * n]),
                        "{ty} row {r} of {rows}, (threads per column, shuffles) {shape:?}"
                    );
                }
            }
        }
    }
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|f| f.to_bits()).collect()
}

#[test]
fn subgroup_shuffles_sum_a_column_with_the_workgroup_trees_bits() {
    let (n, k, m) = (24, 4096, 3);
    let x = data(m * k, 31);
    for ty in [GgmlType::Q4_K, GgmlType::Q5_0, GgmlType::F32] {
        let src = source(ty, n, k, 12);
        for threads in [2, 4, 8] {
            let mut got = Vec::new();
            for subgroups in [false, true] {
                let Some(g) = gpu() else { return };
                let mut dev = g.with_matmul_threads(threads, subgroups);
                got.push((dev.matmul_shape(), {
                    let mats = dev
                        .upload_matrices(std::slice::from_ref(&src), &|_, _| {})
                        .unwrap();
                    let (xb, yb) = (buf(&mut dev, &x), dev.alloc(m * n).unwrap());
                    dev.matmul(&mats, xb, m, &[MatOut::to(yb)]);
                    bits(&read(&mut dev, yb, m * n))
                }));
            }
            if !got[1].0 .1 {
                eprintln!("skipped: the adapter has no subgroups of {threads} lanes in order");
                continue;
            }
            assert_eq!(got[0].1, got[1].1, "{ty}, {threads} threads per column");
        }
    }
}

#[test]
fn rope_kv_store_and_paged_attention_for_every_kv_type() {
    for kv_ty in [GgmlType::F16, GgmlType::F32, GgmlType::BF16, GgmlType::Q8_0] {
        for (mode, window, seeing) in [
            (RopeMode::Normal, None, Seeing::Causal),
            (RopeMode::Neox, None, Seeing::Causal),
            (RopeMode::Neox, Some(7), Seeing::Causal),
            (RopeMode::Neox, None, Seeing::Block),
            (RopeMode::Neox, Some(7), Seeing::Image),
        ] {
            let Some([mut a, mut b]) = both() else { return };
            let got = attention_case(&mut *a, kv_ty, mode, window, seeing);
            let want = attention_case(&mut *b, kv_ty, mode, window, seeing);
            let e = rel(&got, &want, 1.0);
            // As the CPU's test: keys differ by f32 rounding before they are stored, and a
            // Q8_0 cache may round such a key to the next of its 255 steps.
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
    let Some(devs) = both() else { return };
    let outs: Vec<Vec<f32>> = devs.into_iter().map(|mut d| norms_case(&mut *d)).collect();
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
        state: None,
        records: None,
        empty: 0,
    };
    d.kv_alloc(cfg.clone()).unwrap();
    let rows: Vec<Row> = (0..BLOCK_SIZE).map(|pos| Row { pos, seq: 0 }).collect();
    let spec = AttnSpec {
        n_head: 1,
        n_head_kv: 1,
        head_dim: 32,
        scale: 0.2,
        window: None,
        causal: true,
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
            states: &[],
            checkpoints: &[],
            bidirectional: &[],
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

#[test]
fn kv_store_writes_the_bytes_the_reference_writes_for_every_kv_type() {
    for ty in [GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q8_0] {
        let cfg = KvConfig {
            n_layer: 1,
            n_head_kv: 2,
            head_dim: 64,
            ty,
            n_positions: 2 * BLOCK_SIZE,
            window: None,
            state: None,
            records: None,
            empty: 0,
        };
        let rows: Vec<Row> = (3..3 + BLOCK_SIZE).map(|pos| Row { pos, seq: 0 }).collect();
        let Some(devs) = both() else { return };
        let blocks: Vec<Vec<u8>> = devs
            .into_iter()
            .map(|mut d| {
                d.kv_alloc(cfg.clone()).unwrap();
                let k = buf(&mut *d, &data(BLOCK_SIZE * 128, 4));
                let v = buf(&mut *d, &data(BLOCK_SIZE * 128, 5));
                d.begin(&Step {
                    rows: &rows,
                    tables: &[&[1, 0]],
                    windowed: &[],
                    states: &[],
                    checkpoints: &[],
                    bidirectional: &[],
                });
                d.kv_store(0, k, v);
                d.finish();
                let mut bytes = Vec::new();
                for block in [0, 1] {
                    d.kv_read_block(block, &mut bytes);
                }
                bytes
            })
            .collect();
        assert_eq!(blocks[0], blocks[1], "{ty}");
    }
}

/// A pool whose layer 1 keeps a window of 16 positions (2 companions) beside full layer 0:
/// a block's bytes are layer 0's, a companion's layer 1's, the reference's bytes on both;
/// a companion written from them reads back the same, and its old place is untouched.
#[test]
fn kv_companions_read_and_write_the_windowed_layers_alone() {
    let cfg = KvConfig {
        n_layer: 2,
        n_head_kv: 2,
        head_dim: 64,
        ty: GgmlType::F16,
        n_positions: 4 * BLOCK_SIZE,
        window: Some(kv::WindowKv {
            size: BLOCK_SIZE,
            layers: 0b10,
            n_blocks: 2,
        }),
        state: None,
        records: None,
        empty: 0,
    };
    assert_eq!(cfg.windowed_block_bytes(), 2 * cfg.block_bytes());
    let rows: Vec<Row> = (0..BLOCK_SIZE).map(|pos| Row { pos, seq: 0 }).collect();
    let Some(devs) = both() else { return };
    let bytes: Vec<[Vec<u8>; 3]> = devs
        .into_iter()
        .map(|mut d| {
            d.kv_alloc(cfg.clone()).unwrap();
            let k = buf(&mut *d, &data(BLOCK_SIZE * 128, 6));
            let v = buf(&mut *d, &data(BLOCK_SIZE * 128, 7));
            d.begin(&Step {
                rows: &rows,
                tables: &[&[2]],
                windowed: &[&[1]],
                states: &[],
                checkpoints: &[],
                bidirectional: &[],
            });
            d.kv_store(0, k, v);
            d.kv_store(1, v, k);
            d.finish();
            let (mut block, mut companion, mut moved) = (Vec::new(), Vec::new(), Vec::new());
            d.kv_read_block(2, &mut block);
            d.kv_read_companion(1, &mut companion);
            d.kv_write_companion(0, &companion);
            d.kv_read_companion(0, &mut moved);
            d.kv_read_companion(1, &mut moved);
            [block, companion, moved]
        })
        .collect();
    let [block, companion, moved] = &bytes[0];
    assert_eq!(block.len(), 2 * cfg.block_bytes());
    assert_eq!(companion.len(), cfg.windowed_block_bytes());
    assert_ne!(block, companion, "layer 0's keys are layer 1's values");
    assert_eq!(*moved, [companion.clone(), companion.clone()].concat());
    assert_eq!(bytes[0], bytes[1], "the GPU's bytes are the reference's");
}

/// A record pool (DeepSeek-V4's) the GPU cannot keep is an error naming the fix, never a
/// panic: q8_0 records, and two-byte records with an odd number of kept values a position
/// (two share a word); f32 keeps either.
#[test]
fn record_pools_the_gpu_cannot_keep_are_refused_by_name() {
    for (ty, kept, fix) in [
        (GgmlType::Q8_0, 4, Some("-ctk f16")),
        (GgmlType::F16, 3, Some("-ctk f32")),
        (GgmlType::BF16, 3, Some("-ctk f32")),
        (GgmlType::F16, 4, None),
        (GgmlType::F32, 3, None),
    ] {
        let Some(mut g) = gpu() else { return };
        let cfg = KvConfig {
            n_layer: 1,
            n_head_kv: 1,
            head_dim: 64,
            ty,
            n_positions: 4 * BLOCK_SIZE,
            window: None,
            state: None,
            records: Some(vec![Some(kv::RecordKv { recent: 96, kept })].into()),
            empty: 0,
        };
        match (g.kv_alloc(cfg), fix) {
            (Ok(()), None) => {}
            (Err(e), Some(fix)) => assert!(e.to_string().contains(fix), "{ty} {kept}: {e}"),
            (got, _) => panic!("{ty}, {kept} kept: {got:?}"),
        }
    }
}

#[test]
fn mixture_of_experts_with_a_gated_shared_expert() {
    moe_agrees(&mut both);
}

#[test]
fn ops_are_timed_while_profiling_and_the_memory_is_probed() {
    let Some(mut dev) = gpu() else { return };
    assert!(dev.read_bandwidth().is_some_and(|b| b > 0.0));
    let (n, k) = (64, 256);
    let src = source(GgmlType::Q4_K, n, k, 2);
    let mats = dev
        .upload_matrices(std::slice::from_ref(&src), &|_, _| {})
        .unwrap();
    let (xb, yb) = (buf(&mut dev, &data(k, 1)), dev.alloc(n).unwrap());
    if !dev.profile_ops(true) {
        eprintln!("skipped: the adapter has no timestamp queries");
        return;
    }
    dev.matmul(&mats, xb, 1, &[MatOut::to(yb)]);
    dev.matmul(&mats, xb, 1, &[MatOut::to(yb)]);
    let times = dev.op_times();
    let mm = times
        .iter()
        .find(|o| o.op == "MatMul(Q4_K)")
        .expect("timed");
    assert_eq!(mm.calls, 2);
    assert_eq!(mm.bytes, 2 * n as u64 * 144);
    assert!(dev.op_times().is_empty(), "taken by the first call");
    dev.profile_ops(false);
    dev.matmul(&mats, xb, 1, &[MatOut::to(yb)]);
    assert!(dev.op_times().is_empty(), "not timed once off");
}

#[test]
fn attention_over_several_parts_and_a_window_across_them() {
    let (nh, nkv, hd, n) = (4, 2, 64, 300);
    let cfg = KvConfig {
        n_layer: 1,
        n_head_kv: nkv,
        head_dim: hd,
        ty: GgmlType::F16,
        n_positions: 20 * BLOCK_SIZE,
        window: None,
        state: None,
        records: None,
        empty: 0,
    };
    let table: Vec<u32> = (0..20).rev().collect();
    let rows: Vec<Row> = (0..n).map(|pos| Row { pos, seq: 0 }).collect();
    for window in [None, Some(150)] {
        let spec = AttnSpec {
            n_head: nh,
            n_head_kv: nkv,
            head_dim: hd,
            scale: 0.125,
            window,
            causal: true,
        };
        let Some([g, r]) = both() else { return };
        let grouped = gpu()
            .unwrap()
            .with_attention_parts_bytes(7 * 3 * (nh * (hd + 2) * 4) as u64);
        let mut outs = Vec::new();
        for mut d in [g, r, Box::new(grouped)] {
            d.kv_alloc(cfg.clone()).unwrap();
            let q = buf(&mut *d, &data(n * nh * hd, 1));
            let (k, v) = (
                buf(&mut *d, &data(n * nkv * hd, 2)),
                buf(&mut *d, &data(n * nkv * hd, 3)),
            );
            let out = d.alloc(n * nh * hd).unwrap();
            let tables: &[&[u32]] = &[&table];
            d.begin(&Step {
                rows: &rows,
                tables,
                windowed: &[],
                states: &[],
                checkpoints: &[],
                bidirectional: &[],
            });
            d.kv_store(0, k, v);
            d.attention(0, q, out, &spec);
            d.finish();
            let all = read(&mut *d, out, n * nh * hd);
            let last = (n - 1) * nh * hd;
            let q1 = buf(&mut *d, &data(n * nh * hd, 1)[last..]);
            d.begin(&Step {
                rows: &rows[n - 1..],
                tables,
                windowed: &[],
                states: &[],
                checkpoints: &[],
                bidirectional: &[],
            });
            d.attention(0, q1, out, &spec);
            d.finish();
            let alone = read(&mut *d, out, nh * hd);
            assert_eq!(
                bits(&alone),
                bits(&all[last..]),
                "{window:?}: the last row alone"
            );
            outs.push(all);
        }
        let e = rel(&outs[0], &outs[1], 1.0);
        assert!(e < 2e-5, "window {window:?}: {e}");
        assert_eq!(
            bits(&outs[0]),
            bits(&outs[2]),
            "{window:?}: rows in groups of 7"
        );
    }
}

/// Both take f32 (the GPU's exp and log the driver's, its sums a tree of 64 partials)
/// against the reference's f64: within 1e-5 of the largest value (at least 1).
#[test]
fn generic_primitives_agree_with_the_reference() {
    let Some([mut g, mut r]) = both() else { return };
    prims_agree(&mut *g, &mut *r, 1e-5);
}

/// The clamped SwiGLU and hyper-connections (Sinkhorn's exps and sums in f32 on both):
/// within 1e-5 of the largest value (at least 1).
#[test]
fn deepseek_s_swiglu_and_hyper_connections_agree_with_the_reference() {
    let Some([mut g, mut r]) = both() else { return };
    deepseek_agree(&mut *g, &mut *r, 1e-5);
}

/// The recurrences with state (the convolution with SiLU, the delta rule) over steps of two
/// sequences, a cut-back step restored from its checkpoint and a sequence starting over:
/// f32 sums in index order against the reference's, within 1e-5 of the largest value.
#[test]
fn the_state_recurrences_agree_with_the_reference() {
    let Some([mut g, mut r]) = both() else { return };
    let got = recurrent_case(&mut *g);
    let want = recurrent_case(&mut *r);
    let e = rel(&got, &want, 1.0);
    assert!(e < 1e-5, "{e}");
}

/// 300 rows of one sequence in one step: the delta rule walks them in pieces of at most
/// 123 rows of a head of 128 (llvmpipe's loop budget), the convolution in one; with 126
/// rows a piece, the first row of each later piece went wrong.
#[test]
fn a_long_run_of_the_recurrences_agrees_with_the_reference() {
    let Some([mut g, mut r]) = both() else { return };
    let got = long_run_case(&mut *g, 300);
    let want = long_run_case(&mut *r, 300);
    let e = rel(&got, &want, 1.0);
    assert!(e < 1e-5, "{e}");
}

/// A vision tower's ops (layer norm, attention over all 48 rows of 3 heads of 40, GELU and
/// quick GELU alone, a 2-D average pool): f32 against the reference's f64 sums.
#[test]
fn encoder_ops_agree_with_the_reference() {
    let Some(mut g) = gpu() else { return };
    let got = encoder_case(&mut g);
    let want = encoder_case(&mut Reference::new());
    let e = rel(&got, &want, 1.0);
    assert!(e < 1e-5, "{e}");
}

#[test]
fn an_upload_after_a_recorded_embed_lands_after_it() {
    let Some(mut g) = gpu() else { return };
    let dev: &mut dyn Device = &mut g;
    let src = device::testing::source(GgmlType::F32, 8, 32, 5);
    let table = dev.upload_matrices(&[src], &|_, _| {}).unwrap()[0];
    let out = dev.alloc(4 * 32).unwrap();
    dev.begin(&Step::default());
    dev.embed(table, &[1, 2, 3, 4], out);
    dev.upload(out, 32, &[7.0; 32]);
    dev.finish();
    let mut got = vec![0f32; 4 * 32];
    dev.download(out, 0, &mut got);
    assert_eq!(&got[32..64], &[7.0; 32]);
}
