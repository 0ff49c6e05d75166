//! The searches of ggml's k-quant quantizers (`ggml-quants.c`), shared by Q2_K..Q6_K
//! and the IQ types: each finds, for a group of values `x` with weights `w`, the
//! integer levels `L` and the scale (and, for the types with a min, the offset) that
//! make `w`-weighted squared (or absolute) error small.
//!
//! They perform ggml's float operations in ggml's order (never fused), so that, like the
//! float types' conversions, they give ggml's bits: the golden test
//! `tests/quant_golden.rs` holds them to it.

/// Groups whose largest magnitude is below this quantize to zero (ggml's
/// `GROUP_MAX_EPS`).
pub(super) const GROUP_MAX_EPS: f32 = 1e-15;

/// `v` rounded to the nearest integer, ties to even (ggml's `nearest_int`).
#[inline(always)]
pub(super) fn nearest_int(v: f32) -> i32 {
    v.round_ties_even() as i32
}

/// The value of largest magnitude of `x` (its first, with its sign) and that magnitude.
#[inline]
pub(super) fn signed_max(x: &[f32]) -> (f32, f32) {
    x.iter().fold((0.0, 0.0), |(max, amax), &v| {
        if v.abs() > amax {
            (v, v.abs())
        } else {
            (max, amax)
        }
    })
}

