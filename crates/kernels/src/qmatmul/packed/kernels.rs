//! The packed tile kernels, written once over [`Lanes`]: one tile (half) of weight rows,
//! one lane per row, against `MR` activation rows held in registers. Each weight vector is
//! unpacked once and applied to all `MR` rows; no horizontal sums.
//!
//! Per output element they perform the scalar twin's sequence (`scalar::dot`): exact
//! integer sums per block, then the same float operations in block order.

use super::layout::{b32_at, GridLayout, Iq4Nl, Iq4Xs, LutLayout, Mxfp4, Q4K, Q6K};
use super::simd::Lanes;
use crate::formats::{iq4_nl, mxfp4};

/// One quantized activation row as raw pointers (lengths checked by the caller).
#[derive(Clone, Copy)]
pub struct XRow {
    pub q: *const i8,
    pub d: *const f32,
    /// Sums per 32 (B32 layout) or per 16 (K layout).
    pub sums: *const i16,
    /// K layout: sums per 32.
    pub sums32: *const i16,
    /// B32 layout: `d · sum` per block.
    pub ds: *const f32,
}

/// With `on`, asks for the record `AHEAD` bytes on into L2, so that streaming the weights
/// (decode) is bound by bandwidth rather than by one core's outstanding misses (where the
/// CPU wants it: [`crate::features::CpuFeatures::prefetch_rows`]). 8 KiB into L2 measured ahead of
/// 2 KiB into L1 and of no prefetch (then 15% slower) on the 1.5B on Intel.
#[inline(always)]
unsafe fn prefetch(rec: *const u8, len: usize, on: bool) {
    use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T1};
    const AHEAD: usize = 8192;
    if !on {
        return;
    }
    let mut at = 0;
    while at < len {
        _mm_prefetch::<_MM_HINT_T1>(rec.wrapping_add(AHEAD + at) as *const i8);
        at += 64;
    }
}

/// Q4_0, Q4_1, Q5_0, Q5_1, Q8_0: `nb` blocks of 32 from `tile`, half `h`; `out[i]`
/// gets the `A::LANES` outputs of activation row `x[i]`; `pf`: prefetch the weights.
#[inline(always)]
pub unsafe fn b32<A: Lanes, const MR: usize, const FIVE: bool, const MIN: bool, const Q8: bool>(
    tile: *const u8,
    nb: usize,
    h: usize,
    x: &[XRow; MR],
    offset: i32,
    out: &mut [*mut f32; MR],
    pf: bool,
) {
    let at = b32_at(FIVE, MIN, Q8);
    let (f16_h, chunk_h, bits_h) = (h * 2 * A::LANES, h * 4 * A::LANES, h * A::LANES / 2);
    let mut acc = [A::fzero(); MR];
    for b in 0..nb {
        let rec = tile.add(b * at.rec);
        prefetch(rec, at.rec, pf);
        let is = if Q8 {
            let mut is = [A::izero(); MR];
            for g in 0..8 {
                let w = A::load(rec.add(at.qs + 64 * g + chunk_h));
                for i in 0..MR {
                    is[i] = A::dot_q8(is[i], w, x[i].q.add(32 * b + 4 * g));
                }
            }
            is
        } else {
            let w_max = if FIVE { 31 } else { 15 };
            nibble_sums::<A, MR>(rec.add(at.qs + chunk_h), x, 32 * b, w_max, |c, lo, hi| {
                if FIVE {
                    let lo = A::fifth_bit(lo, rec.add(at.qh + 8 * c + bits_h));
                    (lo, A::fifth_bit(hi, rec.add(at.qh + 8 * (c + 4) + bits_h)))
                } else {
                    (lo, hi)
                }
            })
        };
        let d = A::f16(rec.add(f16_h));
        let m = if MIN {
            A::f16(rec.add(at.m + f16_h))
        } else {
            A::fzero()
        };
        for i in 0..MR {
            let isum = A::sub(is[i], A::splat(offset * *x[i].sums.add(b) as i32));
            acc[i] = A::fma(A::scale(d, *x[i].d.add(b)), A::cvt(isum), acc[i]);
            if MIN {
                acc[i] = A::fma(m, A::splat_f(*x[i].ds.add(b)), acc[i]);
            }
        }
    }
    for i in 0..MR {
        A::store(acc[i], out[i]);
    }
}

