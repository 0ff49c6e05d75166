//! Q8_1 on the CPU, the test-only weight type (`device::formats::q8_1`): 8-bit quants
//! over blocks of 32 with one scale, the form of Q8_0 with the quants 2 bytes later.

use gguf::GgmlType;

use super::{int8, CpuForm};
use crate::formats::q8_1::TYPE_SIZE;
use crate::qmatmul::act::ActLayout::B32;
use crate::qmatmul::decode::DecodedRow;

/// Q8_1's row in [`super::FORMS`]: signed quants, no offset, no min, no packed layout.
pub const FORM: CpuForm = int8(GgmlType::Q8_1, B32, (0, true, false), decode, None);

/// Decodes a Q8_1 row: `d` from the f16 at byte 0, the i8 quants from bytes 4..36.
fn decode(row: &mut DecodedRow, bytes: &[u8]) {
    row.decode_b32(bytes, TYPE_SIZE, |blk, q| q.copy_from_slice(&blk[4..36]));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_q8_1_row_decodes_to_its_scale_and_signed_quants() {
        let mut bytes = [0u8; 2 * TYPE_SIZE];
        for (b, blk) in bytes.chunks_exact_mut(TYPE_SIZE).enumerate() {
            let d = half::f16::from_f32(0.25 * (b + 1) as f32);
            blk[0..2].copy_from_slice(&d.to_bits().to_le_bytes());
            blk[2..4].copy_from_slice(&half::f16::from_f32(9.0).to_bits().to_le_bytes());
            for (j, q) in blk[4..].iter_mut().enumerate() {
                *q = (j as i8 - 16 + b as i8) as u8;
            }
        }
        let mut row = DecodedRow::default();
        crate::forms::int_form(GgmlType::Q8_1)
            .unwrap()
            .decode_row(&mut row, &bytes, 64);
        assert_eq!(row.d, [0.25, 0.5]);
        assert!(row.m.is_empty());
        let q: Vec<i8> = row.q.iter().map(|&q| q as i8).collect();
        let want: Vec<i8> = (0..64)
            .map(|e| (e % 32) as i8 - 16 + (e / 32) as i8)
            .collect();
        assert_eq!(q, want);
    }
}