/// A symmetric scale for `x` with levels `-nmax..nmax` (stored in `l` as `level + nmax`),
/// weights `w` (ggml's `make_qx_quants` with `rmse_type` 1): starting from the scale
/// that maps the largest-magnitude value to `-nmax`, it tries 18 nearby ones
/// (`-(nmax ± 0.1 is) / max`) and keeps the levels whose least-squares scale explains
/// the most of `x`; that scale is returned. 0 (and levels 0) for a group of zeros.
pub(super) fn make_qx_quants(nmax: i32, x: &[f32], w: &[f32], l: &mut [i8]) -> f32 {
    let (max, amax) = signed_max(x);
    if amax < GROUP_MAX_EPS {
        l.fill(0);
        return 0.0;
    }
    let nmaxf = nmax as f32;
    let level = |iscale: f32, v: f32| nearest_int(iscale * v).clamp(-nmax, nmax - 1);
    let fit = |iscale: f32| {
        x.iter()
            .zip(w)
            .fold((0f32, 0f32), |(sumlx, suml2), (&v, &w)| {
                let q = level(iscale, v) as f32;
                (sumlx + w * v * q, suml2 + w * q * q)
            })
    };
    let iscale = -nmaxf / max;
    for (l, &v) in l.iter_mut().zip(x) {
        *l = (level(iscale, v) + nmax) as i8;
    }
    let (sumlx, suml2) = fit(iscale);
    let mut scale = if suml2 != 0.0 { sumlx / suml2 } else { 0.0 };
    let mut best = scale * sumlx;
    for is in (-9..=9).filter(|&is| is != 0) {
        let iscale = -(nmaxf + 0.1 * is as f32) / max;
        let (sumlx, suml2) = fit(iscale);
        if suml2 > 0.0 && sumlx * sumlx > best * suml2 {
            for (l, &v) in l.iter_mut().zip(x) {
                *l = (level(iscale, v) + nmax) as i8;
            }
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    scale
}

/// Q3_K's symmetric search without importances (ggml's `make_q3_quants` with
/// `do_rmse`): levels `-nmax..nmax` for the scale mapping the largest-magnitude value to
/// `-nmax`, then up to 5 passes that move single levels where that raises the explained
/// `x²`-weighted variance; returns the least-squares scale, levels in `l` as
/// `level + nmax`.
pub(super) fn make_q3_quants(nmax: i32, x: &[f32], l: &mut [i8]) -> f32 {
    let (max, amax) = signed_max(x);
    if amax < GROUP_MAX_EPS {
        l.fill(0);
        return 0.0;
    }
    let iscale = -(nmax as f32) / max;
    let (mut sumlx, mut suml2) = (0f32, 0f32);
    for (l, &v) in l.iter_mut().zip(x) {
        let q = nearest_int(iscale * v).clamp(-nmax, nmax - 1);
        *l = q as i8;
        let w = v * v;
        sumlx += w * v * q as f32;
        suml2 += w * q as f32 * q as f32;
    }
    for _ in 0..5 {
        let mut changed = false;
        for (l, &v) in l.iter_mut().zip(x) {
            let w = v * v;
            let old = *l as f32;
            let mut slx = sumlx - w * v * old;
            if slx > 0.0 {
                let mut sl2 = suml2 - w * old * old;
                let new = nearest_int(v * sl2 / slx).clamp(-nmax, nmax - 1);
                if new != *l as i32 {
                    slx += w * v * new as f32;
                    sl2 += w * new as f32 * new as f32;
                    if sl2 > 0.0 && slx * slx * suml2 > sumlx * sumlx * sl2 {
                        *l = new as i8;
                        sumlx = slx;
                        suml2 = sl2;
                        changed = true;
                    }
                }
            }
        }
        if !changed {
            break;
        }
    }
    for l in l.iter_mut() {
        *l += nmax as i8;
    }
    if suml2 > 0.0 {
        sumlx / suml2
    } else {
        0.0
    }
}

/// How [`make_qkx_quants`] searches.
pub(super) struct Qkx {
    /// The first candidate maps `max - min` to `nmax + rmin` levels, …
    pub rmin: f32,
    /// … each next one to `rdelta` more, …
    pub rdelta: f32,
    /// … for `nstep + 1` candidates.
    pub nstep: i32,
    /// Minimize the weighted absolute error instead of the squared one.
    pub use_mad: bool,
}

/// A scale and min for `x` with levels `0..=nmax` (ggml's `make_qkx2_quants` and
/// `make_qkx3_quants`, which agree where weights are given): `x ≈ scale * l - min` with
/// `min >= 0`. Starting from the levels spanning `[min(x, 0), max(x)]`, each candidate
/// of `search` takes the levels of its scale and their weighted least-squares scale and
/// offset (the offset clamped to at most 0); the one of least weighted error wins.
/// Returns `(scale, min)`; levels in `l`, `laux` is scratch as long as `x`.
pub(super) fn make_qkx_quants(
    nmax: i32,
    x: &[f32],
    w: &[f32],
    l: &mut [u8],
    laux: &mut [u8],
    search: &Qkx,
) -> (f32, f32) {
    let mut min = x[0];
    let mut max = x[0];
    let mut sum_w = w[0];
    let mut sum_x = sum_w * x[0];
    for (&v, &w) in x.iter().zip(w).skip(1) {
        if v < min {
            min = v;
        }
        if v > max {
            max = v;
        }
        sum_w += w;
        sum_x += w * v;
    }
    if min > 0.0 {
        min = 0.0;
    }
    if max <= min {
        l.fill(0);
        return (0.0, -min);
    }
    let nmaxf = nmax as f32;
    let err = |d: f32| if search.use_mad { d.abs() } else { d * d };
    let mut iscale = nmaxf / (max - min);
    let mut scale = 1.0 / iscale;
    let mut best = 0f32;
    for ((l, &v), &w) in l.iter_mut().zip(x).zip(w) {
        *l = nearest_int(iscale * (v - min)).clamp(0, nmax) as u8;
        best += w * err(scale * *l as f32 + min - v);
    }
    for is in 0..=search.nstep {
        iscale = (search.rmin + search.rdelta * is as f32 + nmaxf) / (max - min);
        let (mut sum_l, mut sum_l2, mut sum_xl) = (0f32, 0f32, 0f32);
        for ((la, &v), &w) in laux.iter_mut().zip(x).zip(w) {
            let q = nearest_int(iscale * (v - min)).clamp(0, nmax);
            *la = q as u8;
            let q = q as f32;
            sum_l += w * q;
            sum_l2 += w * q * q;
            sum_xl += w * q * v;
        }
        let det = sum_w * sum_l2 - sum_l * sum_l;
        if det > 0.0 {
            let mut this_scale = (sum_w * sum_xl - sum_x * sum_l) / det;
            let mut this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det;
            if this_min > 0.0 {
                this_min = 0.0;
                this_scale = sum_xl / sum_l2;
            }
            let cur = laux.iter().zip(x).zip(w).fold(0f32, |e, ((&q, &v), &w)| {
                e + w * err(this_scale * q as f32 + this_min - v)
            });
            if cur < best {
                l.copy_from_slice(laux);
                best = cur;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    (scale, -min)
}

/// A scale for non-negative `x` with levels `0..=nmax` weighted by `w` (ggml's
/// `make_qp_quants`, which quantizes the sub-block scales of the k-quants): the best of
/// 9 scales near `max / nmax` by weighted error, then up to 5 passes moving single
/// levels where that raises the explained variance; returns the least-squares scale,
/// levels in `l`. A negative `x` (IQ2_XXS passes one) gets a negative level, kept in
/// `l` as its two's complement byte and read back as that byte, as ggml's `uint8_t`
/// levels are.
pub(super) fn make_qp_quants(nmax: i32, x: &[f32], w: &[f32], l: &mut [u8]) -> f32 {
    let max = x.iter().fold(0f32, |m, &v| if v > m { v } else { m });
    if max < GROUP_MAX_EPS {
        l.fill(0);
        return 0.0;
    }
    let nmaxf = nmax as f32;
    let mut iscale = nmaxf / max;
    let scale = 1.0 / iscale;
    let mut best = 0f32;
    for ((l, &v), &w) in l.iter_mut().zip(x).zip(w) {
        *l = nearest_int(iscale * v) as u8;
        let diff = v - scale * *l as f32;
        best += w * diff * diff;
    }
    for is in (-4..=4).filter(|&is| is != 0) {
        let iscale_is = (0.1 * is as f32 + nmaxf) / max;
        let scale_is = 1.0 / iscale_is;
        let mse = x.iter().zip(w).fold(0f32, |e, (&v, &w)| {
            let q = nearest_int(iscale_is * v).min(nmax);
            let diff = v - scale_is * q as f32;
            e + w * diff * diff
        });
        if mse < best {
            best = mse;
            iscale = iscale_is;
        }
    }
    let (mut sumlx, mut suml2) = (0f32, 0f32);
    for ((l, &v), &w) in l.iter_mut().zip(x).zip(w) {
        let q = nearest_int(iscale * v).min(nmax);
        *l = q as u8;
        sumlx += w * v * q as f32;
        suml2 += w * q as f32 * q as f32;
    }
    for _ in 0..5 {
        let mut changed = false;
        for ((l, &v), &w) in l.iter_mut().zip(x).zip(w) {
            let old = *l as f32;
            let mut slx = sumlx - w * v * old;
            let mut sl2 = suml2 - w * old * old;
            if slx > 0.0 && sl2 > 0.0 {
                let new = nearest_int(v * sl2 / slx).min(nmax);
                if new != *l as i32 {
                    slx += w * v * new as f32;
                    sl2 += w * new as f32 * new as f32;
                    if slx * slx * suml2 > sumlx * sumlx * sl2 {
                        *l = new as u8;
                        sumlx = slx;
                        suml2 = sl2;
                        changed = true;
                    }
                }
            }
        }
        if !changed {
            break;
        }
    }
    if suml2 > 0.0 {
        sumlx / suml2
    } else {
        0.0
    }
}

/// The weights of ggml's importance-weighted k-quant and IQ quantizers for one
/// super-block `x`: `importance[i] * sqrt(sigma2 + x[i]²)`, into `w`.
pub(super) fn imatrix_weights(x: &[f32], importance: &[f32], sigma2: f32, w: &mut [f32]) {
    for ((w, &v), &q) in w.iter_mut().zip(x).zip(importance) {
        *w = q * (sigma2 + v * v).sqrt();
    }
}

/// `sum(x²)` over `x` in order, as ggml accumulates it.
pub(super) fn sum_squares(x: &[f32]) -> f32 {
    x.iter().fold(0f32, |s, &v| s + v * v)
}
