//! Matmul of a stored (possibly quantized) weight matrix with M activation rows.
//!
//! Quantized weights go through [`crate::qmatmul`] (8-bit activations, integer dots);
//! float weights (F32, F16, BF16) through the f32 path here. Threads split the weight rows (output columns); each output element is one `dot` of
//! fixed order, so a row's result is the same whatever M, the tiling or the thread count.

use std::cell::RefCell;

use crate::dot::{dot, dot4, Isa};
use crate::forms::int_form;
use crate::pool::{SharedOut, ThreadPool};
use crate::qmatmul::packed::{PackedIsa, PackedMatrix};
use crate::qmatmul::QIsa;
use crate::qmatrix::QMatrix;
use device::Precision;

/// Weight rows dequantized together and applied to every activation row.
pub(crate) const TILE_ROWS: usize = 16;

thread_local! {
    static SCRATCH: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// `y[m, n] = sum_k x[m, k] * w[n, k]`.
///
/// Shapes: `x` is `[m, w.n_cols]`, `y` is `[m, w.n_rows]`; `m` is `x.len() / w.n_cols`.
pub fn matmul(pool: &ThreadPool, w: &QMatrix, x: &[f32], y: &mut [f32], precision: Precision) {
    let (k, n) = (w.n_cols, w.n_rows);
    assert_eq!(x.len() % k, 0, "x is not [m, {k}]");
    let m = x.len() / k;
    assert_eq!(y.len(), m * n, "y is not [{m}, {n}]");
    if let (Some(form), Precision::Int8) = (int_form(w.ty), precision) {
        return crate::qmatmul::matmul(pool, QIsa::detect(), form, w, x, y);
    }
    matmul_f32(pool, w, x, y);
}

/// `ys[i][m, n] = Σ_k x[m, k] · ws[i][n, k]` for matrices of the same row length (the
/// projections of one input): one quantization of `x` and one dispatch of the pool when
/// all are packed, otherwise one [`matmul`] each. Results are those of [`matmul`].
pub fn matmul_many(
    pool: &ThreadPool,
    ws: &[QMatrix],
    x: &[f32],
    ys: &mut [&mut [f32]],
    precision: Precision,
) {
    matmul_grouped(pool, &[Group { ws, x }], ys, precision);
}

/// One group of [`matmul_grouped`]: activation rows `x` (`[m, k]`) and the matrices of row
/// length `k` that multiply them.
#[derive(Clone, Copy)]
pub struct Group<'a> {
    pub ws: &'a [QMatrix<'a>],
    pub x: &'a [f32],
}

/// [`matmul_many`] for several inputs at once (the experts of a mixture, each with the rows
/// routed to it): `ys` holds one output per matrix, group by group, `[m_g, ws[i].n_rows]`
/// each. When every matrix is packed this is one dispatch of the pool over all of them,
/// each group's rows quantized once; otherwise one [`matmul`] per matrix. Either way every
/// output is [`matmul`]'s, bit for bit.
pub fn matmul_grouped(
    pool: &ThreadPool,
    groups: &[Group],
    ys: &mut [&mut [f32]],
    precision: Precision,
) {
    assert_eq!(
        groups.iter().map(|g| g.ws.len()).sum::<usize>(),
        ys.len(),
        "one output per matrix"
    );
    let mut outs = ys.iter_mut();
    let mut checked = Vec::with_capacity(groups.len());
    for g in groups {
        let k = g.ws[0].n_cols;
        assert!(g.ws.iter().all(|w| w.n_cols == k), "row lengths differ");
        assert_eq!(g.x.len() % k, 0, "x is not [m, {k}]");
        let m = g.x.len() / k;
        for w in g.ws {
            let y = outs.next().expect("counted");
            assert_eq!(y.len(), m * w.n_rows, "y is not [{m}, {}]", w.n_rows);
        }
        checked.push(g.ws.iter().map(|w| w.packed).collect::<Option<Vec<_>>>());
    }
    let all_packed: Option<Vec<Vec<&PackedMatrix>>> = checked.into_iter().collect();
    if let (Precision::Int8, Some(packed), Some(isa)) = (precision, all_packed, PackedIsa::detect())
    {
        let jobs: Vec<(&[&PackedMatrix], &[f32])> = packed
            .iter()
            .zip(groups)
            .map(|(ws, g)| (ws.as_slice(), g.x))
            .collect();
        return crate::qmatmul::matmul_packed_grouped(pool, isa, &jobs, ys);
    }
    let mut outs = ys.iter_mut();
    for g in groups {
        for w in g.ws {
            matmul(pool, w, g.x, outs.next().expect("counted"), precision);
        }
    }
}

