//! Weight rows decoded once per matmul into a form shared by every quantized format, so
//! that one integer dot kernel per layout serves them all.
//!
//! One scale per 32 values (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, and the low-bit types decoded
//! in `crate::forms`), per group `b` of 32: `w = d[b] · (q - offset) + m[b]` with `q`
//! unsigned (or signed: Q8_0, and the levels of IQ4_NL, IQ4_XS, MXFP4; offset 0).
//! K-quants (Q2_K..Q6_K), per super-block `s` of 256 and sub-block `j` of 16:
//! `w = d[s] · sc[j] · (q - offset) - m[s] · mn[j]`.
//!
//! Each format's decoder is one function here over [`DecodedRow::decode_b32`] or
//! `decode_k`; `crate::forms::FORMS` pairs it with its type and [`Scheme`].

use super::act::ActLayout;
use crate::formats::{self, q4_k::scale_min};

/// How a weight format maps onto the shared decoded form.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Scheme {
    pub layout: ActLayout,
    /// Subtracted from every `q`.
    pub offset: i32,
    /// `q` holds i8 bits (Q8_0) rather than unsigned values.
    pub signed: bool,
    /// The format has a min term (`m`, `mn`).
    pub has_min: bool,
}

/// Fills a row already sized for its type's [`Scheme`] from exactly its stored blocks;
/// forms over 256-value blocks fill `sc16` (`sc` is expanded from it afterwards).
pub type RowDecoder = fn(&mut DecodedRow, &[u8]);

/// One decoded weight row of `k` values.
#[derive(Debug, Default, Clone)]
pub struct DecodedRow {
    /// `[k]` quant values (u8, or i8 bits when the scheme is signed).
    pub q: Vec<u8>,
    /// `[k / block]`: `d` per block or super-block.
    pub d: Vec<f32>,
    /// `[k / block]`: `m` per block (B32) or `dmin` per super-block (K); empty without min.
    pub m: Vec<f32>,
    /// K only, `[k / 16]`: scale per sub-block of 16.
    pub sc16: Vec<i16>,
    /// K only, `[k / 32][16]`: the scales of the two sub-blocks of each 32 values, each
    /// repeated 8 times (one per pair of values), ready for a 16-lane multiply.
    pub sc: Vec<i16>,
    /// K only, `[k / 16]`: mins per sub-block (empty without min).
    pub mn: Vec<i16>,
}

/// The little-endian f16 at `b[at..at + 2]`, widened exactly to f32.
pub(crate) fn f16_at(b: &[u8], at: usize) -> f32 {
    half::f16::from_bits(u16::from_le_bytes([b[at], b[at + 1]])).to_f32()
}

impl DecodedRow {
    fn reset(&mut self, k: usize, scheme: Scheme) {
        let nb = k / scheme.layout.block();
        self.q.resize(k, 0);
        self.d.resize(nb, 0.0);
        self.m.resize(if scheme.has_min { nb } else { 0 }, 0.0);
        let k_quant = scheme.layout == ActLayout::B256;
        self.sc.resize(if k_quant { k / 2 } else { 0 }, 0);
        self.sc16.resize(if k_quant { k / 16 } else { 0 }, 0);
        self.mn
            .resize(if k_quant && scheme.has_min { k / 16 } else { 0 }, 0);
    }

    /// Decodes one stored row (`bytes` holds exactly `k` values) of a type of `scheme`
    /// whose blocks `decode` reads (its [`crate::forms::IntForm`]).
    pub fn decode(&mut self, scheme: Scheme, decode: RowDecoder, bytes: &[u8], k: usize) {
        self.reset(k, scheme);
        decode(self, bytes);
        if scheme.layout == ActLayout::B256 {
            self.expand_scales();
        }
    }

    /// Decodes blocks of 32 values of `ts` bytes each: `d` from the f16 at byte 0, `m`
    /// (with a min) from the f16 at byte 2, and the quants by `quants(block, q)`.
    pub(crate) fn decode_b32(
        &mut self,
        bytes: &[u8],
        ts: usize,
        quants: impl Fn(&[u8], &mut [u8]),
    ) {
        for (b, (blk, q)) in bytes
            .chunks_exact(ts)
            .zip(self.q.chunks_exact_mut(32))
            .enumerate()
        {
            self.d[b] = f16_at(blk, 0);
            quants(blk, q);
            if !self.m.is_empty() {
                self.m[b] = f16_at(blk, 2);
            }
        }
    }

