//! The packed layout: weight rows regrouped in tiles of [`TILE`] rows so that one vector
//! load gives the same four consecutive values of every row of the tile, and a dot
//! instruction against four broadcast activation bytes gives each row its partial sum in
//! its own lane.
//!
//! A tile is its rows' blocks in order, one record per block (32 values, or 256 for the
//! K-quants). In a record every per-row array is in row order ("lanes"): `[16] f16` scales,
//! `[16][2]` byte pairs, and 64-byte chunks `[16 rows][4 values]`. A chunk of 4-bit values
//! holds two groups of four values: group `c` in the low nibbles, a later group in the high
//! ones. An AVX2 half-tile reads the first or second half of each array.
//!
//! Worked example, Q4_0 (record of 288 bytes for 16 rows × 32 values):
//! bytes 0..32 are the 16 scales `d` (f16); chunk `c` (0..4) at `32 + 64c` holds, at
//! `4r + j`, value `4c + j` of row `r` in its low nibble and value `16 + 4c + j` in its
//! high nibble. Row `r`'s partial sum for chunk `c` is lane `r` of
//! `dot(low nibbles, x[4c..4c+4]) + dot(high nibbles, x[16+4c..16+4c+4])`.
//!
//! The types whose nibbles index a table of levels (IQ4_NL, IQ4_XS, MXFP4) keep the stored
//! nibbles in Q4_0's chunks (byte `4c + j` of a stored 32-value block's `qs` is byte
//! `4r + j` of chunk `c`) and their scales in their stored form, so each record is as
//! small as the type; the kernels turn nibbles into levels with a byte shuffle.
//!
//! The grid types whose entries are chosen by a byte (IQ2_XXS, IQ3_XXS) keep each entry's
//! index per row and their signs as bits, and the kernels gather the grid's values into
//! Q8_0's chunks (`GridLayout`).

use crate::formats::grids::{IQ2XXS, IQ3XXS, KSIGNS};
use crate::formats::iq4_xs;
use crate::qmatmul::act::ActLayout;
use crate::qmatmul::decode::DecodedRow;

/// Weight rows per tile: one per lane of a 512-bit register of i32.
pub const TILE: usize = 16;

/// Byte offsets inside a record of a 32-element format.
#[derive(Clone, Copy)]
pub struct B32At {
    /// `[16] f16` mins (Q4_1, Q5_1).
    pub m: usize,
    /// `[8 groups] u64`: bit `4r + j` is bit 4 of value `4g + j` of row `r` (Q5_0, Q5_1).
    pub qh: usize,
    /// Four chunks of nibbles (low: values `4c..`, high: `16 + 4c..`), or for Q8_0 eight
    /// chunks of bytes `q + 128` (chunk `g`: values `4g..4g+4`).
    pub qs: usize,
    pub rec: usize,
}

pub const fn b32_at(five: bool, min: bool, q8: bool) -> B32At {
    let m = 32;
    let qh = m + if min { 32 } else { 0 };
    let qs = qh + if five { 64 } else { 0 };
    B32At {
        m,
        qh,
        qs,
        rec: qs + if q8 { 512 } else { 256 },
    }
}

/// Q4_K record (256 values): `d`, `dmin`, scale pairs and min pairs of the eight
/// sub-blocks of 32 (`[4 pairs][16 rows][2]` u8), then per sub-block `j` four chunks of
/// nibbles (low: values `32j + 4c..`, high: `32j + 16 + 4c..`).
pub struct Q4K;
impl Q4K {
    pub const DMIN: usize = 32;
    pub const SC: usize = 64;
    pub const MN: usize = 192;
    pub const QS: usize = 320;
    pub const REC: usize = 320 + 8 * 256;
}

/// Q6_K record (256 values): `d`, scale pairs of the sixteen sub-blocks of 16
/// (`[8 pairs][16 rows][2]` i8), then per sub-block `j` ([`Q6K::SUB`] bytes): two chunks of
/// the low 4 bits (low nibbles: values `16j + 4c..`, high: `16j + 8 + 4c..`) and one chunk
/// of the high 2 bits (bits `2t..2t+2` of byte `4r + e`: value `16j + 4t + e`).
pub struct Q6K;
impl Q6K {
    pub const SC: usize = 32;
    pub const QS: usize = 288;
    pub const SUB: usize = 192;
    pub const REC: usize = 288 + 16 * 192;
    pub const OFFSET: i32 = 32;
}

