//! Expert-grouped matmul (`kernels::matmul_grouped`) at the shapes of the ~0.5B synthetic
//! mixture (`tandem synth`): 8 blocks × 64 experts of `[256, 1024]` Q4_K (75 MB packed,
//! more than the caches hold), one dispatch per block over the experts that have rows.
//! Compares 8 experts × 1 row (one token) with 8 experts × 8 rows (8 rows that chose the
//! same experts: each expert's weights stream once) and with the same 64 rows spread over
//! more experts (8 rows that chose differently). 2 threads.
//! `cargo bench -p kernels --bench moe`.

mod common;

use common::values;
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use device::Precision;
use gguf::GgmlType;
use kernels::formats::quantize_row;
use kernels::{matmul_grouped, Group, PackedMatrix, QMatrix, ThreadPool};

const BLOCKS: usize = 8;
const EXPERTS: usize = 64;
const N: usize = 256;
const K: usize = 1024;

fn bench(c: &mut Criterion) {
    let ty = GgmlType::Q4_K;
    let rb = ty.row_bytes(K as u64).unwrap() as usize;
    let bytes: Vec<Vec<u8>> = (0..BLOCKS * EXPERTS)
        .map(|i| {
            let w = values(N * K, i as u64 + 1);
            let mut b = vec![0u8; rb * N];
            for r in 0..N {
                quantize_row(ty, &w[r * K..(r + 1) * K], &mut b[r * rb..(r + 1) * rb]).unwrap();
            }
            b
        })
        .collect();
    let packed: Vec<PackedMatrix> = bytes
        .iter()
        .map(|b| QMatrix::new(ty, b, N, K).unwrap().pack().unwrap())
        .collect();
    let ws: Vec<[QMatrix; 1]> = bytes
        .iter()
        .zip(&packed)
        .map(|(b, p)| [QMatrix::new(ty, b, N, K).unwrap().with_packed(Some(p))])
        .collect();
    let pool = ThreadPool::new(2);
    let x = values(64 * K, 7);
    let mut y = vec![0f32; 64 * N];
    let mut group = c.benchmark_group(format!("moe/{ty}/{EXPERTS}x{N}x{K}x{BLOCKS}"));
    // (name, experts with rows, rows each)
    for (name, experts, rows) in [
        ("8 experts x 1 row", 8, 1),
        ("8 experts x 8 rows", 8, 8),
        ("32 experts x 2 rows", 32, 2),
        ("64 experts x 1 row", 64, 1),
    ] {
        group.bench_with_input(BenchmarkId::from_parameter(name), &name, |b, _| {
            b.iter(|| {
                for block in 0..BLOCKS {
                    let groups: Vec<Group> = (0..experts)
                        .map(|e| Group {
                            ws: &ws[block * EXPERTS + e * EXPERTS / experts],
                            x: &x[e * rows * K..(e + 1) * rows * K],
                        })
                        .collect();
                    let mut ys: Vec<&mut [f32]> =
                        y[..experts * rows * N].chunks_mut(rows * N).collect();
                    matmul_grouped(&pool, &groups, &mut ys, Precision::Int8);
                }
            })
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
