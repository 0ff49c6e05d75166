//! Weight rows decoded once per matmul into a form shared by every quantized format, so
//! that one integer dot kernel per layout serves them all.
//!
//! 32-element formats (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0), per block `b` of 32:
//! `w = d[b] · (q - offset) + m[b]` with `q` unsigned (or signed for Q8_0, offset 0).
//! K-quants (Q2_K..Q6_K), per super-block `s` of 256 and sub-block `j` of 16:
//! `w = d[s] · sc[j] · (q - offset) - m[s] · mn[j]`.

use gguf::GgmlType;

use super::act::ActLayout;
use crate::formats::q4_k::scale_min;

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

impl Scheme {
    /// The scheme of a quantized format, or `None` for plain float types.
    pub fn of(ty: GgmlType) -> Option<Scheme> {
        let (layout, offset, signed, has_min) = match ty {
            GgmlType::Q4_0 => (ActLayout::B32, 8, false, false),
            GgmlType::Q4_1 => (ActLayout::B32, 0, false, true),
            GgmlType::Q5_0 => (ActLayout::B32, 16, false, false),
            GgmlType::Q5_1 => (ActLayout::B32, 0, false, true),
            GgmlType::Q8_0 => (ActLayout::B32, 0, true, false),
            GgmlType::Q2_K => (ActLayout::B256, 0, false, true),
            GgmlType::Q3_K => (ActLayout::B256, 4, false, false),
            GgmlType::Q4_K => (ActLayout::B256, 0, false, true),
            GgmlType::Q5_K => (ActLayout::B256, 0, false, true),
            GgmlType::Q6_K => (ActLayout::B256, 32, false, false),
            _ => return None,
        };
        Some(Scheme {
            layout,
            offset,
            signed,
            has_min,
        })
    }
}

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

