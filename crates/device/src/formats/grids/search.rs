//! The codebooks prepared for quantization, as ggml's `iq2xs_init_impl` and
//! `iq3xs_init_impl` prepare them, built once on first use.
//!
//! A quantizer rounds each value of a group to a level index (`l`, the value
//! `2l + 1` in units of the group's scale) and looks the group's indices up as a point
//! of the lattice of all index combinations. Most points are no entry of the codebook;
//! for those, [`GridSearch::lookup`] gives the entries nearest the point (every entry at
//! the nearest `nwant` distinct squared distances, in order of distance then index),
//! among which [`GridSearch::best_neighbour`] picks the one of least weighted error.
//!
//! Worked example (IQ3_XXS, 4 values, 3 bits per index): indices `[2, 0, 0, 0]` make the
//! key `2`, which is entry 1 (values 20, 4, 4, 4). Indices `[1, 0, 0, 0]` (key 1) are
//! no entry; the nearest entries are 0 (`[0, 0, 0, 0]`) and 1, each one index away
//! (squared distance 4 in ggml's units of `2l + 1`), then those at the next distance.

use std::sync::OnceLock;

use super::{codes, Grid};
use crate::formats::kquants::nearest_int;

/// Where a lattice point leads.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Slot {
    /// The point is this entry of the codebook.
    Entry(u16),
    /// The point is no entry: its neighbours are `neighbours[start..start + len]`.
    Near { start: u32, len: u32 },
    /// No quantizer asks for the point (an index beyond the levels it rounds to).
    Unused,
}

/// A codebook of entries of `W` values prepared for quantization.
pub(crate) struct GridSearch<const W: usize> {
    /// Bits of one level index in a lattice key.
    bits: u32,
    /// The level indices a quantizer rounds to: `0..n_index`.
    n_index: u8,
    /// Each entry's level indices.
    points: Vec<[u8; W]>,
    /// Indexed by the key `sum(l[i] << (bits * i))`.
    slots: Vec<Slot>,
    neighbours: Vec<u16>,
}

impl<const W: usize> GridSearch<W> {
    /// Prepares `grid` for points whose indices are below `n_index` (each index `bits`
    /// wide in a key), keeping for each point off the grid the entries at its `nwant`
    /// nearest distances.
    fn new<const N: usize>(grid: &Grid<N, W>, n_index: u8, bits: u32, nwant: usize) -> Self {
        let code_bits = 16 / W as u32;
        let points: Vec<[u8; W]> = grid
            .codes
            .iter()
            .map(|&c| {
                std::array::from_fn(|i| {
                    ((c >> (code_bits * i as u32)) & ((1 << code_bits) - 1)) as u8
                })
            })
            .collect();
        let key = |l: &[u8; W]| {
            l.iter()
                .enumerate()
                .fold(0usize, |k, (i, &v)| k | (v as usize) << (bits as usize * i))
        };
        let mut slots = vec![Slot::Unused; 1 << (bits as usize * W)];
        for (e, p) in points.iter().enumerate() {
            slots[key(p)] = Slot::Entry(e as u16);
        }
        let mut neighbours = Vec::new();
        let mut dist: Vec<(i32, u16)> = Vec::with_capacity(N);
        let n_points = (n_index as usize).pow(W as u32);
        for mut flat in 0..n_points {
            let l: [u8; W] = std::array::from_fn(|_| {
                let v = (flat % n_index as usize) as u8;
                flat /= n_index as usize;
                v
            });
            let k = key(&l);
            if slots[k] != Slot::Unused {
                continue;
            }
            dist.clear();
            dist.extend(points.iter().enumerate().map(|(e, p)| {
                let d2 = p
                    .iter()
                    .zip(&l)
                    .map(|(&a, &b)| (2 * (a as i32 - b as i32)).pow(2))
                    .sum();
                (d2, e as u16)
            }));
            dist.sort_unstable();
            let start = neighbours.len() as u32;
            let mut distinct = 0;
            let mut last = -1;
            for &(d2, e) in &dist {
                if d2 != last {
                    if distinct == nwant {
                        break;
                    }
                    distinct += 1;
                    last = d2;
                }
                neighbours.push(e);
            }
            let len = neighbours.len() as u32 - start;
            slots[k] = Slot::Near { start, len };
        }
        GridSearch {
            bits,
            n_index,
            points,
            slots,
            neighbours,
        }
    }

