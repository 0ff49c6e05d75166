//! Recurrent states on the GPU: per state layer a store of `[n_slots, floats]` and one of
//! the checkpoint rows, `[n_slots, rows, floats]` ([`kv::state`]), the step's zeroing and
//! checkpointing at `begin`, the restore, and the dispatches of the convolution (conv.wgsl), the delta rule (delta.wgsl)
//! and Mamba-2's scan (scan.wgsl) over the step's runs of rows of one sequence each.

use device::{Buf, ConvSpec, DeltaIo, DeltaSpec, Result, ScanIo, ScanSpec, Step};
use kv::state::NO_SLOT;
use kv::KvConfig;

use crate::context::Bind::{Arena as A, Buf as B};
use crate::gpu::{Gpu, LOOP_BUDGET};
use crate::pipelines::Kernel;

/// Words per run in the shaders' parameters ([`Gpu::runs`]; runs_common.wgsl's `Run`).
const RUN_WORDS: usize = 7;

/// `runs` ([`RUN_WORDS`] words each, as [`Gpu::runs`] gives them) cut into pieces of at most
/// `most` rows each, in the order they are dispatched: the `i`-th list holds piece `i` of
/// every run that has one, so that a run's rows are walked in order across the dispatches
/// and an invocation's loops stay within [`LOOP_BUDGET`].
fn pieces(runs: &[u32], most: usize) -> Vec<Vec<u32>> {
    let most = most.max(1) as u32;
    let mut out: Vec<Vec<u32>> = Vec::new();
    for run in runs.chunks_exact(RUN_WORDS) {
        let [first, n, at, lo, hi, ck_at, floats] = run.try_into().expect("a run's words");
        for (i, from) in (0..n).step_by(most as usize).enumerate() {
            if out.len() == i {
                out.push(Vec::new());
            }
            let len = most.min(n - from);
            let (a, b) = (lo.max(from), hi.min(from + len));
            let (lo, hi, ck_at) = match a < b {
                true => (a - from, b - from, ck_at + (a - lo) * floats),
                false => (0, 0, 0),
            };
            out[i].extend([first + from, len, at, lo, hi, ck_at, floats]);
        }
    }
    out
}

/// The state stores of a pool's state layers (`None` for the others).
pub(crate) struct GpuStates {
    floats: usize,
    /// Checkpoint rows per slot ([`kv::StateKv::rows`]).
    rows: usize,
    /// Per KV layer: the states and the checkpoints.
    stores: Vec<Option<(wgpu::Buffer, wgpu::Buffer)>>,
    /// Per KV layer: the snapshots (`[n_snaps, floats]`).
    snaps: Vec<Option<wgpu::Buffer>>,
    /// Per sequence of the step, its slot.
    slots: Vec<u32>,
    /// Per sequence of the step, its checkpoint's position (empty: before its first row).
    checkpoints: Vec<usize>,
}

impl Gpu {
    /// The stores of `cfg`'s state layers, zeroed.
    pub(crate) fn states_alloc(&mut self, cfg: &KvConfig) -> Result<Option<GpuStates>> {
        let Some(s) = cfg.state else {
            return Ok(None);
        };
        let rows = s.kept_rows();
        let bytes = (s.n_slots * s.floats * 4) as u64;
        let (ck_bytes, snap_bytes) = (bytes * rows as u64, (s.n_snaps * s.floats * 4) as u64);
        if ck_bytes.max(snap_bytes) > self.ctx.max_binding() {
            return Err(self.unsupported(format!(
                "hold a layer's recurrent states of {} MiB (it binds at most {} MiB): use fewer slots (-np) or drafts (--spec-draft-n-max)",
                ck_bytes.max(snap_bytes) >> 20,
                self.ctx.max_binding() >> 20
            )));
        }
        let store = |l: usize| {
            s.has(l).then(|| {
                let b = |name, bytes| self.ctx.buffer(name, bytes);
                (
                    b("recurrent state", bytes),
                    b("recurrent checkpoints", ck_bytes),
                )
            })
        };
        let snap = |l: usize| {
            (s.has(l) && s.n_snaps > 0).then(|| self.ctx.buffer("recurrent snapshots", snap_bytes))
        };
        let all = || {
            let stores = (0..cfg.n_layer).map(store).collect();
            (stores, (0..cfg.n_layer).map(snap).collect())
        };
        let (stores, snaps) = self.ctx.out_of_memory(all).map_err(|e| {
            self.unsupported(format!(
                "hold recurrent states of {} MiB ({e}): use fewer slots (-np)",
                s.total_bytes() >> 20
            ))
        })?;
        Ok(Some(GpuStates {
            floats: s.floats,
            rows,
            stores,
            snaps,
            slots: Vec::new(),
            checkpoints: Vec::new(),
        }))
    }

