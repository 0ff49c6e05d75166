//! Quantized matmul: activations quantized per row to 8 bits, integer dot products.
//! Matrices repacked at load go through [`packed`] (tiles of 16 rows); the others have
//! their weight rows decoded once per call, four rows per activation load.
//!
//! Each output element is one [`scalar::dot`] sequence whatever M, the tiling, the thread
//! count or the instruction set, so rows are batch-invariant and the SIMD path gives the
//! scalar twin's bits.

pub mod act;
pub mod decode;
pub mod packed;
pub mod scalar;
#[cfg(target_arch = "x86_64")]
mod x86;

use std::cell::RefCell;

use act::{ActLayout, ActRow, QActs};
use decode::{DecodedRow, Scheme};
use packed::PackedIsa;

pub use crate::features::QIsa;
use crate::forms::IntForm;
use crate::pool::{SharedOut, ThreadPool};
use crate::qmatrix::QMatrix;

/// Four dot products of `w[r]` with `x`.
pub fn dot4(isa: QIsa, scheme: Scheme, w: [&DecodedRow; 4], x: ActRow) -> [f32; 4] {
    match isa {
        QIsa::Scalar => w.map(|r| scalar::dot(scheme, r, x)),
        #[cfg(target_arch = "x86_64")]
        // SAFETY: Avx2 is only detected on CPUs with AVX2 and FMA.
        QIsa::Avx2 => unsafe { x86::dot4(scheme, w, x) },
    }
}

thread_local! {
    static ACTS: RefCell<QActs> = RefCell::new(QActs::default());
    /// Per group of [`matmul_packed_grouped`]: its rows in the 32- and 256-value layouts.
    static GROUP_ACTS: RefCell<Vec<[QActs; 2]>> = const { RefCell::new(Vec::new()) };
    static ROWS: RefCell<[DecodedRow; 4]> = RefCell::new(Default::default());
}

/// Products of packed matrices with activation rows, in one dispatch of the pool: for each
/// group `(ws, x)` (matrices of one row length) and each of its matrices `w`, the next
/// output of `ys` (group by group, matrix by matrix) is `x · wᵀ`. Each group's rows are
/// quantized once per activation layout.
pub fn matmul_packed_grouped(
    pool: &ThreadPool,
    isa: PackedIsa,
    groups: &[(&[&packed::PackedMatrix], &[f32])],
    ys: &mut [&mut [f32]],
) {
    assert_eq!(
        groups.iter().map(|(ws, _)| ws.len()).sum::<usize>(),
        ys.len(),
        "one output per matrix"
    );
    GROUP_ACTS.with(|cell| {
        let mut acts = cell.borrow_mut();
        if acts.len() < groups.len() {
            acts.resize_with(groups.len(), Default::default);
        }
        for ((ws, x), [a32, a256]) in groups.iter().zip(acts.iter_mut()) {
            let k = ws[0].n_cols;
            assert!(ws.iter().all(|w| w.n_cols == k), "row lengths differ");
            if ws.iter().any(|w| w.act_layout == ActLayout::B32) {
                a32.quantize(x, k, ActLayout::B32);
            }
            if ws.iter().any(|w| w.act_layout == ActLayout::B256) {
                a256.quantize(x, k, ActLayout::B256);
            }
        }
        let mut jobs = Vec::with_capacity(ys.len());
        let mut outs = ys.iter_mut();
        for ((ws, _), [a32, a256]) in groups.iter().zip(acts.iter()) {
            for w in ws.iter() {
                let acts = match w.act_layout {
                    ActLayout::B32 => a32,
                    ActLayout::B256 => a256,
                };
                jobs.push((*w, acts, &mut **outs.next().expect("counted")));
            }
        }
        packed::matmul_many(pool, isa, &mut jobs);
    });
}

