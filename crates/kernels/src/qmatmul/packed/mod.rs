//! Weights repacked at load into tiles of 16 rows ([`layout`]) and the matmul over them:
//! each weight vector is loaded and unpacked once per group of up to 8 activation rows,
//! and a dot instruction gives 16 (AVX-512 VNNI) or 8 (AVX2) rows their partial sums at
//! once. Decode streams the weights once; verification and batched decode reuse each
//! loaded vector for every row; prefill runs the same kernel over groups of 8 rows.
//!
//! Every output element is the scalar twin's sequence ([`super::scalar::dot`]), so a row's
//! bits do not depend on M, on its group, on the thread count or on the instruction set.

#[cfg(target_arch = "x86_64")]
mod kernels;
pub mod layout;
#[cfg(target_arch = "x86_64")]
mod simd;

use std::ops::Range;
use std::sync::atomic::{AtomicUsize, Ordering};

use gguf::GgmlType;

#[cfg(target_arch = "x86_64")]
use self::kernels::XRow;
use self::layout::{Format, TILE};
#[cfg(target_arch = "x86_64")]
use self::layout::{Iq2Xxs, Iq3Xxs, Iq4Nl, Iq4Xs, Mxfp4};
#[cfg(target_arch = "x86_64")]
use self::simd::{Avx2, Avx512, Lanes};
use super::act::{ActLayout, QActs};
use super::decode::DecodedRow;
pub use crate::features::PackedIsa;
use crate::forms::{int_form, IntForm};
use crate::pool::{SharedOut, ThreadPool};

/// 64 bytes, 64-aligned: the unit the packed buffer is allocated in.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Line([u8; 64]);

/// A quantized matrix in the packed layout: `n_rows` rows (padded with zero rows to a
/// whole number of tiles) of `n_cols` values.
pub struct PackedMatrix {
    pub ty: GgmlType,
    pub n_rows: usize,
    pub n_cols: usize,
    /// How its activation rows are quantized (its type's scheme's).
    pub act_layout: ActLayout,
    format: Format,
    lines: Vec<Line>,
}

impl std::fmt::Debug for PackedMatrix {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "PackedMatrix({} [{}, {}])",
            self.ty, self.n_rows, self.n_cols
        )
    }
}

impl PackedMatrix {
    /// Whether `ty` has a packed layout.
    pub fn supports(ty: GgmlType) -> bool {
        Self::layout(ty).is_some()
    }

    /// The integer form of `ty` and its packed layout, when it has one.
    fn layout(ty: GgmlType) -> Option<(&'static IntForm, Format)> {
        let form = int_form(ty)?;
        Some((form, form.packed?))
    }

    /// Bytes the packed form of `n_rows × n_cols` of `ty` takes, or `None` without a layout.
    pub fn planned_bytes(ty: GgmlType, n_rows: usize, n_cols: usize) -> Option<usize> {
        let (_, f) = Self::layout(ty)?;
        Some(n_rows.div_ceil(TILE) * (n_cols / f.block()) * f.rec())
    }

    /// Repacks the `n_rows` stored rows of `n_cols` values of `ty` in `data` (a checked
    /// `QMatrix`'s), or `None` when `ty` has no packed layout.
    pub fn pack(ty: GgmlType, data: &[u8], n_rows: usize, n_cols: usize) -> Option<PackedMatrix> {
        let (form, format) = Self::layout(ty)?;
        let bytes = Self::planned_bytes(ty, n_rows, n_cols)?;
        let mut lines = vec![Line([0; 64]); bytes.div_ceil(64)];
        // SAFETY: `Line` is 64 plain bytes; the slice covers the allocation.
        let buf = unsafe {
            std::slice::from_raw_parts_mut(lines.as_mut_ptr() as *mut u8, lines.len() * 64)
        };
        let (nb, rec) = (n_cols / format.block(), format.rec());
        let mut row = DecodedRow::default();
        let rb = data.len() / n_rows.max(1);
        for n in 0..n_rows {
            let stored = &data[n * rb..(n + 1) * rb];
            let tile = &mut buf[(n / TILE) * nb * rec..][..nb * rec];
            if format.from_stored() {
                for (blk, record) in stored.chunks_exact(rb / nb).zip(tile.chunks_exact_mut(rec)) {
                    format.write_stored(blk, n % TILE, record);
                }
                continue;
            }
            form.decode_row(&mut row, stored, n_cols);
            for (b, record) in tile.chunks_exact_mut(rec).enumerate() {
                format.write(&row, b, n % TILE, record);
            }
        }
        Some(PackedMatrix {
            ty,
            n_rows,
            n_cols,
            act_layout: form.scheme.layout,
            format,
            lines,
        })
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        self.lines.len() * 64
    }