    /// At `begin`: each sequence with rows starts from the zero state (its first row at
    /// position 0), or keeps its state as its checkpoint where [`Step::checkpoints`] says
    /// so of its first row (the shaders take it at a later row it names).
    pub(crate) fn states_begin(&mut self, step: &Step<'_>) {
        let Some(st) = self.states.as_mut() else {
            return;
        };
        st.slots = step.states.to_vec();
        st.checkpoints = step.checkpoints.to_vec();
        let bytes = st.floats as u64 * 4;
        let enc = self.rec.encoder(&self.ctx);
        let mut seen = vec![false; st.slots.len()];
        for r in step.rows {
            let slot = st.slots[r.seq];
            if std::mem::replace(&mut seen[r.seq], true) || slot == NO_SLOT {
                continue;
            }
            let (at, ck) = (slot as u64 * bytes, slot as u64 * st.rows as u64 * bytes);
            let kept = device::checkpoint_row(&st.checkpoints, r.seq, r.pos, 1).is_some();
            for (state, checkpoint) in st.stores.iter().flatten() {
                match r.pos {
                    0 => enc.clear_buffer(state, at, Some(bytes)),
                    _ if kept => enc.copy_buffer_to_buffer(state, at, checkpoint, ck, bytes),
                    _ => {}
                }
            }
        }
    }

    /// [`device::Device::state_restore`].
    pub(crate) fn states_restore(&mut self, slot: u32, row: usize) {
        let st = self.states.as_ref().expect("state layers");
        assert!(row < st.rows, "checkpoint row {row} of {}", st.rows);
        let bytes = st.floats as u64 * 4;
        let (at, ck) = (
            slot as u64 * bytes,
            (slot as u64 * st.rows as u64 + row as u64) * bytes,
        );
        let enc = self.rec.encoder(&self.ctx);
        for (state, checkpoint) in st.stores.iter().flatten() {
            enc.copy_buffer_to_buffer(checkpoint, ck, state, at, bytes);
        }
    }

    /// [`device::Device::state_save`] (`load` false) and [`device::Device::state_load`].
    pub(crate) fn states_snapshot(&mut self, slot: u32, snap: u32, load: bool) {
        let st = self.states.as_ref().expect("state layers");
        let bytes = st.floats as u64 * 4;
        let (at, to) = (slot as u64 * bytes, snap as u64 * bytes);
        let enc = self.rec.encoder(&self.ctx);
        for ((state, _), snaps) in st.stores.iter().flatten().zip(st.snaps.iter().flatten()) {
            match load {
                false => enc.copy_buffer_to_buffer(state, at, snaps, to, bytes),
                true => enc.copy_buffer_to_buffer(snaps, to, state, at, bytes),
            }
        }
    }

    /// [`device::Device::state_read`].
    pub(crate) fn states_read(&mut self, snap: u32, out: &mut Vec<u8>) {
        let st = self.states.as_ref().expect("state layers");
        let bytes = st.floats as u64 * 4;
        let parts: Vec<_> = st
            .snaps
            .iter()
            .flatten()
            .map(|s| (s, snap as u64 * bytes, bytes))
            .collect();
        self.rec.read(&self.ctx, &parts, out);
    }

    /// [`device::Device::state_write`].
    pub(crate) fn states_write(&mut self, snap: u32, data: &[u8]) {
        self.rec.flush(&self.ctx);
        let st = self.states.as_ref().expect("state layers");
        let bytes = st.floats * 4;
        assert_eq!(
            data.len(),
            st.snaps.iter().flatten().count() * bytes,
            "a snapshot's bytes"
        );
        for (s, src) in st.snaps.iter().flatten().zip(data.chunks_exact(bytes)) {
            self.ctx
                .queue
                .write_buffer(s, (snap as usize * bytes) as u64, src);
        }
    }

    /// The step's runs of one sequence's rows as the shaders read them ([`RUN_WORDS`]
    /// each): first row, rows, the slot's first float; the run's rows `lo..hi` before each
    /// of which a checkpoint row is taken (none: `0, 0`), the first float of the one
    /// taken before row `lo`, and the floats of a slot (the checkpoint rows' stride); and
    /// layer `layer`'s state and checkpoint stores.
    fn runs(&self, layer: usize) -> (Vec<u32>, wgpu::Buffer, wgpu::Buffer) {
        let st = self.states.as_ref().expect("state layers");
        let (state, checkpoint) = st.stores[layer]
            .as_ref()
            .unwrap_or_else(|| panic!("KV layer {layer} keeps no state"));
        let runs = device::seq_runs(&self.rows).flat_map(|(rows, seq)| {
            let at = st.slots[seq] as usize * st.floats;
            let first = self.rows[rows.start].pos;
            let ck = device::checkpoint_row(&st.checkpoints, seq, first, rows.len());
            let (lo, hi) = ck.map_or((0, 0), |c| (c, (c + st.rows).min(rows.len())));
            [rows.start, rows.len(), at, lo, hi, at * st.rows, st.floats].map(|v| v as u32)
        });
        (runs.collect(), state.clone(), checkpoint.clone())
    }

