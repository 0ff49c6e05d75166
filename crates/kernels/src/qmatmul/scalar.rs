//! The scalar twin: the definition of every quantized dot product, which the SIMD
//! versions reproduce bit for bit.
//!
//! Integer sums within a block are exact, so their order is free. The float work is one
//! fixed sequence per output, over blocks in order:
//! 32-element formats: `acc = fma(d_w·d_x, isum, acc)`, then `acc = fma(m_w, d_x·Σq_x, acc)`
//! when the format has a min; K-quants: `acc = fma(d_w·d_x, isum, acc)`, then
//! `acc = fma(-(dmin_w·d_x), minsum, acc)`.

use super::act::{ActLayout, ActRow};
use super::decode::{DecodedRow, Scheme};

/// The dot product of one decoded weight row with one quantized activation row.
pub fn dot(scheme: Scheme, w: &DecodedRow, x: ActRow) -> f32 {
    match scheme.layout {
        ActLayout::B32 => dot_b32(scheme, w, x),
        ActLayout::B256 => dot_k(scheme, w, x),
    }
}

fn dot_b32(scheme: Scheme, w: &DecodedRow, x: ActRow) -> f32 {
    let mut acc = 0f32;
    for (b, (qw, qx)) in w.q.chunks_exact(32).zip(x.q.chunks_exact(32)).enumerate() {
        let raw: i32 = if scheme.signed {
            qw.iter()
                .zip(qx)
                .map(|(&a, &b)| a as i8 as i32 * b as i32)
                .sum()
        } else {
            qw.iter().zip(qx).map(|(&a, &b)| a as i32 * b as i32).sum()
        };
        let isum = raw - scheme.offset * x.sums[b] as i32;
        acc = (w.d[b] * x.d[b]).mul_add(isum as f32, acc);
        if scheme.has_min {
            acc = w.m[b].mul_add(x.ds[b], acc);
        }
    }
    acc
}

fn dot_k(scheme: Scheme, w: &DecodedRow, x: ActRow) -> f32 {
    let mut acc = 0f32;
    for (s, (qw, qx)) in w.q.chunks_exact(256).zip(x.q.chunks_exact(256)).enumerate() {
        let (mut isum, mut corr, mut minsum) = (0i32, 0i32, 0i32);
        for j in 0..16 {
            let dot16: i32 = qw[16 * j..16 * (j + 1)]
                .iter()
                .zip(&qx[16 * j..16 * (j + 1)])
                .map(|(&a, &b)| a as i32 * b as i32)
                .sum();
            let sc = w.sc16[16 * s + j] as i32;
            let xs = x.sums[16 * s + j] as i32;
            isum += sc * dot16;
            corr += sc * xs;
            if scheme.has_min {
                minsum += w.mn[16 * s + j] as i32 * xs;
            }
        }
        let total = isum - scheme.offset * corr;
        acc = (w.d[s] * x.d[s]).mul_add(total as f32, acc);
        if scheme.has_min {
            acc = (-(w.m[s] * x.d[s])).mul_add(minsum as f32, acc);
        }
    }
    acc
}
