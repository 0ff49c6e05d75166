use gguf::GgmlType;

use super::*;
use crate::qmatmul::scalar;
use crate::qmatrix::QMatrix;
use device::testing::{data, noise_blocks, random_blocks, saturated_blocks};

const PACKED: [GgmlType; 12] = [
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q5_1,
    GgmlType::Q8_0,
    GgmlType::Q4_K,
    GgmlType::Q6_K,
    GgmlType::IQ4_NL,
    GgmlType::IQ4_XS,
    GgmlType::MXFP4,
    GgmlType::IQ2_XXS,
    GgmlType::IQ3_XXS,
];

/// The instruction sets this CPU can run, best first.
fn isas() -> Vec<PackedIsa> {
    match PackedIsa::detect() {
        Some(PackedIsa::Avx512Vnni) => vec![PackedIsa::Avx512Vnni, PackedIsa::Avx2],
        Some(PackedIsa::Avx2) => vec![PackedIsa::Avx2],
        None => vec![],
    }
}

/// Every packed kernel, for rows alone, inside batches of 3 to 64 and at 1 or 2 threads,
/// gives each output the scalar twin's bits, on quantized data, on random bit patterns
/// and on the largest quants against activations all at +127 (row 0) or -127 (row 1);
/// 37 rows leave a partial tile.
#[test]
fn packed_kernels_give_the_scalar_twins_bits() {
    let (n, k, m_all) = (37, 512, 64);
    let mut x = data(m_all * k, 21);
    x[..k].fill(1.0);
    x[k..2 * k].fill(-1.0);
    for ty in PACKED {
        for (fill, bytes) in [
            ("quantized", random_blocks(ty, n, k, 3)),
            ("noise", noise_blocks(ty, n, k, 4)),
            ("saturated", saturated_blocks(ty, n, k)),
        ] {
            let w = QMatrix::new(ty, &bytes, n, k).unwrap();
            let packed = w.pack().unwrap();
            assert_eq!(
                Some(packed.bytes()),
                PackedMatrix::planned_bytes(ty, n, k).map(|b| b.next_multiple_of(64))
            );
            let form = crate::forms::int_form(ty).unwrap();
            let scheme = form.scheme;
            let mut acts = QActs::default();
            acts.quantize(&x, k, scheme.layout);
            let mut row = DecodedRow::default();
            let mut want = vec![0f32; m_all * n];
            for r in 0..n {
                form.decode_row(
                    &mut row,
                    &bytes[r * w.row_bytes()..(r + 1) * w.row_bytes()],
                    k,
                );
                for m in 0..m_all {
                    want[m * n + r] = scalar::dot(scheme, &row, acts.row(m));
                }
            }
            for isa in isas() {
                for threads in [1, 2] {
                    let pool = ThreadPool::new(threads);
                    for (start, m) in [(0, 64), (5, 1), (2, 3), (4, 8), (1, 13), (63, 1)] {
                        let mut sub = QActs::default();
                        sub.quantize(&x[start * k..(start + m) * k], k, scheme.layout);
                        let mut y = vec![0f32; m * n];
                        matmul(&pool, isa, &packed, &sub, &mut y);
                        for (i, (got, want)) in y.iter().zip(&want[start * n..]).enumerate() {
                            assert_eq!(
                                got.to_bits(),
                                want.to_bits(),
                                "{ty} {fill} {isa:?} threads={threads} m={m}: row {} col {}: {got} vs {want}",
                                start + i / n,
                                i % n
                            );
                        }
                    }
                }
            }
        }
    }
}

/// Rows past one block of [`row_block`] (here 24 rows of 8192 values) get the scalar
/// twin's bits like the first ones: a prompt's rows are run a block at a time.
#[cfg(target_arch = "x86_64")]
#[test]
fn rows_of_later_blocks_give_the_scalar_twins_bits() {
    let (n, k, m) = (20, 8192, 53);
    assert!(row_block(k, 8) < m / 2, "the rows span several blocks");
    let x = data(m * k, 7);
    for ty in [GgmlType::Q4_K, GgmlType::Q8_0] {
        let bytes = random_blocks(ty, n, k, 5);
        let w = QMatrix::new(ty, &bytes, n, k).unwrap();
        let packed = w.pack().unwrap();
        let form = crate::forms::int_form(ty).unwrap();
        let scheme = form.scheme;
        let mut acts = QActs::default();
        acts.quantize(&x, k, scheme.layout);
        let mut row = DecodedRow::default();
        for isa in isas() {
            let mut y = vec![0f32; m * n];
            matmul(&ThreadPool::new(2), isa, &packed, &acts, &mut y);
            for r in 0..n {
                form.decode_row(
                    &mut row,
                    &bytes[r * w.row_bytes()..(r + 1) * w.row_bytes()],
                    k,
                );
                for i in 0..m {
                    let want = scalar::dot(scheme, &row, acts.row(i));
                    assert_eq!(
                        y[i * n + r].to_bits(),
                        want.to_bits(),
                        "{ty} {isa:?} row {i} col {r}"
                    );
                }
            }
        }
    }
}

/// MXFP4's scales in the kernels are `device::formats::mxfp4::half`'s bits for every
/// exponent (a row's sum hides the subnormal ones: its other blocks outweigh them).
#[cfg(target_arch = "x86_64")]
#[test]
fn every_e8m0_exponent_gives_mxfp4s_scale() {
    use crate::formats::mxfp4;
    unsafe fn halves<A: Lanes>(e: &[u8]) -> Vec<f32> {
        let mut out = vec![0f32; e.len()];
        for (c, o) in e.chunks_exact(A::LANES).zip(out.chunks_exact_mut(A::LANES)) {
            A::store(A::e8m0_half(c.as_ptr()), o.as_mut_ptr());
        }
        out
    }
    let e: Vec<u8> = (0..=254).chain([0]).collect();
    for isa in isas() {
        // SAFETY: the CPU has `isa`; `e` is whole vectors.
        let got = unsafe {
            match isa {
                PackedIsa::Avx512Vnni => halves::<Avx512>(&e),
                PackedIsa::Avx2 => halves::<Avx2>(&e),
            }
        };
        for (&e, got) in e.iter().zip(got) {
            assert_eq!(got.to_bits(), mxfp4::half(e).to_bits(), "{isa:?} e={e}");
        }
    }
}
