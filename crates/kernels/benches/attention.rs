//! Decode attention of one row (12 query heads over 2 KV heads of 128, Qwen2.5-Coder-1.5B)
//! against f16 keys and values, at several context lengths.
//! `cargo bench -p kernels --bench attention`.

mod common;

use common::values;
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use gguf::GgmlType;
use kernels::attention::{attend, AttentionScratch, KvView};
use kernels::formats::quantize_row;

fn bench(c: &mut Criterion) {
    let (hd, n_head_kv, group, bs) = (128, 2, 6, 16);
    let mut g = c.benchmark_group("attention/decode");
    for n_kv in [128, 1024, 4096] {
        let f16 = |seed| {
            let v = values(n_kv * n_head_kv * hd, seed);
            let mut b = vec![0u8; v.len() * 2];
            quantize_row(GgmlType::F16, &v, &mut b).unwrap();
            b
        };
        let (kb, vb) = (f16(1), f16(2));
        let bytes = bs * n_head_kv * hd * 2;
        let (kbl, vbl): (Vec<&[u8]>, Vec<&[u8]>) =
            (kb.chunks(bytes).collect(), vb.chunks(bytes).collect());
        let view = |blocks| KvView {
            ty: GgmlType::F16,
            blocks,
            block_size: bs,
            n_head_kv,
            head_dim: hd,
        };
        let (keys, vals) = (view(&kbl), view(&vbl));
        let q = values(n_head_kv * group * hd, 3);
        let mut out = vec![0f32; group * hd];
        let mut scratch = AttentionScratch::default();
        g.throughput(Throughput::Elements(n_kv as u64));
        g.bench_with_input(BenchmarkId::from_parameter(n_kv), &n_kv, |b, &n| {
            b.iter(|| {
                for kv_head in 0..n_head_kv {
                    let heads = kv_head * group..(kv_head + 1) * group;
                    attend(
                        &[&q],
                        std::slice::from_ref(&(0..n)),
                        &keys,
                        &vals,
                        kv_head,
                        heads,
                        0.088,
                        &mut scratch,
                        &mut [&mut out],
                    );
                }
            })
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
