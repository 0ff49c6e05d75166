//! Quantized matmul over M activation rows, packed kernels, for the formats the real
//! models use, at the shapes of Qwen2.5-Coder-1.5B's projections (K = 1536).
//! `cargo bench -p kernels --bench qmatmul`.

mod common;

use common::values;
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use gguf::GgmlType;
use kernels::formats::quantize_row;
use kernels::{matmul, PackedMatrix, Precision, QMatrix, ThreadPool};

fn bench(c: &mut Criterion) {
    let (n, k) = (1536, 1536);
    let pool = ThreadPool::new(1);
    for ty in [
        GgmlType::Q4_K,
        GgmlType::Q6_K,
        GgmlType::Q5_0,
        GgmlType::Q8_0,
        GgmlType::Q4_1,
    ] {
        let rb = ty.row_bytes(k as u64).unwrap() as usize;
        let w = values(n * k, 3);
        let mut bytes = vec![0u8; rb * n];
        for r in 0..n {
            quantize_row(ty, &w[r * k..(r + 1) * k], &mut bytes[r * rb..(r + 1) * rb]).unwrap();
        }
        let plain = QMatrix::new(ty, &bytes, n, k).unwrap();
        let packed = PackedMatrix::pack(&plain);
        let q = plain.with_packed(packed.as_ref());
        let mut group = c.benchmark_group(format!("qmatmul/{ty}/{n}x{k}"));
        for m in [1, 2, 4, 8, 64] {
            let x = values(m * k, 5);
            let mut y = vec![0f32; m * n];
            group.throughput(Throughput::Elements((m * n * k) as u64));
            group.bench_with_input(BenchmarkId::from_parameter(m), &m, |b, _| {
                b.iter(|| matmul(&pool, &q, &x, &mut y, Precision::Int8))
            });
        }
        group.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
