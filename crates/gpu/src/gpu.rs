use device::hyper::HyperSpec;
use device::{Buf, Device, Error, Mat, MoeStats, Row};
use gguf::GgmlType;
use kv::KvConfig;

use crate::context::{Bind, Choice, Ctx, Recorder, Region};
use crate::formats::Layout;
use crate::pipelines::{Kernel, MatmulShape, Pipelines};

/// A run of a matrix's rows in one buffer (a matrix larger than one binding is split).
pub(crate) struct Part {
    pub(crate) buf: wgpu::Buffer,
    pub(crate) row0: usize,
    pub(crate) n: usize,
}

pub(crate) struct GpuMat {
    pub(crate) ty: GgmlType,
    pub(crate) n_rows: usize,
    pub(crate) n_cols: usize,
    pub(crate) row_bytes: usize,
    pub(crate) parts: Vec<Part>,
    /// A table left in the file ([`device::Role::LazyRows`]): no parts; its rows are read
    /// from the map and dequantized here as a step embeds them.
    pub(crate) lazy: Option<device::Bytes>,
}

/// KV storage: per layer one buffer of keys and one of values, `[its class's blocks, 16,
/// n_head_kv · head_dim]` of the pool's type (f32, f16, bf16 or q8_0, as GGUF lays them out);
/// a record layer's keys its recent parts (f32), its values its kept parts
/// ([`KvConfig::store_position_bytes`]).
pub(crate) struct GpuKv {
    pub(crate) cfg: KvConfig,
    pub(crate) keys: Vec<wgpu::Buffer>,
    pub(crate) values: Vec<wgpu::Buffer>,
    /// The largest block of any store, for copies between blocks of one buffer.
    pub(crate) tmp: wgpu::Buffer,
}

impl GpuKv {
    /// The stores that keep every position (`windowed` false: [`device::Device::kv_read_block`]'s
    /// layout) or the windowed class's (true: [`device::Device::kv_read_companion`]'s): keys,
    /// then values, each with the bytes of one of its blocks.
    pub(crate) fn stores(&self, windowed: bool) -> Vec<(&wgpu::Buffer, u64)> {
        let cfg = &self.cfg;
        let kept = |l: &usize, v: bool| match windowed {
            false => cfg.store_is_full(*l, v),
            true => cfg.store_is_windowed(*l, v),
        };
        let bb = |l: usize, v: bool| cfg.store_block_bytes(l, v) as u64;
        let keys = (0..cfg.n_layer)
            .filter(|l| kept(l, false))
            .map(|l| (&self.keys[l], bb(l, false)));
        let values = (0..cfg.n_layer)
            .filter(|l| kept(l, true))
            .map(|l| (&self.values[l], bb(l, true)));
        keys.chain(values).collect()
    }
}

/// Where this step's rows and tables sit in the arena (word offsets inside `region`):
/// row `r` at `2r` (pos, seq), then the tables of every layer, then the windowed ones.
pub(crate) struct StepData {
    pub(crate) region: Region,
    pub(crate) tab_at: u32,
    pub(crate) win_at: u32,
    /// Where the step holds each sequence's last position ([`device::last_positions`]).
    pub(crate) last_at: u32,
    /// Where it holds each sequence's first bidirectional position
    /// ([`device::Step::bidirectional`]; `u32::MAX` for none), after the last positions.
    pub(crate) from_at: u32,
    /// [`device::Step::bidirectional`] of the step.
    pub(crate) bidirectional: Vec<usize>,
}

/// See the crate doc.
pub struct Gpu {
    pub(crate) ctx: Ctx,
    pub(crate) rec: Recorder,
    pub(crate) pipes: Pipelines,
    pub(crate) bufs: Vec<wgpu::Buffer>,
    pub(crate) mats: Vec<GpuMat>,
    pub(crate) kv: Option<GpuKv>,
    /// The recurrent states of the pool's state layers.
    pub(crate) states: Option<crate::recurrent::GpuStates>,
    pub(crate) rows: Vec<Row>,
    pub(crate) step: Option<StepData>,
    /// This step's RoPE angles per `RopeSpec::angle_key`.
    pub(crate) angles: Vec<([u32; 7], Region)>,
    /// Bound where a kernel's optional input is absent.
    pub(crate) dummy: wgpu::Buffer,
    pub(crate) moe_stats: MoeStats,
    /// Attention's parts (see attention.wgsl), grown as a step needs up to
    /// `attn_parts_cap` bytes.
    attn_parts: Option<wgpu::Buffer>,
    attn_parts_cap: u64,
    /// The lightning indexer's scores (see sparse_scores.wgsl), grown as a step needs.
    pub(crate) scores: Option<wgpu::Buffer>,
}

