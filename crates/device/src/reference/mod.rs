//! The reference backend: every op written plainly in scalar code, one row at a time,
//! accumulating in f64. Weights stay as GGUF stores them and are dequantized row by row
//! when multiplied; activations stay f32 (no 8-bit quantization), so the reference is what
//! a backend's arithmetic approximates. Slow; for tests (the planner's and scheduler's, and
//! every backend checked against it op by op) and small models.

use gguf::GgmlType;
use kv::KvConfig;

use crate::formats::{dequantize_row, is_supported, quantize_kv};
use crate::host::HostBufs;
use crate::host_kv::HostKv;
use crate::hyper::{self, HyperSpec};
use crate::seam::*;
use crate::sparse::{self, SparseIo, SparseSpec};
use crate::state::HostStates;
use crate::{AttnSpec, Error, Result, ScanIo, ScanSpec};

mod scalar;

pub use scalar::route;
use scalar::{dot, gelu, hadamard, scaled, sigmoid, silu, softmax, swiglu_one};

/// A matrix as uploaded: the GGUF bytes, shared with the map.
struct RefMat {
    ty: GgmlType,
    bytes: Bytes,
    n_rows: usize,
    n_cols: usize,
}

impl RefMat {
    fn row(&self, i: usize, out: &mut [f32]) {
        let rb = self.bytes.as_slice().len() / self.n_rows;
        let row = &self.bytes.as_slice()[i * rb..(i + 1) * rb];
        dequantize_row(self.ty, row, out).expect("checked at upload");
    }
}

/// Bytes a matrix takes on the reference device: its GGUF bytes, which it keeps as they are.
pub fn matrix_bytes(ty: GgmlType, n_rows: usize, n_cols: usize) -> u64 {
    ty.row_bytes(n_cols as u64).unwrap_or(0) * n_rows as u64
}

/// See the module doc.
#[derive(Default)]
pub struct Reference {
    /// Ops and weight types it says it lacks ([`Reference::lacking`]).
    lacks: (Vec<Op>, Vec<GgmlType>),
    bufs: HostBufs,
    mats: Vec<RefMat>,
    kv: Option<HostKv>,
    states: Option<HostStates>,
    rows: Vec<Row>,
    /// [`crate::Step::bidirectional`] of the step.
    bidirectional: Vec<usize>,
    tables: Tables,
    stats: MoeStats,
}

impl Reference {
    pub fn new() -> Reference {
        Reference::default()
    }

    /// A reference device that says it lacks `ops` and `types`, as a backend with less
    /// would: for tests of what refuses a model such a backend cannot run.
    pub fn lacking(ops: &[Op], types: &[GgmlType]) -> Reference {
        Reference {
            lacks: (ops.to_vec(), types.to_vec()),
            ..Reference::default()
        }
    }

    fn host_kv(&mut self) -> &mut HostKv {
        self.kv.as_mut().expect("kv_alloc first")
    }

    fn buf(&self, b: Buf) -> &[f32] {
        &self.bufs[b]
    }

    /// `y[r] = W·x[r]` for `rows` rows, into a new vector.
    fn product(&self, w: Mat, x: &[f32], rows: usize) -> Vec<f32> {
        let m = &self.mats[w.0 as usize];
        let (k, n) = (m.n_cols, m.n_rows);
        let mut y = vec![0f32; rows * n];
        let mut wr = vec![0f32; k];
        for j in 0..n {
            m.row(j, &mut wr);
            for r in 0..rows {
                y[r * n + j] = dot(&x[r * k..(r + 1) * k], &wr);
            }
        }
        y
    }

    fn kv(&self) -> &HostKv {
        self.kv.as_ref().expect("kv_alloc before KV ops")
    }
}

impl Device for Reference {
    fn describe(&self) -> String {
        "reference (scalar f32)".into()
    }

    fn supports(&self, op: Op) -> bool {
        !self.lacks.0.contains(&op)
    }

    fn supports_type(&self, ty: GgmlType) -> bool {
        is_supported(ty) && !self.lacks.1.contains(&ty)
    }

