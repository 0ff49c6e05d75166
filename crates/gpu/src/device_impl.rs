//! [`Device`] for [`Gpu`]: each op records one or more dispatches (or copies); `finish`,
//! a read-back, or an upload submits them.

use device::hyper::HyperSpec;
use device::sparse::{SparseIo, SparseSpec};
use device::{
    AttnSpec, BlockConv, Buf, Cols, ConvSpec, DeltaIo, DeltaSpec, Device, Error, Mat, MatOut,
    MatrixSource, MoeSpec, MoeStats, Op, OpTime, Progress, Result, Role, RopeMode, RopeSpec,
    ScanIo, ScanSpec, Step,
};
use gguf::GgmlType;
use kv::KvConfig;

use crate::context::Bind::{Arena as A, Buf as B};
use crate::formats::Layout;
use crate::gpu::{grid, matrix_bytes, Gpu, GpuKv, GpuMat, Part, StepData, ATTENTION_PART};
use crate::pipelines::{kv_code, Kernel};
use crate::profile::Profiler;

impl Device for Gpu {
    fn describe(&self) -> String {
        let i = &self.ctx.info;
        format!("gpu ({}, {:?}, {:?})", i.name, i.backend, i.device_type)
    }

    /// Every op.
    fn supports(&self, _: Op) -> bool {
        true
    }

    fn supports_type(&self, ty: GgmlType) -> bool {
        Layout::of(ty).is_some()
    }

    /// None for a table left in the file.
    fn matrix_bytes(&self, ty: GgmlType, n_rows: usize, n_cols: usize, role: Role) -> u64 {
        match role {
            Role::LazyRows => 0,
            _ => matrix_bytes(ty, n_rows, n_cols),
        }
    }

    fn alloc(&mut self, len: usize) -> Result<Buf> {
        let bytes = len as u64 * 4;
        if bytes > self.ctx.max_binding() {
            return Err(self.unsupported(format!(
                "hold a buffer of {} MiB (it binds at most {} MiB): lower the batch or ubatch size",
                bytes >> 20,
                self.ctx.max_binding() >> 20
            )));
        }
        let buf = self
            .ctx
            .out_of_memory(|| self.ctx.buffer("activations", bytes))
            .map_err(|e| {
                self.unsupported(format!(
                    "hold {} MiB of activations ({e}): lower the batch or ubatch size",
                    bytes >> 20
                ))
            })?;
        self.bufs.push(buf);
        Ok(Buf(self.bufs.len() as u32 - 1))
    }

    fn upload(&mut self, buf: Buf, at: usize, data: &[f32]) {
        self.rec.flush(&self.ctx);
        let b = &self.bufs[buf.0 as usize];
        self.ctx
            .queue
            .write_buffer(b, at as u64 * 4, bytemuck::cast_slice(data));
    }

    fn download(&mut self, buf: Buf, at: usize, out: &mut [f32]) {
        out.copy_from_slice(&self.read_floats(buf, at, out.len()));
    }

