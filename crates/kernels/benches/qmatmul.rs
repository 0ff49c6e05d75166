//! Quantized matmul over M activation rows, packed kernels, for the formats the real
//! models use, at the shapes of Qwen2.5-Coder-1.5B's projections (K = 1536).
//! `cargo bench -p kernels --bench qmatmul`.
//!
//! `qmatmul/…`: one 1536 × 1536 matrix on one thread, from cache (the kernels' arithmetic
//! rate, in multiply-adds per second). `stream/…`: 8960 × 1536 matrices, 128 MiB or more of
//! them, on every core, in weight bytes per second beside `stream/read`, a plain sum of as
//! many bytes: decode's share of the memory's rate, and the row count M at which a format
//! stops being bound by memory (its bytes per second fall below M = 1's).

mod common;

use common::values;
use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use device::Precision;
use gguf::GgmlType;
use kernels::formats::quantize_row;
use kernels::{matmul, PackedMatrix, QMatrix, ThreadPool};

const TYPES: [GgmlType; 5] = [
    GgmlType::Q4_K,
    GgmlType::Q6_K,
    GgmlType::Q5_0,
    GgmlType::Q8_0,
    GgmlType::Q4_1,
];

/// `n × k` of `ty`, quantized from pseudo-random values.
fn quantized(ty: GgmlType, n: usize, k: usize) -> Vec<u8> {
    let rb = ty.row_bytes(k as u64).unwrap() as usize;
    let w = values(n * k, 3);
    let mut bytes = vec![0u8; rb * n];
    for r in 0..n {
        quantize_row(ty, &w[r * k..(r + 1) * k], &mut bytes[r * rb..(r + 1) * rb]).unwrap();
    }
    bytes
}

fn bench(c: &mut Criterion) {
    let (n, k) = (1536, 1536);
    let pool = ThreadPool::new(1);
    for ty in TYPES {
        let bytes = quantized(ty, n, k);
        let plain = QMatrix::new(ty, &bytes, n, k).unwrap();
        let packed = plain.pack();
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

/// Bytes the streaming benchmarks read per pass: far past the caches.
const STREAM_BYTES: usize = 128 << 20;

fn stream(c: &mut Criterion) {
    let (n, k) = (8960, 1536);
    let threads = std::thread::available_parallelism().map_or(1, |t| t.get());
    let pool = ThreadPool::new(threads);
    let mut group = c.benchmark_group(format!("stream/{threads} threads"));
    group.sample_size(20);
    let words: Vec<u64> = (0..STREAM_BYTES / 8).map(|i| i as u64).collect();
    group.throughput(Throughput::Bytes(STREAM_BYTES as u64));
    let sink = AtomicU64::new(0);
    group.bench_function("read", |b| {
        b.iter(|| {
            pool.for_ranges(words.len(), &|r| {
                let sum = words[r].iter().fold(0u64, |a, &w| a.wrapping_add(w));
                sink.fetch_add(sum, Ordering::Relaxed);
            })
        })
    });
    black_box(sink.load(Ordering::Relaxed));
    drop(words);
    for ty in TYPES {
        let bytes = quantized(ty, n, k);
        let plain = QMatrix::new(ty, &bytes, n, k).unwrap();
        let one = plain.pack().unwrap();
        let count = STREAM_BYTES.div_ceil(one.bytes());
        let packs: Vec<PackedMatrix> = (0..count).map(|_| plain.pack().unwrap()).collect();
        group.throughput(Throughput::Bytes((count * one.bytes()) as u64));
        for m in [1, 2, 3, 4, 8] {
            let x = values(m * k, 5);
            let mut y = vec![0f32; m * n];
            group.bench_with_input(BenchmarkId::new(format!("{ty}"), m), &m, |b, _| {
                b.iter(|| {
                    for p in &packs {
                        let q = plain.with_packed(Some(p));
                        matmul(&pool, &q, &x, &mut y, Precision::Int8);
                    }
                })
            });
        }
    }
    group.finish();
}

criterion_group!(benches, bench, stream);
criterion_main!(benches);