/// The record of a type whose nibbles index a table of levels: [`LutLayout::SUB`]
/// sub-blocks of 32 values, sub-block `j`'s four chunks of nibbles (as Q4_0's) at
/// `QS + 256j`, after a head of scales in the type's stored form.
pub trait LutLayout {
    const SUB: usize;
    const QS: usize;
    const REC: usize;
}

/// IQ4_NL record (32 values): `[16] f16 d`, then the chunks.
pub struct Iq4Nl;
impl LutLayout for Iq4Nl {
    const SUB: usize = 1;
    const QS: usize = 32;
    const REC: usize = 32 + 256;
}

/// IQ4_XS record (256 values): `[16] f16 d`, `[8 sub-blocks][16 rows] i8` the sub-blocks'
/// scales `ls - 32` at [`Iq4Xs::SC`], then the chunks of the eight sub-blocks.
pub struct Iq4Xs;
impl Iq4Xs {
    pub const SC: usize = 32;
}
impl LutLayout for Iq4Xs {
    const SUB: usize = 8;
    const QS: usize = 32 + 128;
    const REC: usize = 160 + 8 * 256;
}

/// MXFP4 record (32 values): `[16] u8 e` (the E8M0 exponents as stored), then the chunks.
pub struct Mxfp4;
impl LutLayout for Mxfp4 {
    const SUB: usize = 1;
    const QS: usize = 16;
    const REC: usize = 16 + 256;
}

/// The record of a grid type (256 values): `[16] f16 d`, `[8 sub-blocks][16 rows] u8` the
/// sub-blocks' scale multipliers `2 ls + 1` at [`GridLayout::MULT`], `[8][32 / ENTRY][16]`
/// u8 the entries' grid indices at [`GridLayout::IDX`], then at [`GridLayout::SIGNS`]
/// per sub-block `j` and chunk `c` (values `32j + 4c..+4`) a u64 whose bit `4r + e` is
/// the sign of value `4c + e` of row `r`. A sub-block's scale is `d · mult · SCALE`.
pub trait GridLayout {
    /// Values per grid entry (4 or 8).
    const ENTRY: usize;
    /// The grid's entries, `ENTRY` i8 each.
    fn grid() -> *const u8;
    /// The factor of `d · (2 ls + 1)` that gives a sub-block's scale.
    const SCALE: f32;
    /// Byte offset of a sub-block's `u32` of sign indices (bits `7o..7o + 7` for octet
    /// `o`) and scale (bits 28..32) in a stored block.
    fn aux_at(j: usize) -> usize;
    /// Byte offset of the index of entry `e` of sub-block `j` in a stored block.
    fn index_at(j: usize, e: usize) -> usize;
    const MULT: usize = 32;
    const IDX: usize = 160;
    const SIGNS: usize = Self::IDX + 8 * (32 / Self::ENTRY) * 16;
    const REC: usize = Self::SIGNS + 8 * 8 * 8;
}

/// IQ2_XXS record: entries of 8 values, `d · (0.5 + ls) · 0.25`.
pub struct Iq2Xxs;
impl GridLayout for Iq2Xxs {
    const ENTRY: usize = 8;
    fn grid() -> *const u8 {
        IQ2XXS.as_ptr().cast()
    }
    const SCALE: f32 = 0.125;
    fn aux_at(j: usize) -> usize {
        6 + 8 * j
    }
    fn index_at(j: usize, e: usize) -> usize {
        2 + 8 * j + e
    }
}

/// IQ3_XXS record: entries of 4 values, `d · (0.5 + ls) · 0.5`.
pub struct Iq3Xxs;
impl GridLayout for Iq3Xxs {
    const ENTRY: usize = 4;
    fn grid() -> *const u8 {
        IQ3XXS.as_ptr().cast()
    }
    const SCALE: f32 = 0.25;
    fn aux_at(j: usize) -> usize {
        66 + 4 * j
    }
    fn index_at(j: usize, e: usize) -> usize {
        2 + 8 * j + e
    }
}