/// The integer sums of one block of 32 values against each row of `x` (its values at
/// `x[i].q + xk`): the four chunks of nibbles at `qs` (64 bytes apart), the low and high
/// nibbles of chunk `c` made into weight bytes (unsigned, at most `w_max`) by
/// `weights(c, lo, hi)`.
#[inline(always)]
unsafe fn nibble_sums<A: Lanes, const MR: usize>(
    qs: *const u8,
    x: &[XRow; MR],
    xk: usize,
    w_max: i32,
    weights: impl Fn(usize, A::I, A::I) -> (A::I, A::I),
) -> [A::I; MR] {
    let chunks_per_flush = partial_len::<A>(w_max) / 2;
    let mut is = [A::izero(); MR];
    let mut p = [A::pzero(); MR];
    for c in 0..4 {
        let (lo, hi) = A::nibbles(A::load(qs.add(64 * c)));
        let (lo, hi) = weights(c, lo, hi);
        for i in 0..MR {
            let xq = x[i].q.add(xk + 4 * c);
            p[i] = A::pdot(A::pdot(p[i], lo, xq), hi, xq.add(16));
        }
        if (c + 1) % chunks_per_flush == 0 || c == 3 {
            for i in 0..MR {
                is[i] = A::flush(is[i], p[i]);
                p[i] = A::pzero();
            }
        }
    }
    is
}

/// How a table type's record is read: its levels, how they are biased into bytes, and its
/// scales.
pub trait LutScale: LutLayout {
    /// The level of each nibble.
    const LEVELS: [i8; 16];
    /// Added to every level: 128 (the bytes of `dot_q8`, any level), or one that keeps the
    /// biased levels below 64 (those of `pdot`).
    const BIAS: i32;
    /// The `A::LANES` scales of sub-block `j` of half `h`, each the f32 of
    /// `DecodedRow::d` bit for bit.
    unsafe fn d<A: Lanes>(rec: *const u8, j: usize, h: usize) -> A::F;
}

impl LutScale for Iq4Nl {
    const LEVELS: [i8; 16] = iq4_nl::KVALUES;
    const BIAS: i32 = 128;
    #[inline(always)]
    unsafe fn d<A: Lanes>(rec: *const u8, _: usize, h: usize) -> A::F {
        A::f16(rec.add(h * 2 * A::LANES))
    }
}

/// `d · (ls - 32)`: the product of an f16 and a 6-bit integer is exact in f32, as in the
/// decoded row.
impl LutScale for Iq4Xs {
    const LEVELS: [i8; 16] = iq4_nl::KVALUES;
    const BIAS: i32 = 128;
    #[inline(always)]
    unsafe fn d<A: Lanes>(rec: *const u8, j: usize, h: usize) -> A::F {
        let ls = A::i8s(rec.add(Iq4Xs::SC + 16 * j + h * A::LANES));
        A::mul(A::f16(rec.add(h * 2 * A::LANES)), A::cvt(ls))
    }
}

/// Levels up to ±12: biased by 12 they take `pdot`'s cheaper path.
impl LutScale for Mxfp4 {
    const LEVELS: [i8; 16] = mxfp4::KVALUES;
    const BIAS: i32 = 12;
    #[inline(always)]
    unsafe fn d<A: Lanes>(rec: *const u8, _: usize, h: usize) -> A::F {
        A::e8m0_half(rec.add(h * A::LANES))
    }
}

/// `levels + bias` as bytes.
const fn biased(levels: [i8; 16], bias: i32) -> [u8; 16] {
    let mut t = [0u8; 16];
    let mut i = 0;
    while i < 16 {
        t[i] = (levels[i] as i32 + bias) as u8;
        i += 1;
    }
    t
}