/// Positions one attention workgroup takes (`PART` of the attention shaders).
pub(crate) const ATTENTION_PART: usize = 128;
/// The most bytes attention's parts take: rows beyond it are dispatched in groups.
const ATTENTION_PARTS_BYTES: u64 = 64 << 20;

/// Rows a matmul workgroup takes for 1 to 8 rows (decode, verification), each weight read
/// once for them all.
pub(crate) const DECODE_ROWS: usize = 8;
/// Rows a matmul workgroup takes for more (prompt chunks): each weight chunk dequantized
/// once for as many rows.
const PROMPT_ROWS: usize = 32;

/// Loop iterations one invocation may run on llvmpipe (Mesa's lavapipe), all its loops
/// together, each entry of a loop counting one more (its exit test): past them every loop
/// stops after its first iteration, silently. Kernels whose loops grow with their input
/// keep a thread's iterations within it.
pub(crate) const LOOP_BUDGET: usize = 65_535;

/// A matmul thread's loop iterations per 32-element chunk it takes, at most: the chunk
/// loop's own, the row loop's over a prompt group, and the most a type's `deq` runs (57,
/// an IQ type's).
const MATMUL_LOOPS_PER_CHUNK: usize = 1 + (PROMPT_ROWS + 1) + 64;

/// A dispatch grid of `n` workgroups: `[x, y, 1]` with `x · y >= n`, `x` at most 65535.
pub(crate) fn grid(n: usize) -> [u32; 3] {
    let x = n.clamp(1, 65535);
    [x as u32, n.div_ceil(x).max(1) as u32, 1]
}

/// Bytes a matrix of `ty` takes on the GPU: its blocks padded to words.
pub fn matrix_bytes(ty: GgmlType, n_rows: usize, n_cols: usize) -> u64 {
    Layout::of(ty).map_or(0, |l| (l.row_bytes(n_cols) * n_rows) as u64)
}

/// Bytes the GPU backend works in besides its buffers: attention's per-part partials, at
/// most [`ATTENTION_PARTS_BYTES`] (rows beyond are dispatched in groups).
pub fn scratch_bytes(_: &device::ScratchShape) -> u64 {
    ATTENTION_PARTS_BYTES
}

impl Gpu {
    /// A device on the best adapter `choice` allows.
    pub fn open(choice: Choice) -> std::result::Result<Gpu, String> {
        let ctx = Ctx::open(choice)?;
        let rec = Recorder::new(&ctx);
        let dummy = ctx.buffer("dummy", 16);
        let threads = MatmulShape::threads_for(ctx.info.device_type);
        let mut gpu = Gpu {
            pipes: Pipelines::new(threads, None),
            ctx,
            rec,
            bufs: Vec::new(),
            mats: Vec::new(),
            kv: None,
            states: None,
            rows: Vec::new(),
            step: None,
            angles: Vec::new(),
            dummy,
            moe_stats: MoeStats::default(),
            attn_parts: None,
            attn_parts_cap: ATTENTION_PARTS_BYTES,
            scores: None,
        };
        let subgroups = gpu.ctx.device.features().contains(wgpu::Features::SUBGROUP);
        if subgroups && gpu.lanes_in_order() {
            gpu.ctx.subgroup_min = Some(gpu.ctx.info.subgroup_min_size);
            gpu.pipes = Pipelines::new(threads, gpu.ctx.subgroup_min);
        }
        Ok(gpu)
    }

    /// Whether every invocation `t` of a 64-wide workgroup is lane `t % size` of its
    /// subgroup (what the matmul's subgroup reduction assumes), from one small dispatch.
    fn lanes_in_order(&mut self) -> bool {
        let out = self.ctx.buffer("lanes", 256);
        self.run(Kernel::Lanes, &[Bind::Buf(&out)], [1, 1, 1]);
        let mut bytes = Vec::new();
        self.rec.read(&self.ctx, &[(&out, 0, 256)], &mut bytes);
        bytes.chunks_exact(4).all(|w| w == [1, 0, 0, 0])
    }