/// Writes row `r` (of the tile) of the stored block `blk` of grid type `G` into `rec`.
fn write_grid<G: GridLayout>(blk: &[u8], r: usize, rec: &mut [u8]) {
    rec[2 * r..2 * r + 2].copy_from_slice(&blk[0..2]);
    for j in 0..8 {
        let at = G::aux_at(j);
        let aux = u32::from_le_bytes(blk[at..at + 4].try_into().expect("4 bytes"));
        rec[G::MULT + 16 * j + r] = (2 * (aux >> 28) + 1) as u8;
        for e in 0..32 / G::ENTRY {
            rec[G::IDX + 16 * ((32 / G::ENTRY) * j + e) + r] = blk[G::index_at(j, e)];
        }
        for v in 0..32 {
            let signs = KSIGNS[(aux >> (7 * (v / 8))) as usize & 127];
            if (signs >> (v % 8)) & 1 != 0 {
                let bit = 4 * r + v % 4;
                rec[G::SIGNS + 8 * (8 * j + v / 4) + bit / 8] |= 1 << (bit % 8);
            }
        }
    }
}

/// The formats with a packed layout (a row of `crate::forms::FORMS` names its own).
#[allow(non_camel_case_types)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q8_0,
    Q4_K,
    Q6_K,
    IQ4_NL,
    IQ4_XS,
    MXFP4,
    IQ2_XXS,
    IQ3_XXS,
}

impl Format {
    /// Values per block (per record).
    pub fn block(self) -> usize {
        match self {
            Format::Q4_K | Format::Q6_K | Format::IQ4_XS | Format::IQ2_XXS | Format::IQ3_XXS => 256,
            _ => 32,
        }
    }

    /// The layout of the activations the kernel reads.
    pub fn layout(self) -> ActLayout {
        match self {
            Format::Q4_K | Format::Q6_K => ActLayout::B256,
            _ => ActLayout::B32,
        }
    }

    /// Whether records are written from the stored blocks ([`Format::write_stored`])
    /// rather than from a decoded row ([`Format::write`]).
    pub fn from_stored(self) -> bool {
        matches!(
            self,
            Format::IQ4_NL | Format::IQ4_XS | Format::MXFP4 | Format::IQ2_XXS | Format::IQ3_XXS
        )
    }

    /// `(five, min, q8)` of a 32-element format.
    pub fn b32_flags(self) -> (bool, bool, bool) {
        match self {
            Format::Q4_0 => (false, false, false),
            Format::Q4_1 => (false, true, false),
            Format::Q5_0 => (true, false, false),
            Format::Q5_1 => (true, true, false),
            Format::Q8_0 => (false, false, true),
            _ => unreachable!("{self:?} is not a 32-element format"),
        }
    }

    /// Bytes of one block record (all rows of a tile).
    pub fn rec(self) -> usize {
        match self {
            Format::Q4_K => Q4K::REC,
            Format::Q6_K => Q6K::REC,
            Format::IQ4_NL => Iq4Nl::REC,
            Format::IQ4_XS => Iq4Xs::REC,
            Format::MXFP4 => Mxfp4::REC,
            Format::IQ2_XXS => Iq2Xxs::REC,
            Format::IQ3_XXS => Iq3Xxs::REC,
            _ => {
                let (five, min, q8) = self.b32_flags();
                b32_at(five, min, q8).rec
            }
        }
    }