    /// Copies each matrix's blocks padded to words, in parts of as many rows as one
    /// binding holds, and releases the mapped pages.
    fn upload_matrices(
        &mut self,
        srcs: &[MatrixSource],
        progress: &Progress<'_>,
    ) -> Result<Vec<Mat>> {
        let total: usize = srcs.iter().map(|s| s.bytes.as_slice().len()).sum();
        let mut done = 0;
        let mut out = Vec::with_capacity(srcs.len());
        for s in srcs {
            let layout = Layout::of(s.ty).ok_or(Error::UnsupportedType(s.ty))?;
            let expected = s.ty.row_bytes(s.n_cols as u64).unwrap_or(0) as usize * s.n_rows;
            if s.bytes.as_slice().len() != expected {
                return Err(Error::LengthMismatch {
                    what: "matrix bytes",
                    expected,
                    got: s.bytes.as_slice().len(),
                });
            }
            if s.role == Role::LazyRows {
                s.bytes.release();
                self.mats.push(GpuMat {
                    ty: s.ty,
                    n_rows: s.n_rows,
                    n_cols: s.n_cols,
                    row_bytes: s.ty.row_bytes(s.n_cols as u64).unwrap_or(0) as usize,
                    parts: Vec::new(),
                    lazy: Some(s.bytes.clone()),
                });
                out.push(Mat(self.mats.len() as u32 - 1));
                continue;
            }
            self.pipes
                .add_tables(&self.ctx, s.ty)
                .map_err(|e| self.unsupported(format!("hold the tables of {}: {e}", s.ty)))?;
            let row_bytes = layout.row_bytes(s.n_cols);
            let per_part = (self.ctx.max_binding() as usize / row_bytes).max(1);
            let mut parts = Vec::new();
            for row0 in (0..s.n_rows).step_by(per_part) {
                let n = per_part.min(s.n_rows - row0);
                let bytes = layout.repack(s.bytes.as_slice(), s.n_cols, row0..row0 + n);
                let buf = self.ctx.buffer_with(&s.name, &bytes).map_err(|e| {
                    self.unsupported(format!(
                        "hold the weights: {} at {} MiB of {} MiB ({e}): keep fewer blocks on it (-ngl)",
                        s.name,
                        done >> 20,
                        total >> 20
                    ))
                })?;
                parts.push(Part { buf, row0, n });
            }
            s.bytes.release();
            self.mats.push(GpuMat {
                ty: s.ty,
                n_rows: s.n_rows,
                n_cols: s.n_cols,
                row_bytes,
                parts,
                lazy: None,
            });
            out.push(Mat(self.mats.len() as u32 - 1));
            done += s.bytes.as_slice().len();
            progress(done, total);
        }
        Ok(out)
    }

    fn kv_alloc(&mut self, cfg: KvConfig) -> Result<()> {
        if kv_code(cfg.ty).is_none() {
            return Err(self.unsupported(format!(
                "keep a {} KV cache (f32, f16, bf16 or q8_0 here): use -ctk f16 or -ctk q8_0",
                cfg.ty
            )));
        }
        if let Some(bad) = crate::sparse::unpackable_records(&cfg) {
            return Err(self.unsupported(bad));
        }
        let width = cfg.n_head_kv * cfg.head_dim;
        if cfg.ty == GgmlType::Q8_0 && !width.is_multiple_of(64) {
            return Err(self.unsupported(format!(
                "keep a q8_0 KV cache of {width} elements per position (a multiple of 64 is \
                 needed): use -ctk f16"
            )));
        }
        let bytes =
            |l: usize, v: bool| cfg.store_blocks(l, v) as u64 * cfg.store_block_bytes(l, v) as u64;
        let stores = || (0..cfg.n_layer).flat_map(|l| [(l, false), (l, true)]);
        let largest = stores().map(|(l, v)| bytes(l, v)).max().unwrap_or(0);
        if largest > self.ctx.max_binding() {
            return Err(self.unsupported(format!(
                "hold a layer's KV of {} MiB (it binds at most {} MiB): lower the context size",
                largest >> 20,
                self.ctx.max_binding() >> 20
            )));
        }
        let block = stores()
            .map(|(l, v)| cfg.store_block_bytes(l, v) as u64)
            .max()
            .unwrap_or(0);
        let layer = |l: usize, v: bool| self.ctx.buffer("kv", bytes(l, v));
        let kv = self.ctx.out_of_memory(|| GpuKv {
            cfg: cfg.clone(),
            keys: (0..cfg.n_layer).map(|l| layer(l, false)).collect(),
            values: (0..cfg.n_layer).map(|l| layer(l, true)).collect(),
            tmp: self.ctx.buffer("kv block", block),
        });
        self.kv = Some(kv.map_err(|e| {
            self.unsupported(format!(
                "hold a KV cache of {} MiB ({e}): lower the context size (-c) or the slots (-np)",
                cfg.total_bytes() >> 20
            ))
        })?);
        self.states = self.states_alloc(&cfg)?;
        Ok(())
    }

    fn kv_copy_block(&mut self, from: u32, to: u32) {
        let kv = self.kv.as_ref().expect("kv_alloc first");
        let enc = self.rec.encoder(&self.ctx);
        for (store, bb) in kv.stores(false) {
            enc.copy_buffer_to_buffer(store, from as u64 * bb, &kv.tmp, 0, bb);
            enc.copy_buffer_to_buffer(&kv.tmp, 0, store, to as u64 * bb, bb);
        }
    }