fn f16_at(b: &[u8], at: usize) -> f32 {
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

    /// Decodes one stored row of type `ty` (`bytes` holds exactly `k` values).
    pub fn decode(&mut self, ty: GgmlType, bytes: &[u8], k: usize) {
        let scheme = Scheme::of(ty).expect("a quantized type");
        self.reset(k, scheme);
        match ty {
            GgmlType::Q4_0 | GgmlType::Q4_1 | GgmlType::Q5_0 | GgmlType::Q5_1 | GgmlType::Q8_0 => {
                self.decode_b32(ty, bytes)
            }
            _ => {
                self.decode_k(ty, bytes);
                self.expand_scales();
            }
        }
    }

    fn decode_b32(&mut self, ty: GgmlType, bytes: &[u8]) {
        let ts = ty.type_size() as usize;
        for (b, (blk, q)) in bytes
            .chunks_exact(ts)
            .zip(self.q.chunks_exact_mut(32))
            .enumerate()
        {
            self.d[b] = f16_at(blk, 0);
            match ty {
                GgmlType::Q4_0 | GgmlType::Q4_1 => {
                    let qs = if ty == GgmlType::Q4_0 {
                        &blk[2..18]
                    } else {
                        &blk[4..20]
                    };
                    for j in 0..16 {
                        q[j] = qs[j] & 15;
                        q[j + 16] = qs[j] >> 4;
                    }
                }
                GgmlType::Q5_0 | GgmlType::Q5_1 => {
                    let at = if ty == GgmlType::Q5_0 { 2 } else { 4 };
                    let qh = u32::from_le_bytes(blk[at..at + 4].try_into().unwrap());
                    let qs = &blk[at + 4..at + 20];
                    for j in 0..16 {
                        q[j] = (qs[j] & 15) | ((((qh >> j) & 1) as u8) << 4);
                        q[j + 16] = (qs[j] >> 4) | ((((qh >> (j + 16)) & 1) as u8) << 4);
                    }
                }
                _ => q.copy_from_slice(&blk[2..34]),
            }
            if ty == GgmlType::Q4_1 || ty == GgmlType::Q5_1 {
                self.m[b] = f16_at(blk, 2);
            }
        }
    }

    fn decode_k(&mut self, ty: GgmlType, bytes: &[u8]) {
        let ts = ty.type_size() as usize;
        for (s, (blk, q)) in bytes
            .chunks_exact(ts)
            .zip(self.q.chunks_exact_mut(256))
            .enumerate()
        {
            let sc = &mut self.sc16[s * 16..(s + 1) * 16];
            match ty {
                GgmlType::Q4_K | GgmlType::Q5_K => {
                    self.d[s] = f16_at(blk, 0);
                    self.m[s] = f16_at(blk, 2);
                    let scales = &blk[4..16];
                    let mn = &mut self.mn[s * 16..(s + 1) * 16];
                    for j in 0..8 {
                        let (a, b) = scale_min(scales, j);
                        sc[2 * j] = a as i16;
                        sc[2 * j + 1] = a as i16;
                        mn[2 * j] = b as i16;
                        mn[2 * j + 1] = b as i16;
                    }
                    let qs = if ty == GgmlType::Q4_K {
                        &blk[16..144]
                    } else {
                        &blk[48..176]
                    };
                    for c in 0..4 {
                        for l in 0..32 {
                            q[64 * c + l] = qs[32 * c + l] & 15;
                            q[64 * c + 32 + l] = qs[32 * c + l] >> 4;
                        }
                    }
                    if ty == GgmlType::Q5_K {
                        let qh = &blk[16..48];
                        for j in 0..8 {
                            for l in 0..32 {
                                q[32 * j + l] |= ((qh[l] >> j) & 1) << 4;
                            }
                        }
                    }
                }
                GgmlType::Q6_K => {
                    let (ql, qh) = (&blk[0..128], &blk[128..192]);
                    for (j, s16) in sc.iter_mut().enumerate() {
                        *s16 = blk[192 + j] as i8 as i16;
                    }
                    self.d[s] = f16_at(blk, 208);
                    for h in 0..2 {
                        for t in 0..4 {
                            for l in 0..32 {
                                let e = 128 * h + 32 * t + l;
                                let low = (ql[64 * h + (t % 2) * 32 + l] >> (4 * (t / 2))) & 15;
                                let high = (qh[32 * h + l] >> (2 * t)) & 3;
                                q[e] = low | (high << 4);
                            }
                        }
                    }
                }
                GgmlType::Q3_K => {
                    let (hmask, qs, scales) = (&blk[0..32], &blk[32..96], &blk[96..108]);
                    self.d[s] = f16_at(blk, 108);
                    for (j, s16) in sc.iter_mut().enumerate() {
                        let low = if j < 8 {
                            scales[j] & 15
                        } else {
                            scales[j - 8] >> 4
                        };
                        let high = (scales[8 + j % 4] >> (2 * (j / 4))) & 3;
                        *s16 = (low | (high << 4)) as i16 - 32;
                    }
                    for h in 0..2 {
                        for k in 0..4 {
                            for l in 0..32 {
                                let e = 128 * h + 32 * k + l;
                                let low2 = (qs[32 * h + l] >> (2 * k)) & 3;
                                let hbit = (hmask[l] >> (e / 32)) & 1;
                                q[e] = low2 + 4 * hbit;
                            }
                        }
                    }
                }
                GgmlType::Q2_K => {
                    let (scales, qs) = (&blk[0..16], &blk[16..80]);
                    self.d[s] = f16_at(blk, 80);
                    self.m[s] = f16_at(blk, 82);
                    let mn = &mut self.mn[s * 16..(s + 1) * 16];
                    for j in 0..16 {
                        sc[j] = (scales[j] & 15) as i16;
                        mn[j] = (scales[j] >> 4) as i16;
                    }
                    for h in 0..2 {
                        for k in 0..4 {
                            for l in 0..32 {
                                q[128 * h + 32 * k + l] = (qs[32 * h + l] >> (2 * k)) & 3;
                            }
                        }
                    }
                }
                other => unreachable!("{other} is not a K-quant"),
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