    /// The device with `t` threads sharing each matmul output column (a power of two up
    /// to 64) instead of its adapter's choice, their partials summed by subgroup shuffles
    /// where `subgroups` and the device allow, else in workgroup memory: the bits of a row
    /// depend on nothing but the row and `t`. For tests of the other adapters' kernel shape.
    pub fn with_matmul_threads(mut self, t: u32, subgroups: bool) -> Self {
        let lanes = self.ctx.subgroup_min.filter(|_| subgroups);
        self.pipes = Pipelines::new(t, lanes);
        self
    }

    /// Threads sharing a matmul output column for rows of `k` elements: the adapter's
    /// choice, doubled while a thread's chunks (and its group's writes and reduction beside
    /// them) would run past [`LOOP_BUDGET`]. It depends on the matrix alone, so a row's bits
    /// still do not depend on its batch.
    pub(crate) fn matmul_threads(&self, k: usize) -> u32 {
        let loops = |t: u32| {
            k.div_ceil(32).div_ceil(t as usize) * MATMUL_LOOPS_PER_CHUNK + 16 * PROMPT_ROWS
        };
        let mut t = self.pipes.matmul_shape().threads;
        while t < 64 && loops(t) > LOOP_BUDGET {
            t *= 2;
        }
        t
    }

    /// Threads per matmul column, and whether their sums meet by subgroup shuffles.
    pub fn matmul_shape(&self) -> (u32, bool) {
        let s = self.pipes.matmul_shape();
        (s.threads, s.subgroups)
    }

    pub(crate) fn unsupported(&self, what: String) -> Error {
        Error::Unsupported {
            device: self.describe(),
            what,
        }
    }

    /// The buffer behind `b`.
    pub(crate) fn buf(&self, b: Buf) -> wgpu::Buffer {
        self.bufs[b.0 as usize].clone()
    }

    pub(crate) fn params(&mut self, p: [u32; 8]) -> Region {
        self.rec.push(&self.ctx, bytemuck::cast_slice(&p))
    }

    /// `y[y0 + r] (+)= W · x[x0 + r] (+ bias)` for `rows` rows (`flags` as the kernel's).
    pub(crate) fn matmul_rows(
        &mut self,
        w: Mat,
        (x, x0): (Buf, usize),
        rows: usize,
        (y, y0): (Buf, usize),
        bias: Option<Buf>,
        flags: u32,
    ) {
        if rows == 0 {
            return;
        }
        let [xb, y] = [x, y].map(|b| self.buf(b));
        let bias = bias.map_or(self.dummy.clone(), |b| self.buf(b));
        let m = &self.mats[w.0 as usize];
        let (ty, k, n_rows, row_bytes) = (m.ty, m.n_cols, m.n_rows, m.row_bytes);
        let parts: Vec<_> = m
            .parts
            .iter()
            .map(|p| (p.buf.clone(), p.row0, p.n))
            .collect();
        let threads = self.matmul_threads(k);
        let cols = (64 / threads) as usize;
        let per_group = if rows > DECODE_ROWS {
            PROMPT_ROWS
        } else {
            DECODE_ROWS
        };
        for (buf, row0, n) in parts {
            let mut g = grid(n.div_ceil(cols));
            g[2] = rows.div_ceil(per_group) as u32;
            let p = [
                n,
                k,
                rows,
                row_bytes,
                row0,
                n_rows,
                g[0] as usize,
                flags as usize,
                x0,
                y0,
            ];
            let p: Vec<u32> = p.iter().map(|&v| v as u32).chain([0, 0]).collect();
            let p = self.rec.push(&self.ctx, bytemuck::cast_slice(&p));
            let bytes = (n * row_bytes * rows.div_ceil(per_group)) as u64;
            self.run_streaming(
                Kernel::MatMul {
                    ty,
                    rows: per_group as u32,
                    threads,
                },
                &[
                    Bind::Buf(&buf),
                    Bind::Buf(&xb),
                    Bind::Buf(&y),
                    Bind::Buf(&bias),
                    Bind::Arena(p),
                ],
                g,
                bytes,
            );
        }
    }

    pub(crate) fn step(&self) -> &StepData {
        self.step.as_ref().expect("begin before ops")
    }