    /// Writes row `r` (of the tile) of the stored block `blk` into its record `rec`
    /// ([`Format::from_stored`] formats).
    pub fn write_stored(self, blk: &[u8], r: usize, rec: &mut [u8]) {
        let chunks = |qs: &[u8], at: usize, rec: &mut [u8]| {
            for c in 0..4 {
                let at = at + 64 * c + 4 * r;
                rec[at..at + 4].copy_from_slice(&qs[4 * c..4 * c + 4]);
            }
        };
        match self {
            Format::IQ4_NL => {
                rec[2 * r..2 * r + 2].copy_from_slice(&blk[0..2]);
                chunks(&blk[2..18], Iq4Nl::QS, rec);
            }
            Format::IQ4_XS => {
                rec[2 * r..2 * r + 2].copy_from_slice(&blk[0..2]);
                for j in 0..8 {
                    rec[Iq4Xs::SC + 16 * j + r] = iq4_xs::scale(blk, j) as i8 as u8;
                    chunks(&blk[8 + 16 * j..24 + 16 * j], Iq4Xs::QS + 256 * j, rec);
                }
            }
            Format::MXFP4 => {
                rec[r] = blk[0];
                chunks(&blk[1..17], Mxfp4::QS, rec);
            }
            Format::IQ2_XXS => write_grid::<Iq2Xxs>(blk, r, rec),
            Format::IQ3_XXS => write_grid::<Iq3Xxs>(blk, r, rec),
            _ => unreachable!("{self:?} is written from a decoded row"),
        }
    }

    /// Writes row `r` (of the tile) of block `b` of `row` into `rec` (the formats not
    /// [`Format::from_stored`]).
    pub fn write(self, row: &DecodedRow, b: usize, r: usize, rec: &mut [u8]) {
        let f16 = |rec: &mut [u8], at: usize, v: f32| {
            let bits = half::f16::from_f32(v).to_bits().to_le_bytes();
            rec[at + 2 * r..at + 2 * r + 2].copy_from_slice(&bits);
        };
        f16(rec, 0, row.d[b]);
        match self {
            Format::Q4_K => {
                f16(rec, Q4K::DMIN, row.m[b]);
                let q = &row.q[256 * b..256 * (b + 1)];
                for j in 0..8 {
                    let pair = 32 * (j / 2) + 2 * r + j % 2;
                    rec[Q4K::SC + pair] = row.sc16[16 * b + 2 * j] as u8;
                    rec[Q4K::MN + pair] = row.mn[16 * b + 2 * j] as u8;
                    for c in 0..4 {
                        for e in 0..4 {
                            let v = 32 * j + 4 * c + e;
                            rec[Q4K::QS + 256 * j + 64 * c + 4 * r + e] = q[v] | (q[v + 16] << 4);
                        }
                    }
                }
            }
            Format::Q6_K => {
                let q = &row.q[256 * b..256 * (b + 1)];
                for j in 0..16 {
                    rec[Q6K::SC + 32 * (j / 2) + 2 * r + j % 2] = row.sc16[16 * b + j] as i8 as u8;
                    let sub = Q6K::QS + Q6K::SUB * j;
                    for e in 0..4 {
                        for c in 0..2 {
                            let v = 16 * j + 4 * c + e;
                            rec[sub + 64 * c + 4 * r + e] = (q[v] & 15) | ((q[v + 8] & 15) << 4);
                        }
                        rec[sub + 128 + 4 * r + e] = (0..4)
                            .map(|t| ((q[16 * j + 4 * t + e] >> 4) & 3) << (2 * t))
                            .sum();
                    }
                }
            }
            _ => {
                let (five, min, q8) = self.b32_flags();
                let at = b32_at(five, min, q8);
                let q = &row.q[32 * b..32 * (b + 1)];
                if min {
                    f16(rec, at.m, row.m[b]);
                }
                for g in 0..8 {
                    for j in 0..4 {
                        let v = q[4 * g + j];
                        if q8 {
                            rec[at.qs + 64 * g + 4 * r + j] = v ^ 0x80;
                        }
                        if five && v & 16 != 0 {
                            let bit = 4 * r + j;
                            rec[at.qh + 8 * g + bit / 8] |= 1 << (bit % 8);
                        }
                    }
                }
                if !q8 {
                    for c in 0..4 {
                        for j in 0..4 {
                            let (lo, hi) = (q[4 * c + j] & 15, q[16 + 4 * c + j] & 15);
                            rec[at.qs + 64 * c + 4 * r + j] = lo | (hi << 4);
                        }
                    }
                }
            }
        }
    }
}