    fn kv_read_block(&mut self, block: u32, out: &mut Vec<u8>) {
        self.kv_read(false, block, out);
    }

    fn kv_read_companion(&mut self, companion: u32, out: &mut Vec<u8>) {
        self.kv_read(true, companion, out);
    }

    fn kv_write_companion(&mut self, companion: u32, data: &[u8]) {
        self.kv_write(true, companion, data);
    }

    fn state_restore(&mut self, slot: u32, row: usize) {
        self.states_restore(slot, row);
    }

    fn state_save(&mut self, slot: u32, snap: u32) {
        self.states_snapshot(slot, snap, false);
    }

    fn state_load(&mut self, snap: u32, slot: u32) {
        self.states_snapshot(slot, snap, true);
    }

    fn state_read(&mut self, snap: u32, out: &mut Vec<u8>) {
        self.states_read(snap, out);
    }

    fn state_write(&mut self, snap: u32, data: &[u8]) {
        self.states_write(snap, data);
    }

    fn conv1d(&mut self, layer: usize, x: Buf, w: Buf, out: Buf, spec: &ConvSpec) {
        self.conv(layer, x, w, out, spec);
    }

    fn delta_net(&mut self, layer: usize, io: &DeltaIo, spec: &DeltaSpec) {
        self.delta(layer, io, spec);
    }

    fn ssm_scan(&mut self, layer: usize, io: &ScanIo, spec: &ScanSpec) {
        self.scan(layer, io, spec);
    }

    fn kv_write_block(&mut self, block: u32, data: &[u8]) {
        self.kv_write(false, block, data);
    }

    fn begin(&mut self, step: &Step<'_>) {
        self.rec.reset(&self.ctx);
        self.rows.clear();
        self.rows.extend_from_slice(step.rows);
        let mut w: Vec<u32> = step
            .rows
            .iter()
            .flat_map(|r| [r.pos as u32, r.seq as u32])
            .collect();
        let tables = |w: &mut Vec<u32>, ts: &[&[u32]]| -> u32 {
            let at = w.len();
            let mut next = at + ts.len();
            for t in ts {
                w.push(next as u32);
                next += t.len();
            }
            for t in ts {
                w.extend_from_slice(t);
            }
            at as u32
        };
        let tab_at = tables(&mut w, step.tables);
        let win_at = tables(&mut w, step.windowed);
        let last_at = w.len() as u32;
        let last = device::last_positions(step.rows);
        w.extend(last.iter().map(|&p| p as u32));
        let from_at = w.len() as u32;
        w.extend((0..last.len()).map(|s| {
            let from = step.bidirectional.get(s).copied();
            from.filter(|&f| f != device::NOT_BIDIRECTIONAL)
                .map_or(u32::MAX, |f| f as u32)
        }));
        w.push(0);
        let region = self.rec.push(&self.ctx, bytemuck::cast_slice(&w));
        self.step = Some(StepData {
            region,
            tab_at,
            win_at,
            last_at,
            from_at,
            bidirectional: step.bidirectional.to_vec(),
        });
        self.angles.clear();
        self.states_begin(step);
    }

    fn finish(&mut self) {
        self.rec.flush(&self.ctx);
    }

    fn embed(&mut self, table: Mat, tokens: &[u32], out: Buf) {
        if tokens.is_empty() {
            return;
        }
        if let Some(rows) = self.lazy_rows(table, tokens) {
            self.upload(out, 0, &rows);
            return;
        }
        let toks = self.rec.push(&self.ctx, bytemuck::cast_slice(tokens));
        let m = &self.mats[table.0 as usize];
        let (ty, k, row_bytes) = (m.ty, m.n_cols, m.row_bytes);
        let parts: Vec<_> = m
            .parts
            .iter()
            .map(|p| (p.buf.clone(), p.row0, p.n))
            .collect();
        let out = self.bufs[out.0 as usize].clone();
        let g = grid(tokens.len());
        for (buf, row0, n) in parts {
            let p = [tokens.len(), k, row_bytes, row0, n, g[0] as usize, 0, 0].map(|v| v as u32);
            let p = self.params(p);
            self.run(Kernel::Embed(ty), &[B(&buf), A(toks), B(&out), A(p)], g);
        }
    }

