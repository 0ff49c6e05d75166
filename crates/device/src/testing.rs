//! Random weights and activations for tests of backends (every backend is checked against
//! the reference on such data).

use gguf::GgmlType;

use crate::formats::quantize_row;
use crate::{Bytes, MatrixSource, Role};

/// `n` pseudo-random values in [-1, 1) from `seed` (xorshift; the same on every platform).
pub fn data(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E3779B97F4A7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

/// Random bytes with finite f16 scales: valid blocks of every format.
pub fn random_blocks(ty: GgmlType, n_rows: usize, k: usize, seed: u64) -> Vec<u8> {
    let rb = ty.row_bytes(k as u64).unwrap() as usize;
    if crate::formats::is_quantize_supported(ty) {
        let v = data(n_rows * k, seed);
        let mut out = vec![0u8; rb * n_rows];
        for r in 0..n_rows {
            quantize_row(ty, &v[r * k..(r + 1) * k], &mut out[r * rb..(r + 1) * rb]).unwrap();
        }
        return out;
    }
    noise_blocks(ty, n_rows, k, seed)
}

/// Random bytes in every field but the f16 scales, which get small finite values: blocks
/// with every bit pattern of the quants.
pub fn noise_blocks(ty: GgmlType, n_rows: usize, k: usize, seed: u64) -> Vec<u8> {
    let rb = ty.row_bytes(k as u64).unwrap() as usize;
    let mut s = seed | 1;
    let bytes: Vec<u8> = (0..rb * n_rows)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s as u8
        })
        .collect();
    with_scales(ty, bytes)
}

/// Every bit of every field set but the f16 scales, which get small finite values: the
/// largest quants of every format, the worst case for sums kept in narrow integers.
pub fn saturated_blocks(ty: GgmlType, n_rows: usize, k: usize) -> Vec<u8> {
    let rb = ty.row_bytes(k as u64).unwrap() as usize;
    with_scales(ty, vec![0xFF; rb * n_rows])
}

/// `bytes` with the scales of every block of `ty` (a registered type) set to small
/// finite values.
fn with_scales(ty: GgmlType, mut bytes: Vec<u8>) -> Vec<u8> {
    let f = crate::formats::format(ty).expect("a registered type");
    for (i, blk) in bytes.chunks_exact_mut(f.type_size).enumerate() {
        let x = 0.01 + 0.001 * (i % 13) as f32;
        let d = half::f16::from_f32(x);
        for &at in f.scales {
            blk[at..at + 2].copy_from_slice(&d.to_bits().to_le_bytes());
        }
        if let Some(o) = f.other_scales {
            (o.set)(blk, x);
        }
    }
    bytes
}

/// A random matrix of `ty` (as [`random_blocks`]), to multiply with.
pub fn source(ty: GgmlType, n_rows: usize, n_cols: usize, seed: u64) -> MatrixSource {
    MatrixSource {
        name: format!("{ty} [{n_rows}, {n_cols}]"),
        ty,
        bytes: Bytes::Owned(random_blocks(ty, n_rows, n_cols, seed).into()),
        n_rows,
        n_cols,
        role: Role::Multiply,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::formats::{dequantize_row, FORMATS};

    #[test]
    fn made_up_blocks_of_every_type_have_small_finite_values() {
        let k = 512;
        for f in FORMATS.iter().filter(|f| f.block_size > 1) {
            let ty = f.ty;
            for (what, bytes) in [
                ("noise", noise_blocks(ty, 3, k, 5)),
                ("saturated", saturated_blocks(ty, 3, k)),
                ("random", random_blocks(ty, 3, k, 5)),
            ] {
                let mut v = vec![0f32; 3 * k];
                dequantize_row(ty, &bytes, &mut v).unwrap();
                let worst = v.iter().fold(0f32, |a, x| a.max(x.abs()));
                assert!(worst.is_finite() && worst < 1e3, "{ty} {what}: {worst}");
            }
        }
    }
}