    /// Records `kernel` over `groups`, binding `i` bound to `binds[i]` (and its weight
    /// type's tables, where it has some, to group 1).
    pub(crate) fn run(&mut self, kernel: Kernel, binds: &[Bind<'_>], groups: [u32; 3]) {
        self.run_streaming(kernel, binds, groups, 0);
    }

    /// [`Gpu::run`] of a kernel that streams `bytes` of weights (for the op times).
    pub(crate) fn run_streaming(
        &mut self,
        kernel: Kernel,
        binds: &[Bind<'_>],
        groups: [u32; 3],
        bytes: u64,
    ) {
        let pipe = self.pipes.get(&self.ctx, kernel);
        let tables = self.pipes.tables(kernel);
        self.rec
            .dispatch(&self.ctx, &pipe, (binds, tables), groups, (&kernel, bytes));
    }

    /// The rows `tokens` of `table` dequantized from the file, where it is a table left
    /// there ([`GpuMat::lazy`]).
    pub(crate) fn lazy_rows(&self, table: Mat, tokens: &[u32]) -> Option<Vec<f32>> {
        let m = &self.mats[table.0 as usize];
        let bytes = m.lazy.as_ref()?.as_slice();
        let mut rows = vec![0f32; tokens.len() * m.n_cols];
        for (&t, row) in tokens.iter().zip(rows.chunks_exact_mut(m.n_cols)) {
            let at = t as usize * m.row_bytes;
            device::formats::dequantize_row(m.ty, &bytes[at..at + m.row_bytes], row)
                .expect("a type the GPU holds");
        }
        Some(rows)
    }

    /// Where the tables of KV layer `layer`'s keys' (`values` false) or values' store start
    /// in the step's words.
    pub(crate) fn store_tables_at(&self, cfg: &KvConfig, layer: usize, values: bool) -> u32 {
        let st = self.step();
        match cfg.store_is_windowed(layer, values) {
            true => st.win_at,
            false => st.tab_at,
        }
    }

    /// Where the tables KV layer `layer` uses start in the step's words.
    pub(crate) fn tables_at(&self, cfg: &KvConfig, layer: usize) -> u32 {
        let st = self.step();
        if cfg.is_windowed(layer) {
            st.win_at
        } else {
            st.tab_at
        }
    }

    /// `x`'s first `len` values under a quantized pool's rotation ([`kv::Rotation`]) over
    /// blocks of `n`, in place.
    pub(crate) fn hadamard(&mut self, x: Buf, len: usize, n: usize) {
        let blocks = len / n;
        if blocks == 0 {
            return;
        }
        let g = grid(blocks.div_ceil(64));
        let scale = 1.0 / (n as f32).sqrt();
        let p = self.params([blocks as u32, n as u32, scale.to_bits(), g[0], 0, 0, 0, 0]);
        let x = self.bufs[x.0 as usize].clone();
        self.run(Kernel::Hadamard, &[Bind::Buf(&x), Bind::Arena(p)], g);
    }

    pub(crate) fn eltwise(&mut self, kernel: Kernel, a: Buf, b: Buf, len: usize, factor: f32) {
        if len == 0 {
            return;
        }
        let g = grid(len.div_ceil(64));
        let p = self.params([len as u32, factor.to_bits(), g[0], 0, 0, 0, 0, 0]);
        let (a, b) = (
            self.bufs[a.0 as usize].clone(),
            self.bufs[b.0 as usize].clone(),
        );
        if matches!(
            kernel,
            Kernel::Scale
                | Kernel::Sigmoid
                | Kernel::Softplus
                | Kernel::ReluSqr
                | Kernel::GeluAlone
                | Kernel::GeluQuick
        ) {
            self.run(kernel, &[Bind::Buf(&a), Bind::Arena(p)], g);
        } else {
            self.run(kernel, &[Bind::Buf(&a), Bind::Arena(p), Bind::Buf(&b)], g);
        }
    }

    /// A kernel of hyper.wgsl over `rows` rows: `a` written, `b` and `c` read (bindings 0, 2
    /// and 3; [`Kernel::HyperWeights`] reads no `c`), one thread a row for the weights, one
    /// a column of a row otherwise.
    pub(crate) fn hyper(
        &mut self,
        kernel: Kernel,
        [a, b, c]: [Buf; 3],
        rows: usize,
        s: &HyperSpec,
    ) {
        assert!(
            s.streams <= 16,
            "{} residual streams: the GPU mixes at most 16",
            s.streams
        );
        let threads = match kernel {
            Kernel::HyperWeights => rows,
            _ => rows * s.width,
        };
        if threads == 0 {
            return;
        }
        let g = grid(threads.div_ceil(64));
        let words = [
            rows as u32,
            s.streams as u32,
            s.width as u32,
            s.mix_width() as u32,
            s.sinkhorn_iters as u32,
            s.merge as u32,
            g[0],
            s.eps.to_bits(),
            s.scale[0].to_bits(),
            s.scale[1].to_bits(),
            s.scale[2].to_bits(),
            0,
        ];
        let p = self.rec.push(&self.ctx, bytemuck::cast_slice(&words));
        let [a, b, c] = [a, b, c].map(|x| self.buf(x));
        let binds = [Bind::Buf(&a), Bind::Arena(p), Bind::Buf(&b), Bind::Buf(&c)];
        let n = if kernel == Kernel::HyperWeights { 3 } else { 4 };
        self.run(kernel, &binds[..n], g);
    }

    /// A row reduction of rows.wgsl over `rows` rows of `width`: in place on `x`, or into
    /// `out` where the kernel writes one.
    pub(crate) fn row_op(
        &mut self,
        kernel: Kernel,
        (x, rows, width): (Buf, usize, usize),
        eps: f32,
        out: Option<Buf>,
    ) {
        if rows == 0 {
            return;
        }
        let g = grid(rows);
        let p = self.params([rows as u32, width as u32, eps.to_bits(), g[0], 0, 0, 0, 0]);
        let x = self.buf(x);
        match out.map(|o| self.buf(o)) {
            Some(o) => self.run(kernel, &[Bind::Buf(&x), Bind::Arena(p), Bind::Buf(&o)], g),
            None => self.run(kernel, &[Bind::Buf(&x), Bind::Arena(p)], g),
        }
    }

    pub(crate) fn read_floats(&mut self, buf: Buf, at: usize, n: usize) -> Vec<f32> {
        let b = self.bufs[buf.0 as usize].clone();
        let mut bytes = Vec::with_capacity(n * 4);
        self.rec
            .read(&self.ctx, &[(&b, at as u64 * 4, n as u64 * 4)], &mut bytes);
        bytes
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().expect("4 bytes")))
            .collect()
    }