/// `y[m, n] = Σ_k x[m, k] · w[n, k]` for a quantized `w` (`form` is its type's).
/// `x` is `[m, w.n_cols]`, `y` is `[m, w.n_rows]`.
pub fn matmul(pool: &ThreadPool, isa: QIsa, form: &IntForm, w: &QMatrix, x: &[f32], y: &mut [f32]) {
    let (k, n) = (w.n_cols, w.n_rows);
    let scheme = form.scheme;
    ACTS.with(|a| {
        let mut acts = a.borrow_mut();
        acts.quantize(x, k, scheme.layout);
        let acts = &*acts;
        let m = acts.m;
        if let (Some(p), Some(pisa), false) = (w.packed, PackedIsa::detect(), isa == QIsa::Scalar) {
            return packed::matmul(pool, pisa, p, acts, y);
        }
        let out = SharedOut::new(y);
        let rb = w.row_bytes();
        pool.for_ranges(n.div_ceil(4), &|tiles| {
            ROWS.with(|rows| {
                let mut rows = rows.borrow_mut();
                for tile in tiles {
                    let r0 = 4 * tile;
                    let live = 4.min(n - r0);
                    for (i, row) in rows.iter_mut().enumerate().take(live) {
                        form.decode_row(row, &w.data[(r0 + i) * rb..(r0 + i + 1) * rb], k);
                    }
                    let rows = &*rows;
                    let pick = [0, 1, 2, 3].map(|i| &rows[i.min(live - 1)]);
                    for mi in 0..m {
                        let v = dot4(isa, scheme, pick, acts.row(mi));
                        // SAFETY: this thread alone writes columns r0..r0+live.
                        let ym = unsafe { out.slice(mi * n + r0, live) };
                        ym.copy_from_slice(&v[..live]);
                    }
                }
            });
        });
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::formats::dequantize_row;
    use device::testing::{data, random_blocks};
    use gguf::GgmlType;

    /// Every type the CPU's table gives an integer form.
    fn int8_types() -> impl Iterator<Item = GgmlType> {
        crate::forms::FORMS
            .iter()
            .filter(|f| f.int8.is_some())
            .map(|f| f.ty)
    }

    #[test]
    fn decoded_rows_reproduce_dequantization() {
        let k = 512;
        for ty in int8_types() {
            let bytes = random_blocks(ty, 1, k, 3);
            let form = crate::forms::int_form(ty).unwrap();
            let scheme = form.scheme;
            let mut row = DecodedRow::default();
            form.decode_row(&mut row, &bytes, k);
            let mut want = vec![0f32; k];
            dequantize_row(ty, &bytes, &mut want).unwrap();
            #[allow(clippy::needless_range_loop)]
            for i in 0..k {
                let q = if scheme.signed {
                    row.q[i] as i8 as i32
                } else {
                    row.q[i] as i32
                } - scheme.offset;
                let got = match scheme.layout {
                    act::ActLayout::B32 => {
                        let b = i / 32;
                        row.d[b] * q as f32 + if scheme.has_min { row.m[b] } else { 0.0 }
                    }
                    act::ActLayout::B256 => {
                        let (s, j) = (i / 256, i / 16);
                        let mn = if scheme.has_min {
                            row.m[s] * row.mn[j] as f32
                        } else {
                            0.0
                        };
                        row.d[s] * row.sc16[j] as f32 * q as f32 - mn
                    }
                };
                assert!(
                    (got - want[i]).abs() <= 1e-5 * want[i].abs().max(1.0),
                    "{ty} element {i}: {got} vs {}",
                    want[i]
                );
            }
        }
    }

    #[test]
    fn simd_matches_scalar_twin_and_reference() {
        let (n, k) = (6, 512);
        let isa = QIsa::detect();
        for ty in int8_types() {
            let bytes = random_blocks(ty, n, k, 5);
            let w = QMatrix::new(ty, &bytes, n, k).unwrap();
            let form = crate::forms::int_form(ty).unwrap();
            let scheme = form.scheme;
            let x = data(3 * k, 9);
            let mut acts = QActs::default();
            acts.quantize(&x, k, scheme.layout);
            let mut rows: Vec<DecodedRow> = vec![DecodedRow::default(); n];
            for (r, row) in rows.iter_mut().enumerate() {
                form.decode_row(row, &bytes[r * w.row_bytes()..(r + 1) * w.row_bytes()], k);
            }
            let mut deq = vec![0f32; k];
            for m in 0..3 {
                let got = dot4(
                    isa,
                    scheme,
                    [&rows[0], &rows[1], &rows[2], &rows[5]],
                    acts.row(m),
                );
                for (i, &r) in [0, 1, 2, 5].iter().enumerate() {
                    let twin = scalar::dot(scheme, &rows[r], acts.row(m));
                    assert_eq!(got[i].to_bits(), twin.to_bits(), "{ty} row {r}");
                    w.dequantize_row(r, &mut deq);
                    let exact: f64 = deq
                        .iter()
                        .zip(&x[m * k..])
                        .map(|(a, b)| *a as f64 * *b as f64)
                        .sum();
                    let norm: f64 = deq.iter().map(|a| (*a as f64).abs()).sum::<f64>() / 100.0;
                    assert!(
                        (twin as f64 - exact).abs() < norm.max(1e-3),
                        "{ty}: {twin} vs {exact}"
                    );
                }
            }
        }
    }

    #[test]
    fn rows_are_identical_across_batch_sizes_and_threads() {
        let (n, k) = (13, 256);
        for ty in int8_types() {
            let bytes = random_blocks(ty, n, k, 7);
            let w = QMatrix::new(ty, &bytes, n, k).unwrap();
            let form = crate::forms::int_form(ty).unwrap();
            let x = data(64 * k, 11);
            let mut reference = vec![0f32; 64 * n];
            matmul(
                &ThreadPool::new(1),
                QIsa::Scalar,
                form,
                &w,
                &x,
                &mut reference,
            );
            for threads in [1, 2] {
                let pool = ThreadPool::new(threads);
                for m in [1, 8, 64] {
                    let start = 64 - m;
                    let mut y = vec![0f32; m * n];
                    matmul(&pool, QIsa::detect(), form, &w, &x[start * k..], &mut y);
                    let want = &reference[start * n..];
                    assert!(
                        y.iter().zip(want).all(|(a, b)| a.to_bits() == b.to_bits()),
                        "{ty} m={m} threads={threads}"
                    );
                }
            }
        }
    }
}