    /// Decodes super-blocks of 256 values of `ts` bytes each by `sub(block, k)`, which
    /// fills one super-block's quants, scales, mins (empty without min) and returns its
    /// `(d, m)` (`m` ignored without min).
    fn decode_k(&mut self, bytes: &[u8], ts: usize, sub: impl Fn(&[u8], KBlock<'_>) -> (f32, f32)) {
        for (s, (blk, q)) in bytes
            .chunks_exact(ts)
            .zip(self.q.chunks_exact_mut(256))
            .enumerate()
        {
            let sc = &mut self.sc16[s * 16..(s + 1) * 16];
            let mn = match self.mn.is_empty() {
                true => &mut [][..],
                false => &mut self.mn[s * 16..(s + 1) * 16],
            };
            let (d, m) = sub(blk, KBlock { q, sc, mn });
            self.d[s] = d;
            if !self.m.is_empty() {
                self.m[s] = m;
            }
        }
    }

    /// Fills `sc` from `sc16`: for each 32 values, 8 copies of each sub-block's scale.
    fn expand_scales(&mut self) {
        for (chunk, pair) in self.sc.chunks_exact_mut(16).zip(self.sc16.chunks_exact(2)) {
            chunk[..8].fill(pair[0]);
            chunk[8..].fill(pair[1]);
        }
    }
}

/// One super-block's share of a [`DecodedRow`]: `[256]` quants, `[16]` scales and `[16]`
/// mins (empty without min).
struct KBlock<'a> {
    q: &'a mut [u8],
    sc: &'a mut [i16],
    mn: &'a mut [i16],
}

/// Q4_0 and Q4_1: the low nibble of `qs[j]` is value `j`, the high nibble `j + 16`.
fn nibbles(qs: &[u8], q: &mut [u8]) {
    for j in 0..16 {
        q[j] = qs[j] & 15;
        q[j + 16] = qs[j] >> 4;
    }
}

/// Q5_0 and Q5_1: nibbles as [`nibbles`] from the 16 bytes at `at + 4`, bit 4 from the
/// u32 at `at`.
fn fives(blk: &[u8], at: usize, q: &mut [u8]) {
    let qh = u32::from_le_bytes(blk[at..at + 4].try_into().unwrap());
    let qs = &blk[at + 4..at + 20];
    for j in 0..16 {
        q[j] = (qs[j] & 15) | ((((qh >> j) & 1) as u8) << 4);
        q[j + 16] = (qs[j] >> 4) | ((((qh >> (j + 16)) & 1) as u8) << 4);
    }
}

/// Decodes a Q4_0 row into its [`Scheme`]'s form.
pub(crate) fn q4_0(row: &mut DecodedRow, bytes: &[u8]) {
    row.decode_b32(bytes, formats::q4_0::TYPE_SIZE, |blk, q| {
        nibbles(&blk[2..18], q)
    });
}

/// Decodes a Q4_1 row into its [`Scheme`]'s form.
pub(crate) fn q4_1(row: &mut DecodedRow, bytes: &[u8]) {
    row.decode_b32(bytes, formats::q4_1::TYPE_SIZE, |blk, q| {
        nibbles(&blk[4..20], q)
    });
}

/// Decodes a Q5_0 row into its [`Scheme`]'s form.
pub(crate) fn q5_0(row: &mut DecodedRow, bytes: &[u8]) {
    row.decode_b32(bytes, formats::q5_0::TYPE_SIZE, |blk, q| fives(blk, 2, q));
}

/// Decodes a Q5_1 row into its [`Scheme`]'s form.
pub(crate) fn q5_1(row: &mut DecodedRow, bytes: &[u8]) {
    row.decode_b32(bytes, formats::q5_1::TYPE_SIZE, |blk, q| fives(blk, 4, q));
}

/// Decodes a Q8_0 row into its [`Scheme`]'s form.
pub(crate) fn q8_0(row: &mut DecodedRow, bytes: &[u8]) {
    row.decode_b32(bytes, formats::q8_0::TYPE_SIZE, |blk, q| {
        q.copy_from_slice(&blk[2..34])
    });
}