    /// The device with attention's parts kept within `bytes` (rows beyond it dispatched in
    /// groups; a row's bits do not depend on its group). For tests of the grouping.
    pub fn with_attention_parts_bytes(mut self, bytes: u64) -> Self {
        self.attn_parts_cap = bytes;
        self
    }

    /// The most bytes attention's parts may take on this device.
    pub(crate) fn attention_parts_cap(&self) -> usize {
        self.attn_parts_cap.min(self.ctx.max_binding()) as usize
    }

    /// The buffer of attention's parts, at least `bytes` long.
    pub(crate) fn attention_parts(&mut self, bytes: u64) -> wgpu::Buffer {
        if self.attn_parts.as_ref().is_none_or(|b| b.size() < bytes) {
            self.attn_parts = Some(self.ctx.buffer("attention parts", bytes));
        }
        self.attn_parts.clone().expect("made above")
    }

    pub(crate) fn kv(&self) -> &GpuKv {
        self.kv.as_ref().expect("kv_alloc first")
    }

    /// Appends block `block`'s bytes of the stores [`GpuKv::stores`] names.
    pub(crate) fn kv_read(&mut self, windowed: bool, block: u32, out: &mut Vec<u8>) {
        let kv = self.kv.as_ref().expect("kv_alloc first");
        let parts: Vec<_> = kv
            .stores(windowed)
            .into_iter()
            .map(|(s, bb)| (s, block as u64 * bb, bb))
            .collect();
        self.rec.read(&self.ctx, &parts, out);
    }

    /// Writes block `block` of the stores [`GpuKv::stores`] names from bytes laid out as
    /// [`Self::kv_read`] gives them.
    pub(crate) fn kv_write(&mut self, windowed: bool, block: u32, data: &[u8]) {
        self.rec.flush(&self.ctx);
        let kv = self.kv.as_ref().expect("kv_alloc first");
        let mut data = data;
        for (store, bb) in kv.stores(windowed) {
            let (src, rest) = data.split_at(bb as usize);
            self.ctx.queue.write_buffer(store, block as u64 * bb, src);
            data = rest;
        }
    }
}
