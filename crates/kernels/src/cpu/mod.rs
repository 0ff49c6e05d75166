//! The CPU backend: buffers are host vectors, quantized matrices are repacked into the
//! tiled layout of the packed kernels (when the CPU has them) and the mapped pages they
//! came from released, ops run at once on a thread pool shared with other devices of the
//! same thread (a draft model's), so a step records nothing and `finish` has nothing to do.

mod encoder;
mod kv;
mod moe;
#[cfg(test)]
mod tests;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use device::host::HostBufs;
use device::hyper::{self, HyperSpec};
use device::math::all_finite;
use device::sparse::{SparseIo, SparseSpec};
use device::state::HostStates;
use device::{
    AttnSpec, BlockConv, Buf, Bytes, Cols, ConvSpec, DeltaIo, DeltaSpec, Device, Mat, MatOut,
    MatrixSource, MoeSpec, MoeStats, Op, Progress, Result, Role, RopeSpec, Row, ScanIo, ScanSpec,
    ScratchShape, Step,
};
use gguf::GgmlType;

pub use crate::features::CpuFeatures;

use crate::matmul::{matmul, matmul_many};
use crate::ops::{add_inplace, gelu_inplace, rms_norm, rms_norm_inplace, rope, rope_angles};
use crate::ops::{sigmoid, softmax_inplace, swiglu_inplace, swiglu_limited_inplace};
use crate::qmatmul::packed::PackedMatrix;
use crate::qmatrix::QMatrix;
use crate::ThreadPool;
use device::Precision;

/// A matrix on the CPU: its GGUF bytes (mapped) and, for the packed kernels, its tiles.
struct CpuMat {
    ty: GgmlType,
    bytes: Bytes,
    n_rows: usize,
    n_cols: usize,
    packed: Option<PackedMatrix>,
}

impl CpuMat {
    fn view(&self) -> QMatrix<'_> {
        QMatrix::new(self.ty, self.bytes.as_slice(), self.n_rows, self.n_cols)
            .expect("checked at upload")
            .with_packed(self.packed.as_ref())
    }
}

/// See the module doc.
pub struct Cpu {
    pool: Arc<ThreadPool>,
    precision: Precision,
    bufs: HostBufs,
    mats: Vec<CpuMat>,
    kv: Option<kv::KvStore>,
    states: Option<HostStates>,
    rows: Vec<Row>,
    /// [`Step::bidirectional`] of the step.
    bidirectional: Vec<usize>,
    tables: device::Tables,
    /// `[step rows, n_rot / 2]` RoPE angles of this step, for the spec whose `angle_key` is
    /// `angles_of`.
    angles: Vec<(f32, f32)>,
    angles_of: Option<[u32; 7]>,
    moe: moe::Routes,
}

/// Bytes a matrix of `ty` takes on the CPU once uploaded for `role`: its packed tiles
/// (64-byte aligned) when it has a packed layout and the CPU the packed kernels, else its
/// bytes in the map.
pub fn matrix_bytes(ty: GgmlType, n_rows: usize, n_cols: usize, role: Role) -> u64 {
    let mapped = ty.row_bytes(n_cols as u64).unwrap_or(0) * n_rows as u64;
    match (role, CpuFeatures::get().packed) {
        (Role::LazyRows, _) => 0,
        (Role::Multiply, Some(_)) => PackedMatrix::planned_bytes(ty, n_rows, n_cols)
            .map_or(mapped, |b| b.next_multiple_of(64) as u64),
        _ => mapped,
    }
}

/// Bytes the CPU backend's threads work in besides its buffers: per thread, a matmul tile
/// of dequantized weight rows and attention's scores over a sequence's positions for one
/// key-value head's queries.
pub fn scratch_bytes(s: &ScratchShape) -> u64 {
    let tile = crate::matmul::TILE_ROWS * s.widest;
    let attention = s.n_ctx * s.n_group + s.head_dim;
    (s.n_threads.max(1) * (tile + attention) * 4) as u64
}

impl Cpu {
    fn host_kv(&mut self) -> &mut device::host_kv::HostKv {
        self.kv.as_mut().expect("kv_alloc first").host()
    }

    /// A device computing on `pool` with activations treated as `precision` says.
    pub fn new(pool: Arc<ThreadPool>, precision: Precision) -> Cpu {
        Cpu {
            pool,
            precision,
            bufs: HostBufs::default(),
            mats: Vec::new(),
            kv: None,
            states: None,
            rows: Vec::new(),
            bidirectional: Vec::new(),
            tables: device::Tables::default(),
            angles: Vec::new(),
            angles_of: None,
            moe: moe::Routes::default(),
        }
    }

