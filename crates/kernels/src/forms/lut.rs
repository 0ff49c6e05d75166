//! The CPU's form of the types whose 4-bit codes index a table of levels (IQ4_NL, IQ4_XS,
//! MXFP4): each code decoded to its level as a signed byte, one f32 scale per 32 values
//! (`w = d[b] · level`), exact against the type's dequantization. Each packs into a record
//! of its own (`qmatmul::packed::layout`), its nibbles and scales as stored.

use gguf::GgmlType;

use super::{int8, CpuForm};
use crate::formats::{iq4_nl, iq4_xs, mxfp4};
use crate::qmatmul::act::ActLayout::B32;
use crate::qmatmul::decode::DecodedRow;
use crate::qmatmul::packed::layout::Format;

/// IQ4_NL: signed levels, `d` the block's scale.
pub const IQ4_NL: CpuForm = int8(
    GgmlType::IQ4_NL,
    B32,
    (0, true, false),
    iq4_nl,
    Some(Format::IQ4_NL),
);
/// IQ4_XS: signed levels, `d[b] = d · (ls_b - 32)` for each sub-block of 32.
pub const IQ4_XS: CpuForm = int8(
    GgmlType::IQ4_XS,
    B32,
    (0, true, false),
    iq4_xs,
    Some(Format::IQ4_XS),
);
/// MXFP4: signed levels (the E2M1 values doubled), `d` half the block's power of two.
pub const MXFP4: CpuForm = int8(
    GgmlType::MXFP4,
    B32,
    (0, true, false),
    mxfp4,
    Some(Format::MXFP4),
);

/// `q[j]` and `q[j + 16]`: the levels of the low and high nibbles of `qs[j]`, as i8 bits.
fn levels(table: &[i8; 16], qs: &[u8], q: &mut [u8]) {
    for j in 0..16 {
        q[j] = table[(qs[j] & 15) as usize] as u8;
        q[j + 16] = table[(qs[j] >> 4) as usize] as u8;
    }
}

fn iq4_nl(row: &mut DecodedRow, bytes: &[u8]) {
    row.decode_b32(bytes, iq4_nl::TYPE_SIZE, |blk, q| {
        levels(&iq4_nl::KVALUES, &blk[2..18], q)
    });
}

fn iq4_xs(row: &mut DecodedRow, bytes: &[u8]) {
    let blocks = bytes.chunks_exact(iq4_xs::TYPE_SIZE);
    for (s, (blk, q)) in blocks.zip(row.q.chunks_exact_mut(256)).enumerate() {
        let d = half::f16::from_bits(u16::from_le_bytes([blk[0], blk[1]])).to_f32();
        for (j, q) in q.chunks_exact_mut(32).enumerate() {
            row.d[8 * s + j] = d * iq4_xs::scale(blk, j) as f32;
            levels(&iq4_nl::KVALUES, &blk[8 + 16 * j..24 + 16 * j], q);
        }
    }
}

fn mxfp4(row: &mut DecodedRow, bytes: &[u8]) {
    let blocks = bytes.chunks_exact(mxfp4::TYPE_SIZE);
    for (b, (blk, q)) in blocks.zip(row.q.chunks_exact_mut(32)).enumerate() {
        row.d[b] = mxfp4::half(blk[0]);
        levels(&mxfp4::KVALUES, &blk[1..17], q);
    }
}