    fn tile_bytes(&self) -> usize {
        self.n_cols / self.format.block() * self.format.rec()
    }

    fn tile(&self, t: usize) -> *const u8 {
        // SAFETY: `t` is below the tile count, whose records the allocation holds.
        unsafe { (self.lines.as_ptr() as *const u8).add(t * self.tile_bytes()) }
    }
}

/// `y[m, n] = Σ_k x[m, k] · w[n, k]` with `x` already quantized in `acts` (in the layout of
/// `w`'s format); `y` is `[acts.m, w.n_rows]`. `isa` must be [`PackedIsa::detect`]'s answer
/// or one it implies (AVX2 on an AVX-512 CPU).
pub fn matmul(pool: &ThreadPool, isa: PackedIsa, w: &PackedMatrix, acts: &QActs, y: &mut [f32]) {
    matmul_many(pool, isa, &mut [(w, acts, y)]);
}

/// Several [`matmul`]s in one dispatch of the pool (say the q, k and v projections of one
/// input). Threads claim runs of tiles of near-equal weight bytes in turn until none is
/// left, so a core slowed by a neighbour does not hold the other one up; each tile is
/// computed whole by one thread, so the results do not depend on who claimed what.
pub fn matmul_many(
    pool: &ThreadPool,
    isa: PackedIsa,
    jobs: &mut [(&PackedMatrix, &QActs, &mut [f32])],
) {
    let mut work = Vec::with_capacity(jobs.len());
    for (w, acts, y) in jobs.iter_mut() {
        let want = w.format.layout();
        assert_eq!(acts.layout, Some(want), "activations in the wrong layout");
        assert_eq!(acts.k, w.n_cols, "activations of the wrong length");
        assert_eq!(y.len(), acts.m * w.n_rows, "y is not [m, n_rows]");
        work.push((*w, *acts, SharedOut::new(y)));
    }
    let rows = work.iter().map(|(_, a, _)| a.m).max().unwrap_or(1);
    let per_thread = match rows {
        1 => CHUNKS_PER_THREAD,
        _ => CHUNKS_PER_THREAD_ROWS,
    };
    let chunks = chunks(
        &work.iter().map(|(w, _, _)| w).collect::<Vec<_>>(),
        pool.n_threads() * per_thread,
    );
    let next = AtomicUsize::new(0);
    #[cfg(target_arch = "x86_64")]
    let pf_rows = crate::features::CpuFeatures::get().prefetch_rows;
    #[cfg(target_arch = "x86_64")]
    pool.run(&|_, _| {
        while let Some((i, tiles)) = chunks.get(next.fetch_add(1, Ordering::Relaxed)) {
            let (w, acts, out) = &work[*i];
            // SAFETY: the ISA was detected on this CPU.
            match isa {
                PackedIsa::Avx512Vnni => unsafe {
                    run_avx512(w, tiles.clone(), acts, out, pf_rows)
                },
                PackedIsa::Avx2 => unsafe { run_avx2(w, tiles.clone(), acts, out, pf_rows) },
            }
        }
    });
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (pool, chunks, next);
        unreachable!("{isa:?} is not an instruction set of this architecture");
    }
}

/// Runs of tiles per thread and dispatch for one activation row: enough to even out cores
/// running at different speeds, few enough that each run is a long sequential stream.
const CHUNKS_PER_THREAD: usize = 4;
/// The same for several rows, where arithmetic rather than the stream binds: finer, so
/// that the last run of a dispatch leaves the other cores idle for less.
const CHUNKS_PER_THREAD_ROWS: usize = 16;