    fn rms_norm(&mut self, x: Buf, w: Buf, rows: usize, width: usize, eps: f32, out: Buf) {
        if rows == 0 {
            return;
        }
        let g = grid(rows);
        let p = self.params([rows as u32, width as u32, eps.to_bits(), g[0], 0, 0, 0, 0]);
        let [x, w, out] = [x, w, out].map(|b| self.bufs[b.0 as usize].clone());
        self.run(Kernel::RmsNorm, &[B(&x), B(&w), B(&out), A(p)], g);
    }

    fn matmul(&mut self, ws: &[Mat], x: Buf, rows: usize, outs: &[MatOut]) {
        for (&w, o) in ws.iter().zip(outs) {
            let y = o.residual.unwrap_or(o.y);
            let flags = o.bias.is_some() as u32 | (o.residual.is_some() as u32) << 1;
            self.matmul_rows(w, (x, 0), rows, (y, 0), o.bias, flags);
        }
    }

    fn rope(&mut self, x: Buf, heads: usize, spec: &RopeSpec) {
        let rows = self.rows.len();
        let half = spec.n_rot / 2;
        if rows == 0 || half == 0 {
            return;
        }
        let key = spec.angle_key();
        let cs = match self.angles.iter().find(|a| a.0 == key) {
            Some(&(_, r)) => r,
            None => {
                let mut cs = vec![(0f32, 0f32); rows * half];
                for (row, c) in self.rows.iter().zip(cs.chunks_exact_mut(half)) {
                    device::rope_angles(row.pos, spec, c);
                }
                let flat: Vec<f32> = cs.iter().flat_map(|&(c, s)| [c, s]).collect();
                let r = self.rec.push(&self.ctx, bytemuck::cast_slice(&flat));
                self.angles.push((key, r));
                r
            }
        };
        let g = grid((rows * heads * half).div_ceil(64));
        let neox = (spec.mode == RopeMode::Neox) as usize;
        let p = [rows, heads, spec.head_dim, half, neox, g[0] as usize, 0, 0];
        let p = self.params(p.map(|v| v as u32));
        let x = self.bufs[x.0 as usize].clone();
        self.run(Kernel::Rope, &[B(&x), A(cs), A(p)], g);
    }

    fn kv_store(&mut self, layer: usize, k: Buf, v: Buf) {
        let rows = self.rows.len();
        let kv = self.kv();
        let (cfg, kc, vc) = (
            kv.cfg.clone(),
            kv.keys[layer].clone(),
            kv.values[layer].clone(),
        );
        let width = cfg.n_head_kv * cfg.head_dim;
        if rows == 0 {
            return;
        }
        if let Some(rot) = cfg.rotation() {
            self.hadamard(k, rows * width, rot.keys);
            self.hadamard(v, rows * width, rot.values);
        }
        let st = self.step();
        let (region, tab) = (st.region, self.tables_at(&cfg, layer));
        let per_thread = if cfg.ty == GgmlType::Q8_0 { 64 } else { 2 };
        let g = grid((rows * width / per_thread).div_ceil(64));
        let p = self.params([rows as u32, width as u32, 0, tab, g[0], 0, 0, 0]);
        let [k, v] = [k, v].map(|b| self.bufs[b.0 as usize].clone());
        let binds = [B(&k), B(&v), B(&kc), B(&vc), A(region), A(p)];
        self.run(Kernel::KvStore { kv: cfg.ty }, &binds, g);
    }