    /// The entry whose level indices are `l`, or the entries nearest that point.
    /// Panics for a point with an index beyond those the codebook was prepared for.
    #[inline]
    pub fn lookup(&self, l: &[u8]) -> Result<u16, &[u16]> {
        let k = l.iter().enumerate().fold(0usize, |k, (i, &v)| {
            k | (v as usize) << (self.bits as usize * i)
        });
        match self.slots[k] {
            Slot::Entry(e) => Ok(e),
            Slot::Near { start, len } => {
                Err(&self.neighbours[start as usize..(start + len) as usize])
            }
            Slot::Unused => panic!("lattice point {l:?} beyond the prepared levels"),
        }
    }

    /// Entry `e`'s level indices.
    #[inline]
    pub fn point(&self, e: u16) -> &[u8; W] {
        &self.points[e as usize]
    }

    /// Among `candidates`, the entry whose values `scale * values[l]` are nearest `x`
    /// by `sum(w * (scale * values[l] - x)²)` (the first of equals), as ggml's
    /// `iq*_find_best_neighbour` (`values` [`ODD`]) and `iq1_find_best_neighbour2`; its
    /// level indices go to `l`.
    pub fn best_neighbour(
        &self,
        candidates: &[u16],
        x: &[f32],
        w: &[f32],
        scale: f32,
        values: &[f32],
        l: &mut [u8],
    ) -> u16 {
        let mut best = f32::MAX;
        let mut found = candidates[0];
        for &e in candidates {
            let d2 = self.points[e as usize].iter().zip(x.iter().zip(w)).fold(
                0f32,
                |d2, (&p, (&x, &w))| {
                    let diff = scale * values[p as usize] - x;
                    d2 + w * diff * diff
                },
            );
            if d2 < best {
                best = d2;
                found = e;
            }
        }
        l.copy_from_slice(self.point(found));
        found
    }

    /// Rounds the magnitudes `xval` at inverse scale `id` to level indices (value
    /// `2l + 1`, clamped to the prepared levels) into `l`, each `W` of them snapped to the
    /// grid: where they are no entry, to the neighbour nearest at `scale` by the weights
    /// `waux` ([`Self::best_neighbour`]). Entries whose bit is set in `keep` are left as
    /// they are. Returns a mask of the entries that were on the grid as rounded.
    pub fn snap(
        &self,
        xval: &[f32],
        waux: &[f32],
        id: f32,
        scale: f32,
        l: &mut [u8],
        keep: u8,
    ) -> u8 {
        let top = self.n_index as i32 - 1;
        let mut on_grid = 0u8;
        for (k, lw) in l.chunks_exact_mut(W).enumerate() {
            if keep & (1 << k) != 0 {
                continue;
            }
            let r = W * k..W * k + W;
            for (q, &x) in lw.iter_mut().zip(&xval[r.clone()]) {
                *q = nearest_int(0.5 * (id * x - 1.0)).clamp(0, top) as u8;
            }
            match self.lookup(lw) {
                Ok(_) => on_grid |= 1 << k,
                Err(near) => {
                    self.best_neighbour(near, &xval[r.clone()], &waux[r], scale, &ODD, lw);
                }
            }
        }
        on_grid
    }