/// Q4_K and Q5_K: `d`, `dmin`, the 6-bit scales and mins, and the low nibbles from the
/// 128 bytes at `qs`.
fn q45_k(blk: &[u8], k: &mut KBlock<'_>, qs: usize) -> (f32, f32) {
    let scales = &blk[4..16];
    for j in 0..8 {
        let (a, b) = scale_min(scales, j);
        k.sc[2 * j] = a as i16;
        k.sc[2 * j + 1] = a as i16;
        k.mn[2 * j] = b as i16;
        k.mn[2 * j + 1] = b as i16;
    }
    let qs = &blk[qs..qs + 128];
    for c in 0..4 {
        for l in 0..32 {
            k.q[64 * c + l] = qs[32 * c + l] & 15;
            k.q[64 * c + 32 + l] = qs[32 * c + l] >> 4;
        }
    }
    (f16_at(blk, 0), f16_at(blk, 2))
}

/// Decodes a Q4_K row into its [`Scheme`]'s form.
pub(crate) fn q4_k(row: &mut DecodedRow, bytes: &[u8]) {
    row.decode_k(bytes, formats::q4_k::TYPE_SIZE, |blk, mut k| {
        q45_k(blk, &mut k, 16)
    });
}

/// Decodes a Q5_K row into its [`Scheme`]'s form.
pub(crate) fn q5_k(row: &mut DecodedRow, bytes: &[u8]) {
    row.decode_k(bytes, formats::q5_k::TYPE_SIZE, |blk, mut k| {
        let dm = q45_k(blk, &mut k, 48);
        let qh = &blk[16..48];
        for j in 0..8 {
            for (l, &h) in qh.iter().enumerate() {
                k.q[32 * j + l] |= ((h >> j) & 1) << 4;
            }
        }
        dm
    });
}

/// Decodes a Q6_K row into its [`Scheme`]'s form.
pub(crate) fn q6_k(row: &mut DecodedRow, bytes: &[u8]) {
    row.decode_k(bytes, formats::q6_k::TYPE_SIZE, |blk, k| {
        let (ql, qh) = (&blk[0..128], &blk[128..192]);
        for (j, s16) in k.sc.iter_mut().enumerate() {
            *s16 = blk[192 + j] as i8 as i16;
        }
        for h in 0..2 {
            for t in 0..4 {
                for l in 0..32 {
                    let e = 128 * h + 32 * t + l;
                    let low = (ql[64 * h + (t % 2) * 32 + l] >> (4 * (t / 2))) & 15;
                    let high = (qh[32 * h + l] >> (2 * t)) & 3;
                    k.q[e] = low | (high << 4);
                }
            }
        }
        (f16_at(blk, 208), 0.0)
    });
}

/// Decodes a Q3_K row into its [`Scheme`]'s form.
pub(crate) fn q3_k(row: &mut DecodedRow, bytes: &[u8]) {
    row.decode_k(bytes, formats::q3_k::TYPE_SIZE, |blk, k| {
        let (hmask, qs, scales) = (&blk[0..32], &blk[32..96], &blk[96..108]);
        for (j, s16) in k.sc.iter_mut().enumerate() {
            let low = if j < 8 {
                scales[j] & 15
            } else {
                scales[j - 8] >> 4
            };
            let high = (scales[8 + j % 4] >> (2 * (j / 4))) & 3;
            *s16 = (low | (high << 4)) as i16 - 32;
        }
        for h in 0..2 {
            for kk in 0..4 {
                for l in 0..32 {
                    let e = 128 * h + 32 * kk + l;
                    let low2 = (qs[32 * h + l] >> (2 * kk)) & 3;
                    let hbit = (hmask[l] >> (e / 32)) & 1;
                    k.q[e] = low2 + 4 * hbit;
                }
            }
        }
        (f16_at(blk, 108), 0.0)
    });
}

/// Decodes a Q2_K row into its [`Scheme`]'s form.
pub(crate) fn q2_k(row: &mut DecodedRow, bytes: &[u8]) {
    row.decode_k(bytes, formats::q2_k::TYPE_SIZE, |blk, k| {
        let (scales, qs) = (&blk[0..16], &blk[16..80]);
        for (j, &s) in scales.iter().enumerate() {
            k.sc[j] = (s & 15) as i16;
            k.mn[j] = (s >> 4) as i16;
        }
        for h in 0..2 {
            for kk in 0..4 {
                for l in 0..32 {
                    k.q[128 * h + 32 * kk + l] = (qs[32 * h + l] >> (2 * kk)) & 3;
                }
            }
        }
        (f16_at(blk, 80), f16_at(blk, 82))
    });
}