/// The float path (F32, F16, BF16 weights): rows dequantized to f32, fixed-order f32 dots.
fn matmul_f32(pool: &ThreadPool, w: &QMatrix, x: &[f32], y: &mut [f32]) {
    let (k, n) = (w.n_cols, w.n_rows);
    let m = x.len() / k;
    let isa = Isa::detect();
    let out = SharedOut::new(y);
    let n_tiles = n.div_ceil(TILE_ROWS);
    pool.for_ranges(n_tiles, &|tiles| {
        SCRATCH.with(|s| {
            let mut scratch = s.borrow_mut();
            scratch.resize(TILE_ROWS * k, 0.0);
            for tile in tiles {
                let r0 = tile * TILE_ROWS;
                let rows = TILE_ROWS.min(n - r0);
                for r in 0..rows {
                    w.dequantize_row(r0 + r, &mut scratch[r * k..(r + 1) * k]);
                }
                let wrow = |r: usize| &scratch[r * k..(r + 1) * k];
                for mi in 0..m {
                    let xm = &x[mi * k..(mi + 1) * k];
                    // SAFETY: this thread alone writes columns r0..r0+rows of every row.
                    let ym = unsafe { out.slice(mi * n + r0, rows) };
                    let mut r = 0;
                    while r + 4 <= rows {
                        let v = dot4(isa, xm, [wrow(r), wrow(r + 1), wrow(r + 2), wrow(r + 3)]);
                        ym[r..r + 4].copy_from_slice(&v);
                        r += 4;
                    }
                    for (rr, yv) in ym.iter_mut().enumerate().skip(r) {
                        *yv = dot(isa, xm, wrow(rr));
                    }
                }
            }
        });
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::formats::quantize_row;
    use device::testing::data;
    use gguf::GgmlType;

    fn quantized(ty: GgmlType, n: usize, k: usize) -> Vec<u8> {
        quantized_seeded(ty, n, k, 7)
    }

    fn quantized_seeded(ty: GgmlType, n: usize, k: usize, seed: u64) -> Vec<u8> {
        let w = data(n * k, seed);
        let rb = ty.row_bytes(k as u64).unwrap() as usize;
        let mut bytes = vec![0u8; rb * n];
        for r in 0..n {
            quantize_row(ty, &w[r * k..(r + 1) * k], &mut bytes[r * rb..(r + 1) * rb]).unwrap();
        }
        bytes
    }

    #[test]
    fn rows_are_identical_across_batch_sizes_and_threads() {
        let (n, k) = (37, 256);
        for ty in [
            GgmlType::F32,
            GgmlType::F16,
            GgmlType::BF16,
            GgmlType::Q8_0,
            GgmlType::Q4_K,
        ] {
            let bytes = quantized(ty, n, k);
            let w = QMatrix::new(ty, &bytes, n, k).unwrap();
            let x = data(64 * k, 11);
            let mut reference = vec![0f32; 64 * n];
            matmul(&ThreadPool::new(1), &w, &x, &mut reference, Precision::Int8);
            for threads in [1, 2, 3] {
                let pool = ThreadPool::new(threads);
                for m in [1, 2, 5, 64] {
                    for start in [0, 64 - m] {
                        let mut y = vec![0f32; m * n];
                        matmul(
                            &pool,
                            &w,
                            &x[start * k..(start + m) * k],
                            &mut y,
                            Precision::Int8,
                        );
                        let want = &reference[start * n..(start + m) * n];
                        assert!(
                            y.iter().zip(want).all(|(a, b)| a.to_bits() == b.to_bits()),
                            "{ty} m={m} threads={threads}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn grouped_outputs_are_those_of_single_matmuls() {
        let (n, k) = (40, 256);
        let x = data(23 * k, 3);
        for ty in [
            GgmlType::Q4_K,
            GgmlType::Q8_0,
            GgmlType::Q6_K,
            GgmlType::F16,
        ] {
            let bytes: Vec<Vec<u8>> = (0..7).map(|s| quantized_seeded(ty, n, k, s)).collect();
            let packed: Vec<Option<PackedMatrix>> = bytes
                .iter()
                .map(|b| QMatrix::new(ty, b, n, k).unwrap().pack())
                .collect();
            let ws: Vec<QMatrix> = bytes
                .iter()
                .zip(&packed)
                .map(|(b, p)| QMatrix::new(ty, b, n, k).unwrap().with_packed(p.as_ref()))
                .collect();
            // Groups of 1, 7, 0 and 15 rows: two matrices each but the last, which has one.
            let bounds = [0, 1, 8, 8, 23];
            let groups: Vec<Group> = (0..4)
                .map(|g| Group {
                    ws: &ws[2 * g..(2 * g + 2).min(7)],
                    x: &x[bounds[g] * k..bounds[g + 1] * k],
                })
                .filter(|g| !g.ws.is_empty())
                .collect();
            for precision in [Precision::Int8, Precision::F32] {
                for threads in [1, 2] {
                    let pool = ThreadPool::new(threads);
                    let mut outs: Vec<Vec<f32>> = groups
                        .iter()
                        .flat_map(|g| g.ws.iter().map(|w| vec![0f32; g.x.len() / k * w.n_rows]))
                        .collect();
                    let mut ys: Vec<&mut [f32]> = outs.iter_mut().map(|o| &mut o[..]).collect();
                    matmul_grouped(&pool, &groups, &mut ys, precision);
                    let mut i = 0;
                    for g in &groups {
                        for w in g.ws {
                            let mut want = vec![0f32; g.x.len() / k * n];
                            matmul(&ThreadPool::new(1), w, g.x, &mut want, precision);
                            assert!(
                                outs[i]
                                    .iter()
                                    .zip(&want)
                                    .all(|(a, b)| a.to_bits() == b.to_bits()),
                                "{ty} {precision:?} output {i}, {threads} threads"
                            );
                            i += 1;
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn float_path_matches_dequantized_reference() {
        let (n, k) = (9, 64);
        let bytes = quantized(GgmlType::F16, n, k);
        let w = QMatrix::new(GgmlType::F16, &bytes, n, k).unwrap();
        let x = data(3 * k, 5);
        let mut y = vec![0f32; 3 * n];
        matmul(&ThreadPool::new(2), &w, &x, &mut y, Precision::F32);
        let mut row = vec![0f32; k];
        for r in 0..n {
            w.dequantize_row(r, &mut row);
            for m in 0..3 {
                let exact: f64 = row
                    .iter()
                    .zip(&x[m * k..])
                    .map(|(a, b)| *a as f64 * *b as f64)
                    .sum();
                assert!((y[m * n + r] as f64 - exact).abs() < 1e-4);
            }
        }
    }

    #[test]
    fn bad_shapes_are_errors() {
        assert!(QMatrix::new(GgmlType::Q8_0, &[0u8; 33], 1, 32).is_err());
        assert!(QMatrix::new(GgmlType::Q8_0, &[0u8; 34], 1, 31).is_err());
    }
}