    /// The scale and grid entries of one group of magnitudes `xval` (largest `max`),
    /// its squared error weighted by `weight` (at most 32), as ggml's IQ3_XXS,
    /// IQ3_S, IQ2_XS and IQ2_S quantizers search: from `max / (2 n - 1)` (`n` levels),
    /// each of the scales `(2n - 1 + is * scan.step) / max`, `is` in `-steps..=steps`,
    /// rounds and snaps the group ([`Self::snap`]) and gets the least-squares scale of its
    /// entries; the one explaining the most wins. Where that one needed neighbours, the
    /// group is snapped again at its scale (only the entries off the grid, or all as
    /// `scan.refit_all` says) and refit. Level indices go to `l`; returns the scale.
    pub fn search_group(
        &self,
        xval: &[f32],
        weight: &[f32],
        max: f32,
        scan: &Scan,
        l: &mut [u8],
    ) -> f32 {
        let mut waux = [0f32; 32];
        let waux = &mut waux[..weight.len()];
        for (a, w) in waux.iter_mut().zip(weight) {
            *a = w.sqrt();
        }
        let waux = &*waux;
        let top = (2 * self.n_index as i32 - 1) as f32;
        let all = ((1u32 << (xval.len() / W)) - 1) as u8;
        let mut scale = max / top;
        let mut best = 0f32;
        let mut on_grid = if scan.refit_all { 0 } else { all };
        let mut laux = [0u8; 32];
        let laux = &mut laux[..xval.len()];
        l.fill(0);
        for is in -scan.steps..=scan.steps {
            let id = (top + is as f32 * scan.step) / max;
            let on = self.snap(xval, waux, id, 1.0 / id, laux, 0);
            let (sumqx, sumq2) = fit(xval, weight, laux);
            if sumq2 > 0.0 && sumqx * sumqx > best * sumq2 {
                scale = sumqx / sumq2;
                best = scale * sumqx;
                l.copy_from_slice(laux);
                on_grid = on;
            }
        }
        if on_grid != all && scale > 0.0 {
            let keep = if scan.refit_all { 0 } else { on_grid };
            self.snap(xval, waux, 1.0 / scale, scale, l, keep);
            let (sumqx, sumq2) = fit(xval, weight, l);
            if sumq2 > 0.0 {
                scale = sumqx / sumq2;
            }
        }
        scale
    }
}

/// The value `2l + 1` of each level index `l` of the IQ2 and IQ3 grids.
pub(crate) const ODD: [f32; 8] = [1.0, 3.0, 5.0, 7.0, 9.0, 11.0, 13.0, 15.0];

/// How [`GridSearch::search_group`] scans scales.
pub(crate) struct Scan {
    /// Scales tried on each side of the first.
    pub steps: i32,
    /// Their spacing in levels.
    pub step: f32,
    /// Snap every entry again at the chosen scale, not only those off the grid (IQ3_S).
    pub refit_all: bool,
}

/// Sets `xval` to the magnitudes of `xb` and returns each 8's sign pattern (bit `i` set
/// where value `i` is negative), as IQ3_S and IQ2_S store them.
pub(crate) fn signs(xb: &[f32], xval: &mut [f32]) -> [u8; 4] {
    let mut out = [0u8; 4];
    for ((s, x8), v8) in out
        .iter_mut()
        .zip(xb.chunks_exact(8))
        .zip(xval.chunks_exact_mut(8))
    {
        for (i, (&x, v)) in x8.iter().zip(v8).enumerate() {
            *v = if x >= 0.0 { x } else { -x };
            if x < 0.0 {
                *s |= 1 << i;
            }
        }
    }
    out
}

/// [`signs`] for the types that store only patterns with an even number of signs
/// (their [`super::KSIGNS`] index, the low 7 bits): where a pattern has an odd number,
/// the value of least `weight * x²` in it keeps the wrong sign, its bit flipped and its
/// `xval` negated.
pub(crate) fn even_signs(xb: &[f32], weight: &[f32], xval: &mut [f32]) -> [u8; 4] {
    let mut out = signs(xb, xval);
    for (k, s) in out.iter_mut().enumerate().take(xb.len() / 8) {
        if s.count_ones() % 2 == 1 {
            let cost = |i: usize| weight[8 * k + i] * xb[8 * k + i] * xb[8 * k + i];
            let imin = (1..8).fold(0, |m, i| if cost(i) < cost(m) { i } else { m });
            xval[8 * k + imin] = -xval[8 * k + imin];
            *s ^= 1 << imin;
        }
        *s &= 127;
    }
    out
}

