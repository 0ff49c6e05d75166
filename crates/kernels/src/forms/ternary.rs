//! The CPU's form of the types with a few levels in steps of their scale (TQ1_0, TQ2_0,
//! Q1_0, Q2_0): each value's field `q` as an unsigned byte with offset 1
//! (`w = d[b] · (q - 1)`), the block's scale repeated for each of its 32 values.

use gguf::GgmlType;

use super::{int8, CpuForm};
use crate::formats::{q1_0, q2_0, tq1_0, tq2_0};
use crate::qmatmul::act::ActLayout::B32;
use crate::qmatmul::decode::DecodedRow;

/// TQ1_0: `q` the trit, in 0..3.
pub const TQ1_0: CpuForm = int8(GgmlType::TQ1_0, B32, (1, false, false), tq1, None);
/// TQ2_0: `q` the 2-bit field.
pub const TQ2_0: CpuForm = int8(GgmlType::TQ2_0, B32, (1, false, false), tq2, None);
/// Q1_0: `q` twice the sign bit (0 or 2).
pub const Q1_0: CpuForm = int8(GgmlType::Q1_0, B32, (1, false, false), q1, None);
/// Q2_0: `q` the 2-bit field.
pub const Q2_0: CpuForm = int8(GgmlType::Q2_0, B32, (1, false, false), q2, None);

fn f16_at(b: &[u8], at: usize) -> f32 {
    half::f16::from_bits(u16::from_le_bytes([b[at], b[at + 1]])).to_f32()
}

/// Decodes blocks of `n` values and `ts` bytes: `d` from the f16 at `d_at`, repeated for
/// each 32 values; `fields(block, q)` fills the block's `n` fields.
fn decode(
    row: &mut DecodedRow,
    bytes: &[u8],
    (n, ts, d_at): (usize, usize, usize),
    fields: impl Fn(&[u8], &mut [u8]),
) {
    for (i, (blk, q)) in bytes
        .chunks_exact(ts)
        .zip(row.q.chunks_exact_mut(n))
        .enumerate()
    {
        row.d[i * n / 32..(i + 1) * n / 32].fill(f16_at(blk, d_at));
        fields(blk, q);
    }
}

fn tq1(row: &mut DecodedRow, bytes: &[u8]) {
    decode(row, bytes, (256, tq1_0::TYPE_SIZE, 52), |blk, q| {
        tq1_0::for_each_trit(blk, |e, t| q[e] = t)
    });
}

fn tq2(row: &mut DecodedRow, bytes: &[u8]) {
    decode(row, bytes, (256, tq2_0::TYPE_SIZE, 64), |blk, q| {
        for (e, q) in q.iter_mut().enumerate() {
            *q = tq2_0::field(blk, e);
        }
    });
}

fn q1(row: &mut DecodedRow, bytes: &[u8]) {
    decode(row, bytes, (128, q1_0::TYPE_SIZE, 0), |blk, q| {
        for (j, q) in q.iter_mut().enumerate() {
            *q = 2 * ((blk[2 + j / 8] >> (j % 8)) & 1);
        }
    });
}

fn q2(row: &mut DecodedRow, bytes: &[u8]) {
    decode(row, bytes, (64, q2_0::TYPE_SIZE, 0), |blk, q| {
        for (j, q) in q.iter_mut().enumerate() {
            *q = q2_0::field(blk, j);
        }
    });
}