/// IQ4_NL, IQ4_XS, MXFP4: `nr` records of `L::SUB` blocks of 32 from `tile`, half `h`, each
/// nibble replaced by its biased level (a byte shuffle) and the bias taken back with the
/// activations' sums, as Q8_0's `q + 128`.
#[inline(always)]
pub unsafe fn lut<A: Lanes, L: LutScale, const MR: usize>(
    tile: *const u8,
    nr: usize,
    h: usize,
    x: &[XRow; MR],
    out: &mut [*mut f32; MR],
    pf: bool,
) {
    let wide = L::BIAS == 128;
    let table = A::table(&const { biased(L::LEVELS, L::BIAS) });
    let offset = if wide { A::Q8_BIAS } else { L::BIAS };
    let chunk_h = h * 4 * A::LANES;
    let mut acc = [A::fzero(); MR];
    for r in 0..nr {
        let rec = tile.add(r * L::REC);
        prefetch(rec, L::REC, pf);
        for j in 0..L::SUB {
            let b = r * L::SUB + j;
            let qs = rec.add(L::QS + 256 * j + chunk_h);
            let is = if wide {
                let mut is = [A::izero(); MR];
                for c in 0..4 {
                    let (lo, hi) = A::nibbles(A::load(qs.add(64 * c)));
                    let (lo, hi) = (A::lookup(table, lo), A::lookup(table, hi));
                    for i in 0..MR {
                        let xq = x[i].q.add(32 * b + 4 * c);
                        is[i] = A::dot_q8(A::dot_q8(is[i], lo, xq), hi, xq.add(16));
                    }
                }
                is
            } else {
                nibble_sums::<A, MR>(qs, x, 32 * b, 2 * L::BIAS, |_, lo, hi| {
                    (A::lookup(table, lo), A::lookup(table, hi))
                })
            };
            let d = L::d::<A>(rec, j, h);
            for i in 0..MR {
                let isum = A::sub(is[i], A::splat(offset * *x[i].sums.add(b) as i32));
                acc[i] = A::fma(A::scale(d, *x[i].d.add(b)), A::cvt(isum), acc[i]);
            }
        }
    }
    for i in 0..MR {
        A::store(acc[i], out[i]);
    }
}

/// Bytes [`grid_expand`] writes for one half of a tile of `ns` records.
pub fn grid_expanded_bytes<A: Lanes>(ns: usize) -> usize {
    ns * 64 * std::mem::size_of::<A::I>()
}

/// The signed grid values [`grid`] gathers for half `h` of a tile, chunk `c` of sub-block
/// `j` of record `s` at vector `64 s + 8 j + c` of `buf`: what [`grid_expanded`] reads
/// back for every group of rows of a prompt instead of gathering them again.
pub unsafe fn grid_expand<A: Lanes, G: GridLayout>(
    tile: *const u8,
    ns: usize,
    h: usize,
    buf: *mut u8,
) {
    let size = std::mem::size_of::<A::I>();
    for s in 0..ns {
        for j in 0..8 {
            for c in 0..8 {
                let w = grid_weights::<A, G>(tile.add(s * G::REC), h, j, c);
                A::store_i(w, buf.add((64 * s + 8 * j + c) * size));
            }
        }
    }
}

/// Chunk `c` of sub-block `j` of record `rec` for half `h`: grid entries gathered by the
/// record's indices into Q8_0's chunks, signed by their bits.
#[inline(always)]
unsafe fn grid_weights<A: Lanes, G: GridLayout>(
    rec: *const u8,
    h: usize,
    j: usize,
    c: usize,
) -> A::I {
    let (u8_h, bits_h) = (h * A::LANES, h * A::LANES / 2);
    let (entries, halves) = (32 / G::ENTRY, G::ENTRY / 4);
    let (e, half) = (c / halves, c % halves);
    let idx = A::u8s(rec.add(G::IDX + 16 * (entries * j + e) + u8_h));
    let w = match G::ENTRY {
        8 => A::gather::<8>(G::grid().add(4 * half), idx),
        _ => A::gather::<4>(G::grid(), idx),
    };
    A::signed_q8(w, rec.add(G::SIGNS + 8 * (8 * j + c) + bits_h))
}