    fn attention(&mut self, layer: usize, q: Buf, out: Buf, spec: &AttnSpec) {
        let rows = self.rows.len();
        if rows == 0 {
            return;
        }
        assert!(spec.head_dim <= 256, "head_dim {} over 256", spec.head_dim);
        let kv = self.kv();
        let (cfg, kc, vc) = (
            kv.cfg.clone(),
            kv.keys[layer].clone(),
            kv.values[layer].clone(),
        );
        let (region, tab) = (self.step().region, self.tables_at(&cfg, layer));
        let (last_at, from_at) = (self.step().last_at, self.step().from_at);
        let rotation = cfg.rotation();
        let len = rows * spec.n_head * spec.head_dim;
        if let Some(rot) = rotation {
            self.hadamard(q, len, rot.keys);
        }
        let ends = spec.step_ends(&self.rows, &self.step().bidirectional);
        let n_parts = self
            .rows
            .iter()
            .map(|&r| spec.span_of(r, &ends).end.div_ceil(ATTENTION_PART))
            .max();
        let n_parts = n_parts.unwrap_or(1);
        let row_floats = spec.n_head * n_parts * (spec.head_dim + 2);
        let per_group = (self.attention_parts_cap() / (row_floats * 4)).clamp(1, rows);
        let parts = self.attention_parts((per_group * row_floats * 4) as u64);
        let out_buf = out;
        let [q, out] = [q, out].map(|b| self.bufs[b.0 as usize].clone());
        let window = spec.window.unwrap_or(0) as u32;
        for row0 in (0..rows).step_by(per_group) {
            let n = per_group.min(rows - row0);
            let p = [
                spec.n_head as u32,
                spec.n_head_kv as u32,
                spec.head_dim as u32,
                spec.scale.to_bits(),
                window,
                0,
                tab,
                row0 as u32,
                n_parts as u32,
                spec.causal as u32,
                last_at,
                from_at,
            ];
            let p = self.rec.push(&self.ctx, bytemuck::cast_slice(&p));
            let binds = [B(&q), B(&parts), B(&kc), B(&vc), A(region), A(p)];
            let g = [spec.n_head as u32, n as u32, n_parts as u32];
            self.run(Kernel::Attention { kv: cfg.ty }, &binds, g);
            let binds = [B(&parts), B(&out), A(region), A(p)];
            let g = [spec.n_head as u32, n as u32, 1];
            self.run(Kernel::AttentionMerge, &binds, g);
        }
        if let Some(rot) = rotation {
            self.hadamard(out_buf, len, rot.values);
        }
    }

    fn swiglu(&mut self, gate: Buf, up: Buf, len: usize) {
        self.eltwise(Kernel::Swiglu, gate, up, len, 0.0);
    }

    fn gelu(&mut self, gate: Buf, up: Buf, len: usize) {
        self.eltwise(Kernel::Gelu, gate, up, len, 0.0);
    }

    fn add(&mut self, x: Buf, y: Buf, len: usize) {
        self.eltwise(Kernel::Add, x, y, len, 0.0);
    }

    fn scale(&mut self, x: Buf, len: usize, factor: f32) {
        self.eltwise(Kernel::Scale, x, x, len, factor);
    }

    fn moe(&mut self, spec: &MoeSpec<'_>, x: Buf, rows: usize, hidden: Buf) {
        self.mixture(spec, x, rows, hidden);
    }

    fn swiglu_limited(&mut self, gate: Buf, up: Buf, len: usize, limit: f32) {
        self.eltwise(Kernel::SwigluLimit, gate, up, len, limit);
    }

    fn sparse_attention(&mut self, layer: usize, io: &SparseIo, spec: &SparseSpec) {
        self.sparse(layer, io, spec);
    }

    fn sparse_store(&mut self, layer: usize, io: &SparseIo, spec: &SparseSpec) {
        self.sparse_rows(layer, io, spec);
    }

    fn hyper_pre(&mut self, x: Buf, mix: Buf, base: Buf, out: Buf, rows: usize, s: &HyperSpec) {
        self.hyper(Kernel::HyperWeights, [mix, base, mix], rows, s);
        self.hyper(Kernel::HyperPre, [out, x, mix], rows, s);
    }

    fn hyper_post(&mut self, y: Buf, x: Buf, mix: Buf, rows: usize, s: &HyperSpec) {
        self.hyper(Kernel::HyperPost, [x, y, mix], rows, s);
    }

    fn copy_cols(&mut self, x: Buf, out: Buf, rows: usize, c: &Cols) {
        let len = rows * c.width;
        if len == 0 {
            return;
        }
        let g = grid(len.div_ceil(64));
        let p = [rows, c.width, c.x_width, c.x_at, c.out_width, c.out_at]
            .map(|v| v as u32)
            .into_iter()
            .chain([g[0], 0])
            .collect::<Vec<u32>>();
        let p = self.rec.push(&self.ctx, bytemuck::cast_slice(&p));
        let [x, out] = [x, out].map(|b| self.buf(b));
        self.run(Kernel::CopyCols, &[B(&x), B(&out), A(p)], g);
    }