    fn mat(&self, m: Mat) -> QMatrix<'_> {
        self.mats[m.0 as usize].view()
    }

    /// Runs `f` on `a` (read) and `b` (written), two different buffers.
    fn with2(&mut self, a: Buf, b: Buf, f: impl FnOnce(&[f32], &mut [f32])) {
        assert_ne!(a, b, "one buffer read and written");
        let mut out = self.bufs.take(b);
        f(&self.bufs[a], &mut out);
        self.bufs.put(b, out);
    }
}

impl Device for Cpu {
    fn describe(&self) -> String {
        format!(
            "cpu ({}, {} threads)",
            CpuFeatures::get().describe(),
            self.pool.n_threads()
        )
    }

    fn supports(&self, _: Op) -> bool {
        true
    }

    fn supports_type(&self, ty: GgmlType) -> bool {
        crate::forms::form_name(ty).is_some()
    }

    fn matrix_bytes(&self, ty: GgmlType, n_rows: usize, n_cols: usize, role: Role) -> u64 {
        matrix_bytes(ty, n_rows, n_cols, role)
    }

    fn rest(&self) {
        self.pool.rest();
    }

    fn alloc(&mut self, len: usize) -> Result<Buf> {
        Ok(self.bufs.alloc(len))
    }

    fn upload(&mut self, buf: Buf, at: usize, data: &[f32]) {
        self.bufs.upload(buf, at, data);
    }

    fn download(&mut self, buf: Buf, at: usize, out: &mut [f32]) {
        self.bufs.download(buf, at, out);
    }