    pub(crate) fn conv(&mut self, layer: usize, x: Buf, w: Buf, out: Buf, spec: &ConvSpec) {
        assert!(
            (2..=8).contains(&spec.k),
            "{} taps: conv.wgsl takes 2 to 8",
            spec.k
        );
        let (runs, state, checkpoint) = self.runs(layer);
        // A row: the row loop's iteration, the taps' sum and the window's shift (each with
        // its exit test); beside the rows, the window's load, store and checkpoint rows.
        let rows = self.states.as_ref().map_or(1, |s| s.rows);
        let most = LOOP_BUDGET.saturating_sub((3 + rows) * (spec.k + 1)) / (2 * spec.k + 2);
        let bias = self.buf(spec.bias.unwrap_or(w));
        let [x, w, out] = [x, w, out].map(|b| self.buf(b));
        for runs in pieces(&runs, most) {
            let n_runs = runs.len() / RUN_WORDS;
            let mut p = vec![
                spec.width as u32,
                spec.k as u32,
                spec.silu as u32,
                spec.bias.is_some() as u32,
                n_runs as u32,
            ];
            p.extend(runs);
            let p = self.rec.push(&self.ctx, bytemuck::cast_slice(&p));
            let g = [spec.width.div_ceil(64) as u32, n_runs as u32, 1];
            let binds = [
                B(&x),
                B(&w),
                B(&out),
                B(&state),
                B(&checkpoint),
                A(p),
                B(&bias),
            ];
            self.run(Kernel::Conv1d, &binds, g);
        }
    }

    pub(crate) fn delta(&mut self, layer: usize, io: &DeltaIo, spec: &DeltaSpec) {
        // A row: the row loop's iteration and the invocation's state rows, each walked twice
        // (each loop with its exit test); beside the rows, the checkpoint rows' copies.
        let (d, mine) = (spec.head_dim, spec.head_dim.div_ceil(64));
        let per_row = 1 + (mine + 1) + 2 * mine * (d + 1);
        let most = LOOP_BUDGET.saturating_sub(self.copies() * (mine + 1) * (d + 1)) / per_row;
        let bufs = [io.q, io.k, io.v, io.g, io.beta, io.a, io.out];
        let header = [spec.n_k_heads, spec.n_v_heads, spec.head_dim, spec.at];
        self.head_runs(Kernel::DeltaNet, layer, bufs, &header, spec.n_v_heads, most);
    }

    pub(crate) fn scan(&mut self, layer: usize, io: &ScanIo, spec: &ScanSpec) {
        // A row: the row loop's iteration and the invocation's state rows, each walked once
        // (with its exit test); beside the rows, the checkpoint rows' copies.
        let (n, mine) = (spec.d_state, spec.head_dim.div_ceil(64));
        let per_row = 1 + (mine + 1) * (n + 1);
        let most = LOOP_BUDGET.saturating_sub(self.copies() * (mine + 1) * (n + 1)) / per_row;
        let bufs = [io.x, io.dt, io.a, io.b, io.c, io.d, io.out];
        let s = spec;
        let header = [s.n_head, s.head_dim, s.d_state, s.n_group, s.at];
        self.head_runs(Kernel::SsmScan, layer, bufs, &header, spec.n_head, most);
    }

    /// Loop-budget units a head's invocation spends beside its rows: the checkpoint rows'
    /// copies and a margin of 3.
    fn copies(&self) -> usize {
        3 + self.states.as_ref().map_or(1, |s| s.rows)
    }

    /// Dispatches `kernel` (delta.wgsl, scan.wgsl) over the step's runs of state layer
    /// `layer` in pieces of at most `most` rows, a workgroup per (run, head of `heads`): its
    /// buffers `bufs` at bindings 0 to 6, the layer's state and checkpoint stores at 7 and
    /// 8, at 9 its parameters `header`, then the piece's run count and runs.
    fn head_runs(
        &mut self,
        kernel: Kernel,
        layer: usize,
        bufs: [Buf; 7],
        header: &[usize],
        heads: usize,
        most: usize,
    ) {
        let (runs, state, checkpoint) = self.runs(layer);
        let bufs = bufs.map(|b| self.buf(b));
        for runs in pieces(&runs, most) {
            let n_runs = runs.len() / RUN_WORDS;
            let mut p: Vec<u32> = header.iter().chain([&n_runs]).map(|&v| v as u32).collect();
            p.extend(runs);
            let p = self.rec.push(&self.ctx, bytemuck::cast_slice(&p));
            let mut binds: Vec<_> = bufs.iter().map(B).collect();
            binds.extend([B(&state), B(&checkpoint), A(p)]);
            self.run(kernel, &binds, [n_runs as u32, heads as u32, 1]);
        }
    }
}