/// IQ2_XXS, IQ3_XXS: `ns` records of 256 values from `tile`, half `h`; each entry's grid
/// values gathered here ([`grid_weights`]).
#[inline(always)]
pub unsafe fn grid<A: Lanes, G: GridLayout, const MR: usize>(
    tile: *const u8,
    ns: usize,
    h: usize,
    x: &[XRow; MR],
    out: &mut [*mut f32; MR],
    pf: bool,
) {
    let w = |s: usize, j: usize, c: usize| grid_weights::<A, G>(tile.add(s * G::REC), h, j, c);
    grid_with::<A, G, MR>(tile, ns, h, x, out, pf, w);
}

/// [`grid`] with its weights read from [`grid_expand`]'s `buf`: the same bits.
#[inline(always)]
pub unsafe fn grid_expanded<A: Lanes, G: GridLayout, const MR: usize>(
    tile: *const u8,
    ns: usize,
    h: usize,
    x: &[XRow; MR],
    out: &mut [*mut f32; MR],
    buf: *const u8,
) {
    let size = std::mem::size_of::<A::I>();
    let w = |s: usize, j: usize, c: usize| A::load(buf.add((64 * s + 8 * j + c) * size));
    grid_with::<A, G, MR>(tile, ns, h, x, out, false, w);
}

#[inline(always)]
unsafe fn grid_with<A: Lanes, G: GridLayout, const MR: usize>(
    tile: *const u8,
    ns: usize,
    h: usize,
    x: &[XRow; MR],
    out: &mut [*mut f32; MR],
    pf: bool,
    weights: impl Fn(usize, usize, usize) -> A::I,
) {
    let (f16_h, u8_h) = (h * 2 * A::LANES, h * A::LANES);
    let mut acc = [A::fzero(); MR];
    for s in 0..ns {
        let rec = tile.add(s * G::REC);
        prefetch(rec, G::REC, pf);
        let d = A::f16(rec.add(f16_h));
        for j in 0..8 {
            let b = 8 * s + j;
            let mut is = [A::izero(); MR];
            for c in 0..8 {
                let w = weights(s, j, c);
                for i in 0..MR {
                    is[i] = A::dot_q8(is[i], w, x[i].q.add(32 * b + 4 * c));
                }
            }
            let mult = A::cvt(A::u8s(rec.add(G::MULT + 16 * j + u8_h)));
            let sd = A::mul(A::mul(d, mult), A::splat_f(G::SCALE));
            for i in 0..MR {
                let isum = A::sub(is[i], A::splat(A::Q8_BIAS * *x[i].sums.add(b) as i32));
                acc[i] = A::fma(A::scale(sd, *x[i].d.add(b)), A::cvt(isum), acc[i]);
            }
        }
    }
    for i in 0..MR {
        A::store(acc[i], out[i]);
    }
}

/// How many `pdot`s of weights up to `w_max` a partial holds (at least 1).
#[inline(always)]
fn partial_len<A: Lanes>(w_max: i32) -> usize {
    (A::PARTIAL_CAP / w_max).max(1) as usize
}

/// The scale of sub-block `2p + e` (`e` 0 or 1) from the lanes of scale pairs `p`.
#[inline(always)]
unsafe fn pair_half<A: Lanes, const SIGNED: bool>(pairs: A::I, e: usize) -> A::I {
    if e == 0 {
        A::pair_scale::<SIGNED, false>(pairs)
    } else {
        A::pair_scale::<SIGNED, true>(pairs)
    }
}

