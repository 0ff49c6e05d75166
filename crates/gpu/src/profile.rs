//! What `tandem bench model --device gpu` reads of the adapter: the memory's streaming-read
//! bandwidth (a kernel's), and per-kernel times from timestamp queries: while
//! profiling is on, every dispatch's compute pass writes a timestamp at its start and its
//! end; at each submit the pending pairs are resolved, read back and added to their kernel's
//! totals. Adapters without timestamp queries give no times.

use std::collections::BTreeMap;
use std::time::Instant;

use device::OpTime;

use crate::context::Bind::{Arena as A, Buf as B};
use crate::context::Ctx;
use crate::gpu::{grid, Gpu};
use crate::pipelines::Kernel;

/// Dispatches timed between two submits (more submit early).
pub(crate) const PAIRS: usize = 1024;

pub(crate) struct Profiler {
    set: wgpu::QuerySet,
    resolved: wgpu::Buffer,
    staging: wgpu::Buffer,
    /// Per dispatch timed since the last harvest: its kernel and the bytes it streams.
    pending: Vec<(String, u64)>,
    period_ns: f64,
    totals: BTreeMap<String, OpTime>,
}

impl Profiler {
    /// `None` where the adapter has no timestamp queries.
    pub fn new(ctx: &Ctx) -> Option<Profiler> {
        if !ctx
            .device
            .features()
            .contains(wgpu::Features::TIMESTAMP_QUERY)
        {
            return None;
        }
        let bytes = (2 * PAIRS * 8) as u64;
        let buffer = |usage| {
            ctx.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("timestamps"),
                size: bytes,
                usage,
                mapped_at_creation: false,
            })
        };
        Some(Profiler {
            set: ctx.device.create_query_set(&wgpu::QuerySetDescriptor {
                label: Some("timestamps"),
                ty: wgpu::QueryType::Timestamp,
                count: 2 * PAIRS as u32,
            }),
            resolved: buffer(wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC),
            staging: buffer(wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST),
            pending: Vec::new(),
            period_ns: ctx.queue.get_timestamp_period() as f64,
            totals: BTreeMap::new(),
        })
    }

    pub fn full(&self) -> bool {
        self.pending.len() >= PAIRS
    }

    /// The timestamps of the next dispatch's pass, which streams `bytes` in kernel `what`.
    pub fn next(&mut self, what: String, bytes: u64) -> wgpu::ComputePassTimestampWrites<'_> {
        let i = 2 * self.pending.len() as u32;
        self.pending.push((what, bytes));
        wgpu::ComputePassTimestampWrites {
            query_set: &self.set,
            beginning_of_pass_write_index: Some(i),
            end_of_pass_write_index: Some(i + 1),
        }
    }

    /// Records the copy of the pending timestamps, before the encoder is finished.
    pub fn resolve(&self, enc: &mut wgpu::CommandEncoder) {
        let n = 2 * self.pending.len() as u32;
        if n > 0 {
            enc.resolve_query_set(&self.set, 0..n, &self.resolved, 0);
            enc.copy_buffer_to_buffer(&self.resolved, 0, &self.staging, 0, n as u64 * 8);
        }
    }

    /// After the submit of what [`Profiler::resolve`] recorded: adds the pending times.
    pub fn harvest(&mut self, ctx: &Ctx) {
        if self.pending.is_empty() {
            return;
        }
        let slice = self.staging.slice(..(self.pending.len() * 16) as u64);
        slice.map_async(wgpu::MapMode::Read, |r| r.expect("mapping the timestamps"));
        ctx.device
            .poll(wgpu::PollType::wait_indefinitely())
            .expect("waiting for the device");
        let ticks: Vec<u64> = slice
            .get_mapped_range()
            .expect("mapped above")
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
            .collect();
        self.staging.unmap();
        for ((what, bytes), t) in self.pending.drain(..).zip(ticks.chunks_exact(2)) {
            let o = self.totals.entry(what.clone()).or_insert(OpTime {
                op: what,
                ..OpTime::default()
            });
            o.calls += 1;
            o.seconds += t[1].saturating_sub(t[0]) as f64 * self.period_ns * 1e-9;
            o.bytes += bytes;
        }
    }

    /// The totals since the last call, most time first.
    pub fn take(&mut self) -> Vec<OpTime> {
        let mut v: Vec<OpTime> = std::mem::take(&mut self.totals).into_values().collect();
        v.sort_by(|a, b| b.seconds.total_cmp(&a.seconds));
        v
    }
}

/// Bytes the bandwidth probe reads (less where one binding holds less).
const PROBE_BYTES: u64 = 512 << 20;
/// Threads of the probe: enough to keep any adapter's memory busy.
const PROBE_THREADS: u32 = 64 * 1024;

impl Gpu {
    /// [`device::Device::read_bandwidth`]: the best of 3 timed streaming reads.
    pub(crate) fn probe_bandwidth(&mut self) -> f64 {
        let bytes = PROBE_BYTES.min(self.ctx.max_binding()) / 16 * 16;
        let src = self.ctx.buffer("probe", bytes);
        let out = self.ctx.buffer("probe out", PROBE_THREADS as u64 * 4);
        let g = grid(PROBE_THREADS as usize / 64);
        let p = self.params([(bytes / 16) as u32, PROBE_THREADS, g[0], 0, 0, 0, 0, 0]);
        self.rec.flush(&self.ctx);
        let mut best = f64::MAX;
        for _ in 0..4 {
            self.run(Kernel::Bandwidth, &[B(&src), B(&out), A(p)], g);
            let t = Instant::now();
            self.rec.flush(&self.ctx);
            self.ctx
                .device
                .poll(wgpu::PollType::wait_indefinitely())
                .expect("waiting for the device");
            best = best.min(t.elapsed().as_secs_f64());
        }
        bytes as f64 / best
    }
}