/// `(sum(w * x * q), sum(w * q²))` with `q = 2l + 1`: the least-squares scale of levels
/// `l` for `x` is their ratio.
pub(crate) fn fit(x: &[f32], w: &[f32], l: &[u8]) -> (f32, f32) {
    x.iter()
        .zip(w)
        .zip(l)
        .fold((0f32, 0f32), |(sqx, sq2), ((&x, &w), &l)| {
            let q = (2 * l as i32 + 1) as f32;
            (sqx + w * x * q, sq2 + w * q * q)
        })
}

/// `max(x)`, as ggml's `MAX` folds it from the first value.
pub(crate) fn max_of(x: &[f32]) -> f32 {
    x[1..].iter().fold(x[0], |m, &v| if m > v { m } else { v })
}

/// IQ2_XXS's codebook: indices 0..3, the two nearest distances.
pub(crate) fn iq2xxs() -> &'static GridSearch<8> {
    static S: OnceLock<GridSearch<8>> = OnceLock::new();
    S.get_or_init(|| GridSearch::new(&codes::IQ2XXS, 3, 2, 2))
}

/// IQ2_XS's codebook: indices 0..3, the two nearest distances.
pub(crate) fn iq2xs() -> &'static GridSearch<8> {
    static S: OnceLock<GridSearch<8>> = OnceLock::new();
    S.get_or_init(|| GridSearch::new(&codes::IQ2XS, 3, 2, 2))
}

/// IQ2_S's codebook: indices 0..3, the nearest distance.
pub(crate) fn iq2s() -> &'static GridSearch<8> {
    static S: OnceLock<GridSearch<8>> = OnceLock::new();
    S.get_or_init(|| GridSearch::new(&codes::IQ2S, 3, 2, 1))
}

/// The codebook of IQ1_S and IQ1_M: indices 0..3, the three nearest distances.
pub(crate) fn iq1s() -> &'static GridSearch<8> {
    static S: OnceLock<GridSearch<8>> = OnceLock::new();
    S.get_or_init(|| GridSearch::new(&codes::IQ1S, 3, 2, 3))
}

/// IQ3_XXS's codebook: indices 0..8, the two nearest distances.
pub(crate) fn iq3xxs() -> &'static GridSearch<4> {
    static S: OnceLock<GridSearch<4>> = OnceLock::new();
    S.get_or_init(|| GridSearch::new(&codes::IQ3XXS, 8, 3, 2))
}

/// IQ3_S's codebook: indices 0..8, the three nearest distances.
pub(crate) fn iq3s() -> &'static GridSearch<4> {
    static S: OnceLock<GridSearch<4>> = OnceLock::new();
    S.get_or_init(|| GridSearch::new(&codes::IQ3S, 8, 3, 3))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_are_found_and_other_points_lead_to_their_nearest() {
        let s = iq3xxs();
        assert_eq!(s.lookup(&[0, 0, 0, 0]), Ok(0));
        assert_eq!(s.lookup(&[2, 0, 0, 0]), Ok(1));
        assert_eq!(s.lookup(&[1, 0, 0, 0]).unwrap_err()[..2], [0, 1]);
        for e in 0..256u16 {
            assert_eq!(s.lookup(s.point(e)), Ok(e));
        }
        let s = iq2xxs();
        let near = s.lookup(&[2, 2, 2, 2, 2, 2, 2, 2]).unwrap_err();
        assert!(!near.is_empty());
        let d2 = |e: u16| {
            s.point(e)
                .iter()
                .map(|&v| (2 - v as i32).pow(2))
                .sum::<i32>()
        };
        let nearest = (0..256u16).map(d2).min().unwrap();
        assert_eq!(d2(near[0]), nearest);
        assert!(near.windows(2).all(|w| (d2(w[0]), w[0]) < (d2(w[1]), w[1])));
        let distinct: std::collections::BTreeSet<i32> = near.iter().map(|&e| d2(e)).collect();
        assert_eq!(distinct.len(), 2);
    }
}