    fn block_conv(&mut self, x: Buf, coef: Buf, base: Buf, rows: usize, s: &BlockConv, out: Buf) {
        let len = rows * s.width;
        if len == 0 {
            return;
        }
        let g = grid(len.div_ceil(64));
        let mut p = [rows, s.width, s.k, s.group, s.side]
            .map(|v| v as u32)
            .to_vec();
        p.extend([g[0], 0, 0]);
        p.extend(device::block_places(&self.rows[..rows]));
        let p = self.rec.push(&self.ctx, bytemuck::cast_slice(&p));
        let [x, coef, base, out] = [x, coef, base, out].map(|b| self.buf(b));
        self.run(
            Kernel::BlockConv,
            &[B(&x), B(&coef), B(&base), B(&out), A(p)],
            g,
        );
    }

    fn gather_rows(&mut self, x: Buf, rows: &[usize], width: usize, out: Buf) {
        let len = rows.len() * width;
        if len == 0 {
            return;
        }
        let g = grid(len.div_ceil(64));
        let mut p = vec![rows.len() as u32, width as u32, g[0], 0];
        p.extend(rows.iter().map(|&r| r as u32));
        let p = self.rec.push(&self.ctx, bytemuck::cast_slice(&p));
        let [x, out] = [x, out].map(|b| self.buf(b));
        self.run(Kernel::GatherRows, &[B(&x), B(&out), A(p)], g);
    }

    fn all_finite(&mut self, x: Buf, rows: usize, width: usize) -> Vec<bool> {
        let v = self.read_floats(x, 0, rows * width);
        v.chunks_exact(width.max(1))
            .map(|r| r.iter().all(|v| v.is_finite()))
            .collect()
    }

    fn argmax(&mut self, x: Buf, rows: usize, width: usize) -> Vec<u32> {
        let v = self.read_floats(x, 0, rows * width);
        v.chunks_exact(width.max(1)).map(device::argmax).collect()
    }

    fn softmax_rows(&mut self, x: Buf, rows: usize, width: usize) {
        self.row_op(Kernel::SoftmaxRows, (x, rows, width), 0.0, None);
    }

    /// Reads the rows back and selects on the host, as `argmax` does.
    fn top_k_rows(&mut self, x: Buf, rows: usize, width: usize, k: usize) -> Vec<(u32, f32)> {
        let v = self.read_floats(x, 0, rows * width);
        let mut out = Vec::with_capacity(rows * k);
        for row in v.chunks_exact(width.max(1)) {
            device::top_k(row, k, &mut out);
        }
        out
    }

    fn sigmoid(&mut self, x: Buf, len: usize) {
        self.eltwise(Kernel::Sigmoid, x, x, len, 0.0);
    }

    fn softplus(&mut self, x: Buf, len: usize) {
        self.eltwise(Kernel::Softplus, x, x, len, 0.0);
    }

    fn relu_sqr(&mut self, x: Buf, len: usize) {
        self.eltwise(Kernel::ReluSqr, x, x, len, 0.0);
    }

    fn l2_norm_rows(&mut self, x: Buf, rows: usize, width: usize, eps: f32, out: Buf) {
        self.row_op(Kernel::L2NormRows, (x, rows, width), eps, Some(out));
    }

    fn mul(&mut self, x: Buf, y: Buf, len: usize) {
        self.eltwise(Kernel::Mul, x, y, len, 0.0);
    }

    fn moe_stats(&self) -> MoeStats {
        self.moe_stats
    }

    fn profile_ops(&mut self, on: bool) -> bool {
        self.rec.flush(&self.ctx);
        self.rec.profiler = match on {
            true => Profiler::new(&self.ctx),
            false => None,
        };
        self.rec.profiler.is_some()
    }

    fn op_times(&mut self) -> Vec<OpTime> {
        self.rec.flush(&self.ctx);
        self.rec
            .profiler
            .as_mut()
            .map_or(Vec::new(), Profiler::take)
    }

    fn read_bandwidth(&mut self) -> Option<f64> {
        Some(self.probe_bandwidth())
    }
}
