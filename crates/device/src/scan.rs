//! Mamba-2's selective scan ([`crate::Device::ssm_scan`]): per head `h` of `n_head`, its
//! group `g = h / (n_head / n_group)` (consecutive heads share a group, as Mamba-2 repeats
//! them), on a state `S` of `[head_dim, d_state]` (a row per head dimension). Per row, in
//! the sequence's order:
//!
//! ```text
//! S[j]   = S[j] · exp(a[h] · dt[h]) + (x[j] · dt[h]) · B[g]      for each head dimension j
//! out[j] = S[j] · C[g] + d[h] · x[j]
//! ```
//!
//! each update two products and a sum per element (f32), the dot product summed in one
//! fixed order. The
//! state of a sequence is the `n_head · head_dim · d_state` floats from float `at` of its
//! slot (a convolution's state before it); zero before position 0. It is ggml's
//! `ssm_scan` with the `D` skip folded in.

use crate::Buf;

/// The shape of [`crate::Device::ssm_scan`] (see the module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScanSpec {
    pub n_head: usize,
    pub head_dim: usize,
    pub d_state: usize,
    /// Groups of `B` and `C`; divides `n_head`.
    pub n_group: usize,
    pub at: usize,
}

impl ScanSpec {
    /// Floats of one sequence's state.
    pub fn state_floats(&self) -> usize {
        self.n_head * self.head_dim * self.d_state
    }

    /// The group of head `h`.
    pub fn group(&self, h: usize) -> usize {
        h / (self.n_head / self.n_group)
    }
}

/// The buffers of [`crate::Device::ssm_scan`] for the step's rows: `x`, `out` `[rows, n_head
/// · head_dim]`; `dt` (the step size, `softplus(dt + dt_bias)`) `[rows, n_head]`; `b`, `c`
/// `[rows, n_group · d_state]`; `a` (`-exp(A_log)`) and `d` (the skip) `[n_head]`.
#[derive(Debug, Clone, Copy)]
pub struct ScanIo {
    pub x: Buf,
    pub dt: Buf,
    pub a: Buf,
    pub b: Buf,
    pub c: Buf,
    pub d: Buf,
    pub out: Buf,
}

/// One row of one head dimension: `row = row · decay + xdt · b`, then `row · c + skip`, the
/// dot product as `dot` sums it (the reference's and the CPU's step).
pub fn row_step(
    dot: impl Fn(&[f32], &[f32]) -> f32,
) -> impl Fn(&mut [f32], &[f32], &[f32], f32, f32, f32) -> f32 {
    move |row, b, c, decay, xdt, skip| {
        row.iter_mut()
            .zip(b)
            .for_each(|(s, &bb)| *s = *s * decay + xdt * bb);
        dot(row, c) + skip
    }
}