    fn matrix_bytes(&self, ty: GgmlType, n_rows: usize, n_cols: usize, role: Role) -> u64 {
        match role {
            Role::LazyRows => 0,
            _ => matrix_bytes(ty, n_rows, n_cols),
        }
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

    fn upload_matrices(
        &mut self,
        srcs: &[MatrixSource],
        progress: &Progress<'_>,
    ) -> Result<Vec<Mat>> {
        let total: usize = srcs.iter().map(|s| s.bytes.as_slice().len()).sum();
        let mut done = 0;
        let mut out = Vec::with_capacity(srcs.len());
        for s in srcs {
            if !is_supported(s.ty) {
                return Err(Error::UnsupportedType(s.ty));
            }
            if s.role == Role::LazyRows {
                s.bytes.release();
            }
            self.mats.push(RefMat {
                ty: s.ty,
                bytes: s.bytes.clone(),
                n_rows: s.n_rows,
                n_cols: s.n_cols,
            });
            out.push(Mat(self.mats.len() as u32 - 1));
            done += s.bytes.as_slice().len();
            progress(done, total);
        }
        Ok(out)
    }

    fn kv_alloc(&mut self, cfg: KvConfig) -> Result<()> {
        if !crate::formats::is_quantize_supported(cfg.ty) {
            return Err(Error::UnsupportedType(cfg.ty));
        }
        self.states = cfg.state.map(HostStates::new);
        self.kv = Some(HostKv::new(cfg, |n| vec![0; n]));
        Ok(())
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

    fn begin(&mut self, step: &Step<'_>) {
        self.rows = step.rows.to_vec();
        self.bidirectional = step.bidirectional.to_vec();
        self.tables.set(step);
        if let Some(s) = &mut self.states {
            s.begin(step);
        }
    }

    fn finish(&mut self) {}

    fn embed(&mut self, table: Mat, tokens: &[u32], out: Buf) {
        let m = &self.mats[table.0 as usize];
        let e = m.n_cols;
        let mut o = self.bufs.take(out);
        for (i, &t) in tokens.iter().enumerate() {
            m.row(t as usize, &mut o[i * e..(i + 1) * e]);
        }
        self.bufs.put(out, o);
    }

    fn rms_norm(&mut self, x: Buf, w: Buf, rows: usize, width: usize, eps: f32, out: Buf) {
        let xs = self.buf(x)[..rows * width].to_vec();
        let wv = self.buf(w)[..width].to_vec();
        let o = &mut self.bufs[out];
        for (xr, or) in xs.chunks_exact(width).zip(o.chunks_exact_mut(width)) {
            let ms = xr.iter().map(|&v| v as f64 * v as f64).sum::<f64>() / width as f64;
            let scale = 1.0 / (ms + eps as f64).sqrt();
            for ((o, &v), &g) in or.iter_mut().zip(xr).zip(&wv) {
                *o = (v as f64 * scale * g as f64) as f32;
            }
        }
    }

    fn matmul(&mut self, ws: &[Mat], x: Buf, rows: usize, outs: &[MatOut]) {
        for (&w, o) in ws.iter().zip(outs) {
            let k = self.mats[w.0 as usize].n_cols;
            let mut y = self.product(w, &self.buf(x)[..rows * k], rows);
            let n = self.mats[w.0 as usize].n_rows;
            if let Some(b) = o.bias {
                let b = self.buf(b);
                y.iter_mut().enumerate().for_each(|(i, v)| *v += b[i % n]);
            }
            if let Some(res) = o.residual {
                let r = &mut self.bufs[res];
                r[..y.len()].iter_mut().zip(&y).for_each(|(a, &b)| *a += b);
            }
            self.bufs[o.y][..y.len()].copy_from_slice(&y);
        }
    }

    fn rope(&mut self, x: Buf, heads: usize, spec: &RopeSpec) {
        let hd = spec.head_dim;
        let half = spec.n_rot / 2;
        let rows = self.rows.clone();
        let xs = &mut self.bufs[x];
        for (r, row) in rows.iter().enumerate() {
            for h in 0..heads {
                let head = &mut xs[(r * heads + h) * hd..(r * heads + h + 1) * hd];
                for i in 0..half {
                    let extrap = row.pos as f64
                        * (spec.freq_base as f64).powf(-2.0 * i as f64 / spec.n_rot as f64);
                    let (theta, mscale) = scaled(extrap, i, &spec.scaling);
                    let (s, c) = theta.sin_cos();
                    let (s, c) = (s * mscale, c * mscale);
                    let (a, b) = match spec.mode {
                        RopeMode::Normal => (2 * i, 2 * i + 1),
                        RopeMode::Neox => (i, i + half),
                    };
                    let (x0, x1) = (head[a] as f64, head[b] as f64);
                    head[a] = (x0 * c - x1 * s) as f32;
                    head[b] = (x0 * s + x1 * c) as f32;
                }
            }
        }
    }

    fn conv1d(&mut self, layer: usize, x: Buf, w: Buf, out: Buf, spec: &ConvSpec) {
        let n = self.rows.len() * spec.width;
        let states = self.states.as_mut().expect("state layers");
        let mut o = self.bufs.take(out);
        let silu = |row: &mut [f32]| row.iter_mut().for_each(|y| *y /= 1.0 + (-*y).exp());
        let bias = spec.bias.map(|b| &self.bufs[b][..spec.width]);
        states.conv1d(
            layer,
            &self.bufs[x][..n],
            (&self.bufs[w], bias),
            &mut o,
            spec,
            silu,
        );
        self.bufs.put(out, o);
    }

    fn delta_net(&mut self, layer: usize, io: &DeltaIo, spec: &DeltaSpec) {
        let states = self.states.as_mut().expect("state layers");
        let step = crate::state::row_step(dot);
        states.delta_net(layer, &mut self.bufs, io, spec, step, |n, f| {
            (0..n).for_each(f)
        });
    }

    fn ssm_scan(&mut self, layer: usize, io: &ScanIo, spec: &ScanSpec) {
        let states = self.states.as_mut().expect("state layers");
        let step = crate::scan::row_step(dot);
        states.ssm_scan(layer, &mut self.bufs, io, spec, step, |n, f| {
            (0..n).for_each(f)
        });
    }

    fn sparse_attention(&mut self, layer: usize, io: &SparseIo, spec: &SparseSpec) {
        let kv = self.kv.as_mut().expect("kv_alloc first");
        let mut rec = kv.records(layer, &self.tables);
        let rows = &self.rows;
        sparse::sparse_attention(&mut rec, &mut self.bufs, rows, io, spec, |n, f| {
            (0..n).for_each(f)
        });
    }

    fn sparse_store(&mut self, layer: usize, io: &SparseIo, spec: &SparseSpec) {
        let kv = self.kv.as_mut().expect("kv_alloc first");
        let mut rec = kv.records(layer, &self.tables);
        sparse::sparse_store(&mut rec, &self.bufs, &self.rows, io, spec);
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
        let places = crate::block_places(&self.rows[..rows]);
        self.bufs.block_conv(x, coef, base, &places, s, out);
    }

    fn swiglu_limited(&mut self, gate: Buf, up: Buf, len: usize, limit: f32) {
        let u = self.bufs.take(up);
        let g = &mut self.bufs[gate];
        g[..len]
            .iter_mut()
            .zip(&u)
            .for_each(|(g, &u)| *g = swiglu_one(*g, u, Some(limit)));
        self.bufs.put(up, u);
    }

    fn kv_store(&mut self, layer: usize, k: Buf, v: Buf) {
        let kv = self.kv.as_ref().expect("kv_alloc first");
        let (pb, width) = (kv.cfg.position_bytes(), kv.cfg.n_head_kv * kv.cfg.head_dim);
        let ty = kv.cfg.ty;
        let places: Vec<usize> = self
            .rows
            .iter()
            .map(|r| kv.at(&self.tables.of(&kv.cfg, layer)[r.seq], r.pos))
            .collect();
        let (ks, vs) = (self.bufs.take(k), self.bufs.take(v));
        let kv = self.kv.as_mut().expect("kv_alloc first");
        let rotation = kv.cfg.rotation();
        for (r, &at) in places.iter().enumerate() {
            let row = r * width..(r + 1) * width;
            let (mut kr, mut vr) = (ks[row.clone()].to_vec(), vs[row].to_vec());
            if let Some(rot) = rotation {
                (kr, vr) = (hadamard(&kr, rot.keys), hadamard(&vr, rot.values));
            }
            quantize_kv(ty, &kr, &mut kv.keys[layer][at..at + pb]).expect("type");
            quantize_kv(ty, &vr, &mut kv.values[layer][at..at + pb]).expect("type");
        }
        self.bufs.put(k, ks);
        self.bufs.put(v, vs);
    }

    fn attention(&mut self, layer: usize, q: Buf, out: Buf, spec: &AttnSpec) {
        let (hd, nh, nkv) = (spec.head_dim, spec.n_head, spec.n_head_kv);
        let group = nh / nkv;
        let kv = self.kv();
        let rotation = kv.cfg.rotation();
        let mut o = vec![0f32; self.rows.len() * nh * hd];
        let (mut key, mut val) = (vec![0f32; nkv * hd], vec![0f32; nkv * hd]);
        let queries = &self.buf(q)[..self.rows.len() * nh * hd];
        let queries = match rotation {
            Some(rot) => hadamard(queries, rot.keys),
            None => queries.to_vec(),
        };
        let ends = spec.step_ends(&self.rows, &self.bidirectional);
        for (r, row) in self.rows.iter().enumerate() {
            let table = &self.tables.of(&kv.cfg, layer)[row.seq];
            let span = spec.span_of(*row, &ends);
            let mut scores = vec![vec![0f64; span.len()]; nh];
            for (i, p) in span.clone().enumerate() {
                kv.read(&kv.keys[layer], table, p, &mut key);
                for (h, s) in scores.iter_mut().enumerate() {
                    let qh = &queries[(r * nh + h) * hd..(r * nh + h + 1) * hd];
                    let kh = &key[(h / group) * hd..(h / group + 1) * hd];
                    s[i] = spec.scale as f64 * dot(qh, kh) as f64;
                }
            }
            for s in &mut scores {
                let max = s.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let sum: f64 = s.iter().map(|v| (v - max).exp()).sum();
                s.iter_mut().for_each(|v| *v = (*v - max).exp() / sum);
            }
            let mut acc = vec![0f64; nh * hd];
            for (i, p) in span.enumerate() {
                kv.read(&kv.values[layer], table, p, &mut val);
                for (h, s) in scores.iter().enumerate() {
                    let vh = &val[(h / group) * hd..(h / group + 1) * hd];
                    for (a, &v) in acc[h * hd..(h + 1) * hd].iter_mut().zip(vh) {
                        *a += s[i] * v as f64;
                    }
                }
            }
            for (dst, a) in o[r * nh * hd..(r + 1) * nh * hd].iter_mut().zip(acc) {
                *dst = a as f32;
            }
        }
        if let Some(rot) = rotation {
            o = hadamard(&o, rot.values);
        }
        self.bufs[out][..o.len()].copy_from_slice(&o);
    }

    fn swiglu(&mut self, gate: Buf, up: Buf, len: usize) {
        let u = self.bufs.take(up);
        let g = &mut self.bufs[gate];
        g[..len]
            .iter_mut()
            .zip(&u)
            .for_each(|(g, &u)| *g = silu(*g) * u);
        self.bufs.put(up, u);
    }

    fn gelu(&mut self, gate: Buf, up: Buf, len: usize) {
        let u = self.bufs.take(up);
        let g = &mut self.bufs[gate];
        g[..len]
            .iter_mut()
            .zip(&u)
            .for_each(|(g, &u)| *g = gelu(*g) * u);
        self.bufs.put(up, u);
    }

    fn add(&mut self, x: Buf, y: Buf, len: usize) {
        let ys = self.bufs.take(y);
        let xs = &mut self.bufs[x];
        xs[..len].iter_mut().zip(&ys).for_each(|(a, &b)| *a += b);
        self.bufs.put(y, ys);
    }

    fn scale(&mut self, x: Buf, len: usize, factor: f32) {
        self.bufs[x][..len].iter_mut().for_each(|v| *v *= factor);
    }

    fn moe(&mut self, spec: &MoeSpec<'_>, x: Buf, rows: usize, hidden: Buf) {
        let (e, ff) = (spec.n_embd, spec.n_ff_exp);
        let xs = self.buf(x)[..rows * e].to_vec();
        let logits = self.product(spec.router, &xs, rows);
        let ne = spec.routing.n_expert;
        let mut used = vec![false; ne];
        let mut add = vec![0f32; rows * e];
        for r in 0..rows {
            let xr = &xs[r * e..(r + 1) * e];
            let mut acc = vec![0f64; e];
            let bias = spec.choice_bias.map(|b| &self.buf(b)[..ne]);
            let given = spec
                .given
                .map(|g| &g[r * spec.routing.k..(r + 1) * spec.routing.k]);
            let row = &logits[r * ne..(r + 1) * ne];
            for (ex, w) in route(&spec.routing, row, bias, given) {
                used[ex] = true;
                let mut u = self.product(spec.up[ex], xr, 1);
                match spec.net {
                    ExpertNet::Swiglu => {
                        let g = self.product(spec.gate[ex], xr, 1);
                        u.iter_mut()
                            .zip(&g)
                            .for_each(|(u, &g)| *u = swiglu_one(g, *u, spec.limit));
                    }
                    ExpertNet::ReluSqr => u.iter_mut().for_each(|u| *u = u.max(0.0) * u.max(0.0)),
                }
                let y = self.product(spec.down[ex], &u[..ff], 1);
                acc.iter_mut()
                    .zip(&y)
                    .for_each(|(a, &v)| *a += v as f64 * w as f64);
            }
            if let Some(sh) = spec.shared {
                let g = sh
                    .gate
                    .map_or(1.0, |gw| sigmoid(dot(xr, &self.buf(gw)[..e])));
                let y = &self.buf(sh.out)[r * e..(r + 1) * e];
                acc.iter_mut()
                    .zip(y)
                    .for_each(|(a, &v)| *a += v as f64 * g as f64);
            }
            for (d, a) in add[r * e..(r + 1) * e].iter_mut().zip(acc) {
                *d = a as f32;
            }
        }
        self.stats.blocks += 1;
        self.stats.experts += used.iter().filter(|&&u| u).count() as u64;
        let h = &mut self.bufs[hidden];
        h[..rows * e]
            .iter_mut()
            .zip(&add)
            .for_each(|(a, &b)| *a += b);
    }

    fn gather_rows(&mut self, x: Buf, rows: &[usize], width: usize, out: Buf) {
        let xs = self.bufs.take(x);
        let o = &mut self.bufs[out];
        for (j, &r) in rows.iter().enumerate() {
            o[j * width..(j + 1) * width].copy_from_slice(&xs[r * width..(r + 1) * width]);
        }
        self.bufs.put(x, xs);
    }

    fn all_finite(&mut self, x: Buf, rows: usize, width: usize) -> Vec<bool> {
        self.buf(x)[..rows * width]
            .chunks_exact(width)
            .map(|r| r.iter().all(|v| v.is_finite()))
            .collect()
    }

    fn argmax(&mut self, x: Buf, rows: usize, width: usize) -> Vec<u32> {
        self.buf(x)[..rows * width]
            .chunks_exact(width)
            .map(crate::argmax)
            .collect()
    }

    fn softmax_rows(&mut self, x: Buf, rows: usize, width: usize) {
        self.bufs[x][..rows * width]
            .chunks_exact_mut(width)
            .for_each(softmax);
    }

    /// Every index of a row sorted by its value, then the first `k` taken.
    fn top_k_rows(&mut self, x: Buf, rows: usize, width: usize, k: usize) -> Vec<(u32, f32)> {
        let mut out = Vec::with_capacity(rows * k);
        for row in self.buf(x)[..rows * width].chunks_exact(width) {
            let key = |i: usize| match row[i] {
                v if v.is_nan() => f64::NEG_INFINITY,
                v => v as f64,
            };
            let mut order: Vec<usize> = (0..width).collect();
            let by_value = |a: usize, b: usize| key(b).partial_cmp(&key(a)).expect("no NaN");
            order.sort_by(|&a, &b| by_value(a, b).then(a.cmp(&b)));
            out.extend(order[..k].iter().map(|&i| (i as u32, row[i])));
        }
        out
    }

    fn sigmoid(&mut self, x: Buf, len: usize) {
        self.bufs[x][..len]
            .iter_mut()
            .for_each(|v| *v = sigmoid(*v));
    }

    fn softplus(&mut self, x: Buf, len: usize) {
        self.bufs[x][..len].iter_mut().for_each(|v| {
            if *v <= 20.0 {
                *v = (*v as f64).exp().ln_1p() as f32;
            }
        });
    }

    fn l2_norm_rows(&mut self, x: Buf, rows: usize, width: usize, eps: f32, out: Buf) {
        let xs = self.buf(x)[..rows * width].to_vec();
        let o = &mut self.bufs[out];
        for (xr, or) in xs.chunks_exact(width).zip(o.chunks_exact_mut(width)) {
            let norm = xr.iter().map(|&v| v as f64 * v as f64).sum::<f64>().sqrt();
            let scale = 1.0 / norm.max(eps as f64);
            for (o, &v) in or.iter_mut().zip(xr) {
                *o = (v as f64 * scale) as f32;
            }
        }
    }

    fn mul(&mut self, x: Buf, y: Buf, len: usize) {
        let ys = self.bufs.take(y);
        let xs = &mut self.bufs[x];
        xs[..len].iter_mut().zip(&ys).for_each(|(a, &b)| *a *= b);
        self.bufs.put(y, ys);
    }

    fn relu_sqr(&mut self, x: Buf, len: usize) {
        self.bufs[x][..len]
            .iter_mut()
            .for_each(|v| *v = v.max(0.0) * v.max(0.0));
    }

    fn moe_stats(&self) -> MoeStats {
        self.stats
    }
}

impl crate::encoder::EncoderDevice for Reference {
    fn layer_norm(
        &mut self,
        x: Buf,
        w: Buf,
        b: Buf,
        rows: usize,
        width: usize,
        eps: f32,
        out: Buf,
    ) {
        let xs = self.bufs[x][..rows * width].to_vec();
        let (ws, bs) = (self.buf(w)[..width].to_vec(), self.buf(b)[..width].to_vec());
        crate::encoder::layer_norm_rows(&xs, &ws, &bs, eps, &mut self.bufs[out][..rows * width]);
    }

    fn activate(&mut self, x: Buf, len: usize, act: crate::encoder::Act) {
        let f = match act {
            crate::encoder::Act::Gelu => gelu,
            crate::encoder::Act::GeluQuick => {
                |v: f32| (v as f64 / (1.0 + (-1.702 * v as f64).exp())) as f32
            }
        };
        self.bufs[x][..len].iter_mut().for_each(|v| *v = f(*v));
    }

    /// Scores, softmax and sums in f64.
    fn dense_attention(&mut self, io: &crate::encoder::DenseIo, spec: &crate::encoder::DenseSpec) {
        let (n, hd) = (spec.rows, spec.head_dim);
        let width = spec.heads * hd;
        let (q, k, v) = (self.buf(io.q), self.buf(io.k), self.buf(io.v));
        let mut out = vec![0f32; n * width];
        let mut scores = vec![0f64; n];
        for h in 0..spec.heads {
            for i in 0..n {
                let qi = &q[i * width + h * hd..][..hd];
                for (j, s) in scores.iter_mut().enumerate() {
                    let kj = &k[j * width + h * hd..][..hd];
                    let dot: f64 = qi.iter().zip(kj).map(|(&a, &b)| a as f64 * b as f64).sum();
                    *s = dot * spec.scale as f64;
                }
                let max = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                scores.iter_mut().for_each(|s| *s = (*s - max).exp());
                let sum: f64 = scores.iter().sum();
                for d in 0..hd {
                    let acc: f64 = (0..n)
                        .map(|j| scores[j] * v[j * width + h * hd + d] as f64)
                        .sum();
                    out[i * width + h * hd + d] = (acc / sum) as f32;
                }
            }
        }
        self.bufs[io.out][..n * width].copy_from_slice(&out);
    }

    fn avg_pool_2d(&mut self, x: Buf, out: Buf, spec: &crate::encoder::PoolSpec) {
        let xs = self.bufs.take(x);
        let n = spec.rows_out() * spec.width;
        crate::encoder::avg_pool_2d_rows(&xs, spec, &mut self.bufs[out][..n]);
        self.bufs.put(x, xs);
    }
}