    /// Repacks the matrices with a packed layout, one thread per share of them (largest
    /// first), and releases the mapped pages each was copied from.
    fn upload_matrices(
        &mut self,
        srcs: &[MatrixSource],
        progress: &Progress<'_>,
    ) -> Result<Vec<Mat>> {
        for s in srcs {
            QMatrix::new(s.ty, s.bytes.as_slice(), s.n_rows, s.n_cols)?;
        }
        let packs = |s: &MatrixSource| {
            s.role == Role::Multiply
                && CpuFeatures::get().packed.is_some()
                && PackedMatrix::supports(s.ty)
        };
        let mut todo: Vec<usize> = (0..srcs.len()).filter(|&i| packs(&srcs[i])).collect();
        todo.sort_by_key(|&i| std::cmp::Reverse(srcs[i].bytes.as_slice().len()));
        let total: usize = todo.iter().map(|&i| srcs[i].bytes.as_slice().len()).sum();
        let n = std::thread::available_parallelism().map_or(1, |n| n.get());
        let done = AtomicUsize::new(0);
        let mut packed: Vec<Option<PackedMatrix>> = (0..srcs.len()).map(|_| None).collect();
        std::thread::scope(|scope| {
            let handles: Vec<_> = (0..n)
                .map(|t| {
                    let share: Vec<usize> = todo.iter().copied().skip(t).step_by(n).collect();
                    let done = &done;
                    scope.spawn(move || {
                        share
                            .into_iter()
                            .map(|i| {
                                let s = &srcs[i];
                                let w = QMatrix::new(s.ty, s.bytes.as_slice(), s.n_rows, s.n_cols)
                                    .expect("checked above");
                                let p = w.pack().expect("a packed type");
                                s.bytes.release();
                                let len = s.bytes.as_slice().len();
                                progress(done.fetch_add(len, Ordering::Relaxed) + len, total);
                                (i, p)
                            })
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            for h in handles {
                for (i, p) in h.join().expect("a packing thread panicked") {
                    packed[i] = Some(p);
                }
            }
        });
        let first = self.mats.len() as u32;
        for (s, p) in srcs.iter().zip(packed) {
            if s.role == Role::LazyRows {
                s.bytes.release();
            }
            self.mats.push(CpuMat {
                ty: s.ty,
                bytes: s.bytes.clone(),
                n_rows: s.n_rows,
                n_cols: s.n_cols,
                packed: p,
            });
        }
        Ok((first..self.mats.len() as u32).map(Mat).collect())
    }

    fn kv_alloc(&mut self, cfg: ::kv::KvConfig) -> Result<()> {
        self.states = cfg.state.map(HostStates::new);
        self.kv = Some(kv::KvStore::new(cfg)?);
        Ok(())
    }

    fn state_restore(&mut self, slot: u32, row: usize) {
        self.states
            .as_mut()
            .expect("state layers")
            .restore(slot, row);
    }

    fn state_save(&mut self, slot: u32, snap: u32) {
        self.states
            .as_mut()
            .expect("state layers")
            .snapshot(slot, snap, false);
    }

    fn state_load(&mut self, snap: u32, slot: u32) {
        self.states
            .as_mut()
            .expect("state layers")
            .snapshot(slot, snap, true);
    }

    fn state_read(&mut self, snap: u32, out: &mut Vec<u8>) {
        self.states.as_ref().expect("state layers").read(snap, out);
    }

    fn state_write(&mut self, snap: u32, data: &[u8]) {
        self.states
            .as_mut()
            .expect("state layers")
            .write(snap, data);
    }

    fn kv_copy_block(&mut self, from: u32, to: u32) {
        self.host_kv().copy_block(from, to);
    }

    fn kv_read_block(&mut self, block: u32, out: &mut Vec<u8>) {
        self.host_kv().read_block(false, block, out);
    }

    fn kv_write_block(&mut self, block: u32, data: &[u8]) {
        self.host_kv().write_block(false, block, data);
    }

    fn kv_read_companion(&mut self, companion: u32, out: &mut Vec<u8>) {
        self.host_kv().read_block(true, companion, out);
    }

    fn kv_write_companion(&mut self, companion: u32, data: &[u8]) {
        self.host_kv().write_block(true, companion, data);
    }

    fn begin(&mut self, step: &Step<'_>) {
        self.rows.clear();
        self.rows.extend_from_slice(step.rows);
        self.bidirectional.clear();
        self.bidirectional.extend_from_slice(step.bidirectional);
        self.tables.set(step);
        self.angles_of = None;
        if let Some(s) = &mut self.states {
            s.begin(step);
        }
    }

    /// One thread, the channels of a row together; SiLU as [`crate::ops::silu_inplace`].
    fn conv1d(&mut self, layer: usize, x: Buf, w: Buf, out: Buf, spec: &ConvSpec) {
        let n = self.rows.len() * spec.width;
        let states = self.states.as_mut().expect("state layers");
        let mut o = self.bufs.take(out);
        let x = &self.bufs[x][..n];
        let bias = spec.bias.map(|b| &self.bufs[b][..spec.width]);
        states.conv1d(
            layer,
            x,
            (&self.bufs[w], bias),
            &mut o,
            spec,
            crate::ops::silu_inplace,
        );
        self.bufs.put(out, o);
    }

    /// Each sequence's heads on the threads, each head's rows in order.
    fn delta_net(&mut self, layer: usize, io: &DeltaIo, spec: &DeltaSpec) {
        let isa = crate::features::Isa::detect();
        let (states, pool) = (self.states.as_mut().expect("state layers"), &self.pool);
        states.delta_net(
            layer,
            &mut self.bufs,
            io,
            spec,
            |row, k, q, decay, v, beta| crate::delta::row_step(isa, row, k, q, decay, v, beta),
            |n, f| pool.for_ranges(n, &|r| r.for_each(f)),
        );
    }

    /// Each sequence's heads on the threads, each head's rows in order.
    fn ssm_scan(&mut self, layer: usize, io: &ScanIo, spec: &ScanSpec) {
        let isa = crate::features::Isa::detect();
        let (states, pool) = (self.states.as_mut().expect("state layers"), &self.pool);
        let step = device::scan::row_step(|a, b| crate::dot::dot(isa, a, b));
        states.ssm_scan(layer, &mut self.bufs, io, spec, step, |n, f| {
            pool.for_ranges(n, &|r| r.for_each(f))
        });
    }

    fn finish(&mut self) {}

    fn embed(&mut self, table: Mat, tokens: &[u32], out: Buf) {
        let mut o = self.bufs.take(out);
        let t = self.mat(table);
        for (&tok, row) in tokens.iter().zip(o.chunks_exact_mut(t.n_cols)) {
            t.dequantize_row(tok as usize, row);
        }
        self.bufs.put(out, o);
    }

    fn rms_norm(&mut self, x: Buf, w: Buf, rows: usize, width: usize, eps: f32, out: Buf) {
        let n = rows * width;
        if x == out {
            let mut v = self.bufs.take(x);
            let wv = &self.bufs[w][..width];
            v[..n]
                .chunks_exact_mut(width)
                .for_each(|r| rms_norm_inplace(r, wv, eps));
            self.bufs.put(x, v);
            return;
        }
        let mut o = self.bufs.take(out);
        let (xs, wv) = (&self.bufs[x], &self.bufs[w][..width]);
        for (xr, or) in xs[..n].chunks_exact(width).zip(o.chunks_exact_mut(width)) {
            rms_norm(xr, wv, eps, or);
        }
        self.bufs.put(out, o);
    }

    fn matmul(&mut self, ws: &[Mat], x: Buf, rows: usize, outs: &[MatOut]) {
        let mut ys: Vec<Vec<f32>> = outs.iter().map(|o| self.bufs.take(o.y)).collect();
        {
            let views: Vec<QMatrix> = ws.iter().map(|&w| self.mat(w)).collect();
            let xs = &self.bufs[x][..rows * views[0].n_cols];
            let mut slices: Vec<&mut [f32]> = ys
                .iter_mut()
                .zip(&views)
                .map(|(y, w)| &mut y[..rows * w.n_rows])
                .collect();
            match &mut slices[..] {
                [one] => matmul(&self.pool, &views[0], xs, one, self.precision),
                many => matmul_many(&self.pool, &views, xs, many, self.precision),
            }
        }
        for ((o, y), &w) in outs.iter().zip(&mut ys).zip(ws) {
            let n = self.mats[w.0 as usize].n_rows;
            let y = &mut y[..rows * n];
            if let Some(b) = o.bias {
                let b = &self.bufs[b][..n];
                y.chunks_exact_mut(n).for_each(|r| add_inplace(r, b));
            }
            if let Some(res) = o.residual {
                add_inplace(&mut self.bufs[res][..rows * n], y);
            }
        }
        for (o, y) in outs.iter().zip(ys) {
            self.bufs.put(o.y, y);
        }
    }

    fn rope(&mut self, x: Buf, heads: usize, spec: &RopeSpec) {
        let half = spec.n_rot / 2;
        let key = spec.angle_key();
        if self.angles_of != Some(key) {
            self.angles.resize(self.rows.len() * half, (0.0, 0.0));
            for (row, cs) in self.rows.iter().zip(self.angles.chunks_exact_mut(half)) {
                rope_angles(row.pos, spec, cs);
            }
            self.angles_of = Some(key);
        }
        let width = heads * spec.head_dim;
        let xs = &mut self.bufs[x][..self.rows.len() * width];
        for (xr, cs) in xs
            .chunks_exact_mut(width)
            .zip(self.angles.chunks_exact(half))
        {
            rope(xr, spec.head_dim, spec.mode, cs);
        }
    }

    fn kv_store(&mut self, layer: usize, k: Buf, v: Buf) {
        let kv = self.kv.as_mut().expect("kv_alloc first");
        let (ks, vs) = (&self.bufs[k], &self.bufs[v]);
        kv.store(layer, &self.rows, &self.tables, ks, vs);
    }

    fn attention(&mut self, layer: usize, q: Buf, out: Buf, spec: &AttnSpec) {
        let mut o = self.bufs.take(out);
        let kv = self.kv.as_ref().expect("kv_alloc first");
        let qs = &self.bufs[q];
        kv.attend(
            &self.pool,
            layer,
            (&self.rows, &self.bidirectional),
            &self.tables,
            qs,
            &mut o,
            spec,
        );
        self.bufs.put(out, o);
    }

    fn swiglu(&mut self, gate: Buf, up: Buf, len: usize) {
        self.with2(up, gate, |u, g| swiglu_inplace(&mut g[..len], &u[..len]));
    }

    fn swiglu_limited(&mut self, gate: Buf, up: Buf, len: usize, limit: f32) {
        self.with2(up, gate, |u, g| {
            let mut u = u[..len].to_vec();
            swiglu_limited_inplace(&mut g[..len], &mut u, limit)
        });
    }

    /// The rows' attention on the threads, a row per task.
    fn sparse_attention(&mut self, layer: usize, io: &SparseIo, spec: &SparseSpec) {
        let kv = self.kv.as_mut().expect("kv_alloc first");
        let mut rec = kv.host().records(layer, &self.tables);
        let pool = &self.pool;
        let par = |n, f: &(dyn Fn(usize) + Sync)| pool.for_ranges(n, &|r| r.for_each(f));
        device::sparse::sparse_attention(&mut rec, &mut self.bufs, &self.rows, io, spec, par);
    }

    fn sparse_store(&mut self, layer: usize, io: &SparseIo, spec: &SparseSpec) {
        let kv = self.kv.as_mut().expect("kv_alloc first");
        let mut rec = kv.host().records(layer, &self.tables);
        device::sparse::sparse_store(&mut rec, &self.bufs, &self.rows, io, spec);
    }

    fn hyper_pre(&mut self, x: Buf, mix: Buf, base: Buf, out: Buf, rows: usize, s: &HyperSpec) {
        hyper::pre_rows(&mut self.bufs, [x, mix, base, out], rows, s);
    }

    fn hyper_post(&mut self, y: Buf, x: Buf, mix: Buf, rows: usize, s: &HyperSpec) {
        hyper::post_rows(&mut self.bufs, [y, x, mix], rows, s);
    }

    fn copy_cols(&mut self, x: Buf, out: Buf, rows: usize, c: &Cols) {
        self.bufs.copy_cols(x, out, rows, c);
    }

    fn block_conv(&mut self, x: Buf, coef: Buf, base: Buf, rows: usize, s: &BlockConv, out: Buf) {
        let places = device::block_places(&self.rows[..rows]);
        self.bufs.block_conv(x, coef, base, &places, s, out);
    }

    fn gelu(&mut self, gate: Buf, up: Buf, len: usize) {
        self.with2(up, gate, |u, g| gelu_inplace(&mut g[..len], &u[..len]));
    }

    fn add(&mut self, x: Buf, y: Buf, len: usize) {
        self.with2(y, x, |y, x| add_inplace(&mut x[..len], &y[..len]));
    }

    fn scale(&mut self, x: Buf, len: usize, factor: f32) {
        self.bufs[x][..len].iter_mut().for_each(|v| *v *= factor);
    }

    fn moe(&mut self, spec: &MoeSpec<'_>, x: Buf, rows: usize, hidden: Buf) {
        moe::block(self, spec, x, rows, hidden);
    }

    fn gather_rows(&mut self, x: Buf, rows: &[usize], width: usize, out: Buf) {
        self.with2(x, out, |x, o| {
            for (j, &r) in rows.iter().enumerate() {
                o[j * width..(j + 1) * width].copy_from_slice(&x[r * width..(r + 1) * width]);
            }
        });
    }

    fn all_finite(&mut self, x: Buf, rows: usize, width: usize) -> Vec<bool> {
        self.bufs[x][..rows * width]
            .chunks_exact(width)
            .map(all_finite)
            .collect()
    }

    fn argmax(&mut self, x: Buf, rows: usize, width: usize) -> Vec<u32> {
        self.bufs[x][..rows * width]
            .chunks_exact(width)
            .map(device::argmax)
            .collect()
    }

    /// [`softmax_inplace`] per row: its exp, the sum in f32 in index order.
    fn softmax_rows(&mut self, x: Buf, rows: usize, width: usize) {
        self.bufs[x][..rows * width]
            .chunks_exact_mut(width)
            .for_each(softmax_inplace);
    }

    fn top_k_rows(&mut self, x: Buf, rows: usize, width: usize, k: usize) -> Vec<(u32, f32)> {
        let mut out = Vec::with_capacity(rows * k);
        for row in self.bufs[x][..rows * width].chunks_exact(width) {
            device::top_k(row, k, &mut out);
        }
        out
    }

    fn sigmoid(&mut self, x: Buf, len: usize) {
        self.bufs[x][..len]
            .iter_mut()
            .for_each(|v| *v = sigmoid(*v));
    }

    fn relu_sqr(&mut self, x: Buf, len: usize) {
        self.bufs[x][..len]
            .iter_mut()
            .for_each(|v| *v = v.max(0.0) * v.max(0.0));
    }

    fn softplus(&mut self, x: Buf, len: usize) {
        self.bufs[x][..len].iter_mut().for_each(|v| {
            if *v <= 20.0 {
                *v = v.exp().ln_1p();
            }
        });
    }

    /// The sum of squares in f64 in index order, as ggml's.
    fn l2_norm_rows(&mut self, x: Buf, rows: usize, width: usize, eps: f32, out: Buf) {
        let norm = |r: &[f32]| {
            let sum: f64 = r.iter().map(|&v| (v * v) as f64).sum();
            1.0 / (sum.sqrt() as f32).max(eps)
        };
        let n = rows * width;
        if x == out {
            for r in self.bufs[x][..n].chunks_exact_mut(width) {
                let scale = norm(r);
                r.iter_mut().for_each(|v| *v *= scale);
            }
            return;
        }
        self.with2(x, out, |xs, o| {
            for (xr, or) in xs[..n].chunks_exact(width).zip(o.chunks_exact_mut(width)) {
                let scale = norm(xr);
                or.iter_mut().zip(xr).for_each(|(o, &v)| *o = v * scale);
            }
        });
    }

    fn mul(&mut self, x: Buf, y: Buf, len: usize) {
        self.with2(y, x, |y, x| {
            x[..len]
                .iter_mut()
                .zip(&y[..len])
                .for_each(|(a, &b)| *a *= b)
        });
    }

    fn moe_stats(&self) -> MoeStats {
        self.moe.stats
    }
}