/// Q4_K: `ns` super-blocks of 256 from `tile`, half `h`.
#[inline(always)]
pub unsafe fn q4_k<A: Lanes, const MR: usize>(
    tile: *const u8,
    ns: usize,
    h: usize,
    x: &[XRow; MR],
    out: &mut [*mut f32; MR],
    pf: bool,
) {
    const {
        assert!(
            A::PARTIAL_CAP >= 8 * 15,
            "a sub-block's 8 pdots fit one partial"
        )
    };
    let (f16_h, chunk_h) = (h * 2 * A::LANES, h * 4 * A::LANES);
    let mut acc = [A::fzero(); MR];
    for s in 0..ns {
        let rec = tile.add(s * Q4K::REC);
        prefetch(rec, Q4K::REC, pf);
        let mut tot = [A::izero(); MR];
        for p in 0..4 {
            let scp = A::pairs::<false>(rec.add(Q4K::SC + 32 * p + f16_h));
            for e in 0..2 {
                let sc = pair_half::<A, false>(scp, e);
                let j = 2 * p + e;
                let mut p = [A::pzero(); MR];
                let mut q = [A::pzero(); MR];
                for c in 0..4 {
                    let v = A::load(rec.add(Q4K::QS + 256 * j + 64 * c + chunk_h));
                    let (lo, hi) = A::nibbles(v);
                    for i in 0..MR {
                        let xq = x[i].q.add(256 * s + 32 * j + 4 * c);
                        p[i] = A::pdot(p[i], lo, xq);
                        q[i] = A::pdot(q[i], hi, xq.add(16));
                    }
                }
                for i in 0..MR {
                    tot[i] = A::flush_scaled(tot[i], A::padd(p[i], q[i]), sc);
                }
            }
        }
        let d = A::f16(rec.add(f16_h));
        let dmin = A::f16(rec.add(Q4K::DMIN + f16_h));
        for i in 0..MR {
            let mut mins = A::izero();
            for p in 0..4 {
                let mn = A::pairs::<false>(rec.add(Q4K::MN + 32 * p + f16_h));
                mins = A::madd_pairs(mins, mn, x[i].sums32.add(8 * s + 2 * p));
            }
            let dx = *x[i].d.add(s);
            acc[i] = A::fma(A::scale(d, dx), A::cvt(tot[i]), acc[i]);
            acc[i] = A::fma(A::neg(A::scale(dmin, dx)), A::cvt(mins), acc[i]);
        }
    }
    for i in 0..MR {
        A::store(acc[i], out[i]);
    }
}

/// Q6_K: `ns` super-blocks of 256 from `tile`, half `h`.
#[inline(always)]
pub unsafe fn q6_k<A: Lanes, const MR: usize>(
    tile: *const u8,
    ns: usize,
    h: usize,
    x: &[XRow; MR],
    out: &mut [*mut f32; MR],
    pf: bool,
) {
    let (f16_h, chunk_h) = (h * 2 * A::LANES, h * 4 * A::LANES);
    let mut acc = [A::fzero(); MR];
    for s in 0..ns {
        let rec = tile.add(s * Q6K::REC);
        prefetch(rec, Q6K::REC, pf);
        let mut tot = [A::izero(); MR];
        for p in 0..8 {
            let scp = A::pairs::<true>(rec.add(Q6K::SC + 32 * p + f16_h));
            for e in 0..2 {
                let sc = pair_half::<A, true>(scp, e);
                let j = 2 * p + e;
                let sub = rec.add(Q6K::QS + Q6K::SUB * j + chunk_h);
                let (l0, h0) = A::nibbles(A::load(sub));
                let (l1, h1) = A::nibbles(A::load(sub.add(64)));
                let qh = A::load(sub.add(128));
                let g = [
                    A::or(l0, A::q6_high(qh, 0)),
                    A::or(l1, A::q6_high(qh, 1)),
                    A::or(h0, A::q6_high(qh, 2)),
                    A::or(h1, A::q6_high(qh, 3)),
                ];
                let per = partial_len::<A>(63);
                for i in 0..MR {
                    let xq = x[i].q.add(256 * s + 16 * j);
                    let mut p = A::pzero();
                    for (t, gt) in g.iter().enumerate() {
                        p = A::pdot(p, *gt, xq.add(4 * t));
                        if (t + 1) % per == 0 || t == 3 {
                            tot[i] = A::flush_scaled(tot[i], p, sc);
                            p = A::pzero();
                        }
                    }
                }
            }
        }
        let d = A::f16(rec.add(f16_h));
        for i in 0..MR {
            let mut corr = A::izero();
            for p in 0..8 {
                let scp = A::pairs::<true>(rec.add(Q6K::SC + 32 * p + f16_h));
                corr = A::madd_pairs(corr, scp, x[i].sums.add(16 * s + 2 * p));
            }
            let total = A::sub(tot[i], A::mullo(corr, A::splat(Q6K::OFFSET)));
            acc[i] = A::fma(A::scale(d, *x[i].d.add(s)), A::cvt(total), acc[i]);
        }
    }
    for i in 0..MR {
        A::store(acc[i], out[i]);
    }
}
