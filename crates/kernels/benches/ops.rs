//! Row operations at the sizes of Qwen2.5-Coder-1.5B: RMSNorm and SwiGLU over one row,
//! activation quantization for the integer matmul. `cargo bench -p kernels --bench ops`.

mod common;

use common::values;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use kernels::ops::{rms_norm, swiglu_inplace};
use kernels::qmatmul::act::{ActLayout, QActs};

fn bench(c: &mut Criterion) {
    let (e, ff) = (1536, 8960);
    let mut g = c.benchmark_group("ops");
    let (x, w) = (values(e, 1), values(e, 2));
    let mut out = vec![0f32; e];
    g.throughput(Throughput::Elements(e as u64));
    g.bench_function("rms_norm/1536", |b| {
        b.iter(|| rms_norm(&x, &w, 1e-6, &mut out))
    });
    let (gate, up) = (values(ff, 3), values(ff, 4));
    let mut work = gate.clone();
    g.throughput(Throughput::Elements(ff as u64));
    g.bench_function("swiglu/8960", |b| {
        b.iter(|| {
            work.copy_from_slice(&gate);
            swiglu_inplace(&mut work, &up)
        })
    });
    let rows = values(8 * e, 5);
    let mut acts = QActs::default();
    g.throughput(Throughput::Elements(rows.len() as u64));
    for layout in [ActLayout::B32, ActLayout::B256] {
        g.bench_function(format!("quantize/{layout:?}/8x1536"), |b| {
            b.iter(|| acts.quantize(&rows, e, layout))
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