/// The tiles of `ws`, in order, cut into about `n` runs `(matrix index, tiles)` of near-equal
/// bytes (a run never spans two matrices).
fn chunks(ws: &[&&PackedMatrix], n: usize) -> Vec<(usize, Range<usize>)> {
    let total: usize = ws
        .iter()
        .map(|w| w.n_rows.div_ceil(TILE) * w.tile_bytes())
        .sum();
    let target = total.div_ceil(n.max(1)).max(1);
    let mut out = Vec::new();
    for (i, w) in ws.iter().enumerate() {
        let n_tiles = w.n_rows.div_ceil(TILE);
        let per = (target / w.tile_bytes()).max(1);
        let mut t = 0;
        while t < n_tiles {
            out.push((i, t..(t + per).min(n_tiles)));
            t += per;
        }
    }
    out
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni,avx2,fma,f16c")]
unsafe fn run_avx512(
    w: &PackedMatrix,
    tiles: Range<usize>,
    acts: &QActs,
    out: &SharedOut,
    pf_rows: usize,
) {
    run::<Avx512>(w, tiles, acts, out, 8, pf_rows)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn run_avx2(
    w: &PackedMatrix,
    tiles: Range<usize>,
    acts: &QActs,
    out: &SharedOut,
    pf_rows: usize,
) {
    run::<Avx2>(w, tiles, acts, out, 4, pf_rows)
}

#[cfg(target_arch = "x86_64")]
/// Every tile of `tiles` against every activation row, one block of [`row_block`] rows
/// at a time, rows taken `max_group` at a time within it (the rest in one group), so that
/// each weight vector is unpacked once per group; groups of at least `pf_rows` rows prefetch
/// the weights.
#[inline(always)]
unsafe fn run<A: Lanes>(
    w: &PackedMatrix,
    tiles: Range<usize>,
    acts: &QActs,
    out: &SharedOut,
    max_group: usize,
    pf_rows: usize,
) {
    let rows: Vec<XRow> = (0..acts.m).map(|i| xrow(acts, i)).collect();
    let block = row_block(acts.k, max_group);
    for mb in (0..acts.m).step_by(block) {
        let end = (mb + block).min(acts.m);
        for t in tiles.clone() {
            run_rows::<A>(w, t, &rows, mb..end, out, max_group, pf_rows);
        }
    }
}

/// Activation bytes a block of rows may take: a thread runs its tiles over one block of
/// rows at a time so that the block stays in L2 (a prompt's rows, a few MiB in all, would
/// otherwise come from L3 once per tile).
#[cfg(target_arch = "x86_64")]
const ROW_BLOCK_BYTES: usize = 192 << 10;

#[cfg(target_arch = "x86_64")]
/// Rows per block for rows of `k` bytes: a multiple of `max_group`, at least one group.
fn row_block(k: usize, max_group: usize) -> usize {
    (ROW_BLOCK_BYTES / k.max(1) / max_group).max(1) * max_group
}

#[cfg(target_arch = "x86_64")]
/// Tile `t` against activation rows `ms`, `max_group` at a time (the rest in one group).
#[inline(always)]
unsafe fn run_rows<A: Lanes>(
    w: &PackedMatrix,
    t: usize,
    rows: &[XRow],
    ms: Range<usize>,
    out: &SharedOut,
    max_group: usize,
    pf_rows: usize,
) {
    // A grid type's tile met by more than one group of rows has its weights gathered once.
    let grids = matches!(w.format, Format::IQ2_XXS | Format::IQ3_XXS);
    if grids && ms.len() > max_group {
        // Taken out and put back rather than used inside a closure, which would not
        // inherit this function's target features.
        let mut buf = EXPANDED.take();
        expand::<A>(w, t, &mut buf);
        groups::<A>(w, t, rows, ms, out, max_group, pf_rows, Some(&buf));
        EXPANDED.set(buf);
    } else {
        groups::<A>(w, t, rows, ms, out, max_group, pf_rows, None);
    }
}

#[cfg(target_arch = "x86_64")]
thread_local! {
    /// A thread's expanded grid tile ([`expand`]), kept to be written again.
    static EXPANDED: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

#[cfg(target_arch = "x86_64")]
/// [`run_rows`]'s groups of rows, with the tile's expanded grid values where given.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn groups<A: Lanes>(
    w: &PackedMatrix,
    t: usize,
    rows: &[XRow],
    ms: Range<usize>,
    out: &SharedOut,
    max_group: usize,
    pf_rows: usize,
    ex: Option<&[u8]>,
) {
    let mut m0 = ms.start;
    while m0 < ms.end {
        let left = ms.end - m0;
        let take = left.min(max_group);
        let group_rows = &rows[m0..m0 + take];
        match take {
            8 => group::<A, 8>(w, t, group_rows, m0, out, pf_rows, ex),
            7 => group::<A, 7>(w, t, group_rows, m0, out, pf_rows, ex),
            6 => group::<A, 6>(w, t, group_rows, m0, out, pf_rows, ex),
            5 => group::<A, 5>(w, t, group_rows, m0, out, pf_rows, ex),
            4 => group::<A, 4>(w, t, group_rows, m0, out, pf_rows, ex),
            3 => group::<A, 3>(w, t, group_rows, m0, out, pf_rows, ex),
            2 => group::<A, 2>(w, t, group_rows, m0, out, pf_rows, ex),
            _ => group::<A, 1>(w, t, group_rows, m0, out, pf_rows, ex),
        }
        m0 += take;
    }
}

#[cfg(target_arch = "x86_64")]
/// A grid type's tile `t` with its signed grid values gathered, half after half
/// ([`kernels::grid_expand`]), into `buf` (grown as needed, every byte written).
unsafe fn expand<A: Lanes>(w: &PackedMatrix, t: usize, buf: &mut Vec<u8>) {
    let ns = w.n_cols / w.format.block();
    let half = kernels::grid_expanded_bytes::<A>(ns);
    let len = half * (TILE / A::LANES);
    if buf.len() < len {
        buf.resize(len, 0);
    }
    for h in 0..TILE / A::LANES {
        let at = buf.as_mut_ptr().add(h * half);
        match w.format {
            Format::IQ2_XXS => kernels::grid_expand::<A, Iq2Xxs>(w.tile(t), ns, h, at),
            _ => kernels::grid_expand::<A, Iq3Xxs>(w.tile(t), ns, h, at),
        }
    }
}

#[cfg(target_arch = "x86_64")]
fn xrow(acts: &QActs, i: usize) -> XRow {
    let r = acts.row(i);
    XRow {
        q: r.q.as_ptr(),
        d: r.d.as_ptr(),
        sums: r.sums.as_ptr(),
        sums32: r.sums32.as_ptr(),
        ds: r.ds.as_ptr(),
    }
}

#[cfg(target_arch = "x86_64")]
/// Tile `t` against activation rows `m0..m0 + MR`.
#[inline(always)]
unsafe fn group<A: Lanes, const MR: usize>(
    w: &PackedMatrix,
    t: usize,
    rows: &[XRow],
    m0: usize,
    out: &SharedOut,
    pf_rows: usize,
    expanded: Option<&[u8]>,
) {
    let pf = MR >= pf_rows;
    let x: [XRow; MR] = std::array::from_fn(|i| rows[i]);
    let (n, r0) = (w.n_rows, t * TILE);
    let live = TILE.min(n - r0);
    let mut buf = [[0f32; TILE]; MR];
    // SAFETY: this thread alone writes columns r0..r0 + live of these rows (tiles split by
    // thread); a whole tile is stored in place, a partial one through `buf`.
    let dst: [*mut f32; MR] = std::array::from_fn(|i| match live == TILE {
        true => out.slice((m0 + i) * n + r0, TILE).as_mut_ptr(),
        false => buf[i].as_mut_ptr(),
    });
    let tile = w.tile(t);
    let nb = w.n_cols / w.format.block();
    for h in 0..TILE / A::LANES {
        let mut o: [*mut f32; MR] = std::array::from_fn(|i| dst[i].add(h * A::LANES));
        match w.format {
            Format::Q4_K => kernels::q4_k::<A, MR>(tile, nb, h, &x, &mut o, pf),
            Format::Q6_K => kernels::q6_k::<A, MR>(tile, nb, h, &x, &mut o, pf),
            Format::Q4_0 => {
                kernels::b32::<A, MR, false, false, false>(tile, nb, h, &x, 8, &mut o, pf)
            }
            Format::Q4_1 => {
                kernels::b32::<A, MR, false, true, false>(tile, nb, h, &x, 0, &mut o, pf)
            }
            Format::Q5_0 => {
                kernels::b32::<A, MR, true, false, false>(tile, nb, h, &x, 16, &mut o, pf)
            }
            Format::Q5_1 => {
                kernels::b32::<A, MR, true, true, false>(tile, nb, h, &x, 0, &mut o, pf)
            }
            Format::Q8_0 => {
                kernels::b32::<A, MR, false, false, true>(tile, nb, h, &x, A::Q8_BIAS, &mut o, pf)
            }
            Format::IQ4_NL => kernels::lut::<A, Iq4Nl, MR>(tile, nb, h, &x, &mut o, pf),
            Format::IQ4_XS => kernels::lut::<A, Iq4Xs, MR>(tile, nb, h, &x, &mut o, pf),
            Format::MXFP4 => kernels::lut::<A, Mxfp4, MR>(tile, nb, h, &x, &mut o, pf),
            Format::IQ2_XXS | Format::IQ3_XXS if expanded.is_some() => {
                let half = kernels::grid_expanded_bytes::<A>(nb);
                let e = expanded.expect("expanded").as_ptr().add(h * half);
                match w.format {
                    Format::IQ2_XXS => {
                        kernels::grid_expanded::<A, Iq2Xxs, MR>(tile, nb, h, &x, &mut o, e)
                    }
                    _ => kernels::grid_expanded::<A, Iq3Xxs, MR>(tile, nb, h, &x, &mut o, e),
                }
            }
            Format::IQ2_XXS => kernels::grid::<A, Iq2Xxs, MR>(tile, nb, h, &x, &mut o, pf),
            Format::IQ3_XXS => kernels::grid::<A, Iq3Xxs, MR>(tile, nb, h, &x, &mut o, pf),
        }
    }
    if live < TILE {
        for (i, vals) in buf.iter().enumerate() {
            out.slice((m0 + i) * n + r0, live)
                .copy_from_slice(&vals[..live]);
        }
    }
}

#[cfg(test)]
mod tests;
