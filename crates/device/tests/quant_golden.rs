//! tandem's searching quantizers against ggml's on the same rows, without and with
//! importances: the golden files are ggml's own output (`ggml_quantize_chunk`), written
//! by `scripts/gen_ggml_golden.py` (see its header for the format).
//!
//! Every one must match ggml block for block, but for one bug of ggml's kept out:
//! `quantize_row_iq3_s_impl` skips a group of 32 zeros without moving its pointers into
//! the block's entries and signs, so the following groups land in its place and decode
//! wrongly; tandem writes them in place, and such blocks must decode closer to the
//! input than ggml's.

use device::formats::{dequantize_row, quantize_row, quantize_row_with};
use gguf::GgmlType;
use std::path::PathBuf;

const TYPES: &[&str] = &[
    "q2_k", "q3_k", "q4_k", "q5_k", "q6_k", "iq3_xxs", "iq2_xxs", "iq3_s", "iq2_xs", "iq2_s",
    "iq1_s",
];

fn golden(name: &str) -> Vec<u8> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden/quantizer")
        .join(format!("{name}.bin"));
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn u32_at(b: &[u8], i: usize) -> u32 {
    u32::from_le_bytes(b[4 + 4 * i..8 + 4 * i].try_into().unwrap())
}

fn f32s(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

/// The rows (`n_rows * n_per_row`), the row length and the importance of each column.
fn rows() -> (Vec<f32>, usize, Vec<f32>) {
    let b = golden("rows");
    assert_eq!(&b[0..4], b"TDQR");
    assert_eq!(u32_at(&b, 0), 1, "version");
    let (n_rows, n_per_row) = (u32_at(&b, 1) as usize, u32_at(&b, 2) as usize);
    let body = f32s(&b[16..]);
    assert_eq!(body.len(), (n_rows + 1) * n_per_row, "rows.bin truncated");
    let (x, imp) = body.split_at(n_rows * n_per_row);
    (x.to_vec(), n_per_row, imp.to_vec())
}

/// ggml's plain rows (`None` where ggml needs importances) and weighted rows of `name`.
fn ggml_output(name: &str, n_rows: usize) -> (GgmlType, Option<Vec<u8>>, Vec<u8>) {
    let b = golden(name);
    assert_eq!(&b[0..4], b"TDQQ", "{name}");
    assert_eq!(u32_at(&b, 0), 1, "{name}: version");
    let ty = GgmlType::from_id(u32_at(&b, 1)).expect("known type id");
    assert_eq!(ty.to_string().to_lowercase(), name);
    let plain_row = u32_at(&b, 2) as usize;
    let body = &b[16..];
    let (plain, weighted) = body.split_at(plain_row * n_rows);
    assert_eq!(weighted.len() % n_rows, 0, "{name}: truncated");
    (
        ty,
        (plain_row > 0).then(|| plain.to_vec()),
        weighted.to_vec(),
    )
}

/// The blocks of tandem's rows (`x` in rows of `n`, with importances `imp`) that differ
/// from ggml's `want`.
fn differing_blocks(
    ty: GgmlType,
    x: &[f32],
    imp: Option<&[f32]>,
    want: &[u8],
    n: usize,
) -> Vec<usize> {
    let mut got = vec![0u8; want.len()];
    let rb = want.len() / (x.len() / n);
    for (row, q) in x.chunks_exact(n).zip(got.chunks_exact_mut(rb)) {
        quantize_row_with(ty, row, imp, q).unwrap();
    }
    let ts = ty.type_size() as usize;
    let pairs = want.chunks_exact(ts).zip(got.chunks_exact(ts));
    pairs
        .enumerate()
        .filter(|(_, (a, b))| a != b)
        .map(|(i, _)| i)
        .collect()
}

/// `sum((x - y)²)` of block `q` decoded against `x`.
fn squared_error(ty: GgmlType, x: &[f32], q: &[u8]) -> f64 {
    let mut y = vec![0f32; x.len()];
    dequantize_row(ty, q, &mut y).unwrap();
    x.iter()
        .zip(&y)
        .map(|(a, b)| ((a - b) as f64).powi(2))
        .sum()
}

#[test]
fn quantizers_match_ggml() {
    let (x, n, imp) = rows();
    let n_rows = x.len() / n;
    for &name in TYPES {
        let (ty, plain, weighted) = ggml_output(name, n_rows);
        let variants = [(None, plain), (Some(imp.as_slice()), Some(weighted))];
        for (imp, want) in variants {
            let Some(want) = want else { continue };
            let how = if imp.is_some() {
                "with importances"
            } else {
                "plain"
            };
            let ts = ty.type_size() as usize;
            for b in differing_blocks(ty, &x, imp, &want, n) {
                let r = 256 * b..256 * b + 256;
                let xb = &x[r.clone()];
                let zero_group = xb.chunks_exact(32).any(|g| g.iter().all(|&v| v == 0.0));
                assert!(
                    name == "iq3_s" && zero_group,
                    "{name} ({how}): block {b} differs from ggml's"
                );
                let mut ours = vec![0u8; ts];
                let imp = imp.map(|m| &m[r.start % n..r.start % n + 256]);
                quantize_row_with(ty, xb, imp, &mut ours).unwrap();
                let ggml = &want[ts * b..ts * (b + 1)];
                assert!(
                    squared_error(ty, xb, &ours) < squared_error(ty, xb, ggml),
                    "{name} ({how}): block {b} decodes no closer than ggml's"
                );
            }
        }
    }
}

#[test]
fn a_plain_quantizer_is_the_weighted_one_for_types_without_importances() {
    let (x, n, _) = rows();
    let ty = GgmlType::Q4_K;
    let rb = ty.row_bytes(n as u64).unwrap() as usize;
    let (mut a, mut b) = (vec![0u8; rb], vec![0u8; rb]);
    quantize_row(ty, &x[..n], &mut a).unwrap();
    quantize_row_with(ty, &x[..n], None, &mut b).unwrap();
    assert_eq!(a, b);
}
