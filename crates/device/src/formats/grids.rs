//! The codebooks of the IQ grid types: each quant of IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS,
//! IQ3_S, IQ1_S and IQ1_M is the index of a grid entry of 8 (or 4) small integers, and
//! IQ2_XXS, IQ2_XS and IQ3_XXS give the signs of each 8 values by an index into
//! [`KSIGNS`].
//!
//! The data is gguf's (`gguf.quants`: each class's `grid_hex` and `grid_map`, and
//! `ksigns`), written into `grids/codes.rs` by `scripts/gen_iq_grids.py`; the tables here
//! are expanded from it at compile time. Every backend reads these tables (the GPU's
//! shaders get them as WGSL constants), so the codebooks exist once.

mod codes;
pub(crate) mod search;

/// A codebook as gguf stores it: `N` entries of `W` values, each entry one u16 holding
/// `W` indices into `levels` of `16 / W` bits each, value 0 in the lowest bits.
pub struct Grid<const N: usize, const W: usize> {
    pub levels: &'static [i8],
    pub codes: [u16; N],
}

impl<const N: usize, const W: usize> Grid<N, W> {
    /// The entries' values: `[e][j]` is value `j` of entry `e`.
    pub const fn expand(&self) -> [[i8; W]; N] {
        let bits = 16 / W;
        let mask = (1u16 << bits) - 1;
        let mut out = [[0i8; W]; N];
        let mut e = 0;
        while e < N {
            let mut j = 0;
            while j < W {
                out[e][j] = self.levels[((self.codes[e] >> (bits * j)) & mask) as usize];
                j += 1;
            }
            e += 1;
        }
        out
    }
}

/// IQ2_XXS's grid: 256 entries of 8 values in {8, 25, 43}.
pub static IQ2XXS: [[i8; 8]; 256] = codes::IQ2XXS.expand();
/// IQ2_XS's grid: 512 entries of 8 values in {8, 25, 43}.
pub static IQ2XS: [[i8; 8]; 512] = codes::IQ2XS.expand();
/// IQ2_S's grid: 1024 entries of 8 values in {8, 25, 43}.
pub static IQ2S: [[i8; 8]; 1024] = codes::IQ2S.expand();
/// IQ3_XXS's grid: 256 entries of 4 values in {4, 12, 20, 28, 36, 44, 52, 62}.
pub static IQ3XXS: [[i8; 4]; 256] = codes::IQ3XXS.expand();
/// IQ3_S's grid: 512 entries of 4 odd values in 1..=15.
pub static IQ3S: [[i8; 4]; 512] = codes::IQ3S.expand();
/// The grid of IQ1_S and IQ1_M: 2048 entries of 8 values in {-1, 0, 1}.
pub static IQ1S: [[i8; 8]; 2048] = codes::IQ1S.expand();

/// Sign patterns: bit `j` of `KSIGNS[i]` set means value `j` of the 8 is negated. Entry
/// `i` is `i` with bit 7 set where `i` has an odd number of ones.
pub static KSIGNS: [u8; 128] = codes::KSIGNS;

/// `-1.0` where bit `j` of `signs` is set, else `1.0`: gguf's factor for value `j`.
#[inline(always)]
pub fn sign(signs: u8, j: usize) -> f32 {
    if (signs >> j) & 1 == 0 {
        1.0
    } else {
        -1.0
    }
}

/// The u32 at `b[at..at + 4]`, little-endian.
#[inline(always)]
pub(super) fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// The u16 at `b[at..at + 2]`, little-endian.
#[inline(always)]
pub(super) fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tables_hold_gguf_values() {
        assert_eq!(IQ2XXS[0], [8, 8, 8, 8, 8, 8, 8, 8]);
        assert!(IQ2S.iter().flatten().all(|v| [8, 25, 43].contains(v)));
        assert!(IQ3XXS.iter().flatten().all(|v| v % 4 == 0 || *v == 62));
        assert!(IQ3S
            .iter()
            .flatten()
            .all(|v| v % 2 == 1 && (1..=15).contains(v)));
        assert!(IQ1S.iter().flatten().all(|v| (-1..=1).contains(v)));
        for (i, &s) in KSIGNS.iter().enumerate() {
            assert_eq!(s & 127, i as u8);
            assert_eq!(s.count_ones() % 2, 0, "{i}: an even number of signs");
        }
    }
}
