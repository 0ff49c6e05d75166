//! Recurrent states in host memory, for the backends whose buffers live there (the CPU,
//! the reference): per state layer and slot, the state and its checkpoint rows
//! ([`kv::state`]), and the recurrences over them: the causal convolution, Gated
//! DeltaNet's delta rule and Mamba-2's scan.

use kv::state::NO_SLOT;
use kv::StateKv;

use crate::host::HostBufs;
use crate::{checkpoint_row, seq_runs, ConvSpec, DeltaIo, DeltaSpec, Row, ScanIo, ScanSpec, Step};

/// A run of a step's rows of one sequence, as [`HostStates`]'s recurrences walk it: its
/// rows, the first float of its slot, and where it takes checkpoint rows (the run's row
/// before which row 0 is taken, the first float of the slot's checkpoint rows).
type Run = (std::ops::Range<usize>, usize, Option<(usize, usize)>);

/// See the module doc.
pub struct HostStates {
    cfg: StateKv,
    /// `[state layers, n_slots, floats]`.
    state: Vec<f32>,
    /// `[state layers, n_slots, rows, floats]`: checkpoint row `j` of a slot is its state
    /// before the `j`-th row after its checkpoint's.
    checkpoint: Vec<f32>,
    /// `[state layers, n_snaps, floats]`.
    snaps: Vec<f32>,
    /// Per sequence of the step, its slot.
    slots: Vec<u32>,
    /// Per sequence of the step, its checkpoint's position (empty: before its first row).
    checkpoints: Vec<usize>,
    rows: Vec<Row>,
}

impl HostStates {
    pub fn new(cfg: StateKv) -> HostStates {
        let n = cfg.n_layers() * cfg.n_slots * cfg.floats;
        HostStates {
            cfg,
            state: vec![0.0; n],
            checkpoint: vec![0.0; n * cfg.kept_rows()],
            snaps: vec![0.0; cfg.n_layers() * cfg.n_snaps * cfg.floats],
            slots: Vec::new(),
            checkpoints: Vec::new(),
            rows: Vec::new(),
        }
    }

    /// The floats of slot `slot` of KV layer `layer` in a `[layers, slots, floats]` store.
    fn range(&self, layer: usize, slot: u32) -> std::ops::Range<usize> {
        assert!(self.cfg.has(layer), "KV layer {layer} keeps no state");
        let rank = (self.cfg.layers & ((1u128 << layer) - 1)).count_ones() as usize;
        let at = (rank * self.cfg.n_slots + slot as usize) * self.cfg.floats;
        at..at + self.cfg.floats
    }

    /// The floats of checkpoint row `row` of slot `slot` of KV layer `layer`.
    fn ck_range(&self, layer: usize, slot: u32, row: usize) -> std::ops::Range<usize> {
        let state = self.range(layer, slot);
        let at = state.start * self.cfg.kept_rows() + row * self.cfg.floats;
        at..at + self.cfg.floats
    }

    /// The floats of snapshot `snap` of the `rank`-th state layer in `snaps`.
    fn snap_range(&self, rank: usize, snap: u32) -> std::ops::Range<usize> {
        let at = (rank * self.cfg.n_snaps + snap as usize) * self.cfg.floats;
        at..at + self.cfg.floats
    }

    /// Starts a step: each sequence with rows starts from the zero state (its first row at
    /// position 0), or keeps its state as its checkpoint where [`Step::checkpoints`] says
    /// so of its first row (the recurrences take it at a later row it names).
    pub fn begin(&mut self, step: &Step<'_>) {
        self.slots = step.states.to_vec();
        self.checkpoints = step.checkpoints.to_vec();
        self.rows = step.rows.to_vec();
        let mut seen = vec![false; self.slots.len()];
        for r in step.rows {
            if std::mem::replace(&mut seen[r.seq], true) || self.slots[r.seq] == NO_SLOT {
                continue;
            }
            let slot = self.slots[r.seq];
            let kept = checkpoint_row(step.checkpoints, r.seq, r.pos, 1).is_some();
            for layer in (0..128).filter(|&l| self.cfg.has(l)) {
                let (range, ck) = (self.range(layer, slot), self.ck_range(layer, slot, 0));
                match r.pos {
                    0 => self.state[range].fill(0.0),
                    _ if kept => self.checkpoint[ck].copy_from_slice(&self.state[range]),
                    _ => {}
                }
            }
        }
    }

    /// [`crate::Device::state_restore`].
    pub fn restore(&mut self, slot: u32, row: usize) {
        assert!(
            row < self.cfg.kept_rows(),
            "checkpoint row {row} of {}",
            self.cfg.kept_rows()
        );
        for layer in (0..128).filter(|&l| self.cfg.has(l)) {
            let (range, ck) = (self.range(layer, slot), self.ck_range(layer, slot, row));
            self.state[range].copy_from_slice(&self.checkpoint[ck]);
        }
    }

    /// [`crate::Device::state_save`] (`load` false) and [`crate::Device::state_load`].
    pub fn snapshot(&mut self, slot: u32, snap: u32, load: bool) {
        for (rank, layer) in (0..128).filter(|&l| self.cfg.has(l)).enumerate() {
            let (state, snapshot) = (self.range(layer, slot), self.snap_range(rank, snap));
            match load {
                false => self.snaps[snapshot].copy_from_slice(&self.state[state]),
                true => self.state[state].copy_from_slice(&self.snaps[snapshot]),
            }
        }
    }

    /// [`crate::Device::state_read`].
    pub fn read(&self, snap: u32, out: &mut Vec<u8>) {
        for rank in 0..self.cfg.n_layers() {
            let snapshot = &self.snaps[self.snap_range(rank, snap)];
            out.extend(snapshot.iter().flat_map(|v| v.to_le_bytes()));
        }
    }

    /// [`crate::Device::state_write`].
    pub fn write(&mut self, snap: u32, data: &[u8]) {
        assert_eq!(data.len(), self.cfg.snapshot_bytes(), "a snapshot's bytes");
        for (rank, src) in data.chunks_exact(4 * self.cfg.floats).enumerate() {
            let snapshot = self.snap_range(rank, snap);
            for (v, b) in self.snaps[snapshot].iter_mut().zip(src.chunks_exact(4)) {
                *v = f32::from_le_bytes(b.try_into().expect("4 bytes"));
            }
        }
    }

    /// The step's rows as runs of one sequence each: `(rows, first float of its slot in
    /// layer `layer`, the run's row before which checkpoint row 0 is taken, the first
    /// float of its slot's checkpoint rows)`; the run's next rows take the next checkpoint
    /// rows.
    fn runs(&self, layer: usize) -> Vec<Run> {
        let runs = seq_runs(&self.rows);
        runs.map(|(rows, seq)| {
            let slot = self.slots[seq];
            let at = self.range(layer, slot).start;
            let first = self.rows[rows.start].pos;
            let ck = checkpoint_row(&self.checkpoints, seq, first, rows.len());
            (
                rows,
                at,
                ck.map(|i| (i, self.ck_range(layer, slot, 0).start)),
            )
        })
        .collect()
    }

    /// [`crate::Device::conv1d`] over the step's rows with host buffers: each output the
    /// sum over the taps in order (`Σ_j w[c·k + j] · in(j)`, each product and sum one f32
    /// operation) with the taps `w` (`[width, k]`), plus its channel's `bias`, then `silu` on
    /// each row of outputs when the spec asks for it.
    pub fn conv1d(
        &mut self,
        layer: usize,
        x: &[f32],
        (w, bias): (&[f32], Option<&[f32]>),
        out: &mut [f32],
        spec: &ConvSpec,
        silu: impl Fn(&mut [f32]),
    ) {
        let (width, k) = (spec.width, spec.k);
        let floats = (k - 1) * width;
        assert!(floats <= self.cfg.floats, "a slot holds the k - 1 inputs");
        // The taps as [k, width]: tap j of every channel together.
        let taps: Vec<f32> = (0..k * width)
            .map(|i| w[(i % width) * k + i / width])
            .collect();
        for (rows, at, ck) in self.runs(layer) {
            let range = at..at + floats;
            // [k - 1 + rows, width]: the state, then the step's inputs.
            let mut window = self.state[range.clone()].to_vec();
            window.extend_from_slice(&x[rows.start * width..rows.end * width]);
            for (i, r) in rows.clone().enumerate() {
                let o = &mut out[r * width..(r + 1) * width];
                o.fill(0.0);
                for (j, tap) in taps.chunks_exact(width).enumerate() {
                    let input = &window[(i + j) * width..(i + j + 1) * width];
                    for ((y, &t), &v) in o.iter_mut().zip(tap).zip(input) {
                        *y += t * v;
                    }
                }
                if let Some(b) = bias {
                    o.iter_mut().zip(b).for_each(|(y, &b)| *y += b);
                }
                if spec.silu {
                    silu(o);
                }
            }
            let n = rows.len();
            if let Some((c, ck_at)) = ck {
                for (j, c) in (c..n).take(self.cfg.kept_rows()).enumerate() {
                    let held = &window[c * width..(c + k - 1) * width];
                    let to = ck_at + j * self.cfg.floats;
                    self.checkpoint[to..to + floats].copy_from_slice(held);
                }
            }
            self.state[range].copy_from_slice(&window[n * width..(n + k - 1) * width]);
        }
    }

    /// [`crate::Device::delta_net`] over the step's rows with host buffers, each row `j`
    /// of a head's state stepped by `step(row, k, q, decay, v[j], beta)`, which scales
    /// the row by the decay, adds `(v[j] - row·k) · beta · k` and gives `row·q` (see
    /// [`row_step`]). Each sequence's value heads are tasks of their own
    /// (disjoint state, the rows in order); `par(n, task)` runs `task(i)` for each `i` in
    /// `0..n`, in any order or on any threads.
    pub fn delta_net(
        &mut self,
        layer: usize,
        bufs: &mut HostBufs,
        io: &DeltaIo,
        spec: &DeltaSpec,
        step: impl Fn(&mut [f32], &[f32], &[f32], f32, f32, f32) -> f32 + Sync,
        par: impl Fn(usize, &(dyn Fn(usize) + Sync)),
    ) {
        let (hk, hv, d) = (spec.n_k_heads, spec.n_v_heads, spec.head_dim);
        let scale = 1.0 / (d as f32).sqrt();
        let tasks = self.head_tasks(layer, spec.at, hv, d * d, d);
        let b = &*bufs;
        let (q, k, v) = (&b[io.q], &b[io.k], &b[io.v]);
        let (g, beta, a) = (&b[io.g], &b[io.beta], &b[io.a]);
        each_row(&tasks, d, par, |h, r, s, o| {
            let kh = (r * hk + h % hk) * d;
            let (q, k) = (&q[kh..kh + d], &k[kh..kh + d]);
            let vh = (r * hv + h) * d;
            let decay = (a[h] * g[r * hv + h]).exp();
            let beta = beta[r * hv + h];
            for (j, row) in s.chunks_exact_mut(d).enumerate() {
                o[j] = step(row, k, q, decay, v[vh + j], beta) * scale;
            }
        });
        scatter(bufs, io.out, tasks, hv, d);
    }

    /// [`crate::Device::ssm_scan`] over the step's rows with host buffers, each row `j` of
    /// a head's state stepped by `step(row, b, c, decay, x[j] · dt, d · x[j])` (see
    /// [`crate::scan::row_step`]). Tasks and `par` as [`HostStates::delta_net`]'s.
    pub fn ssm_scan(
        &mut self,
        layer: usize,
        bufs: &mut HostBufs,
        io: &ScanIo,
        spec: &ScanSpec,
        step: impl Fn(&mut [f32], &[f32], &[f32], f32, f32, f32) -> f32 + Sync,
        par: impl Fn(usize, &(dyn Fn(usize) + Sync)),
    ) {
        let (nh, p, n) = (spec.n_head, spec.head_dim, spec.d_state);
        let bc = spec.n_group * n;
        let tasks = self.head_tasks(layer, spec.at, nh, p * n, p);
        let b = &*bufs;
        let (x, dt, a, d) = (&b[io.x], &b[io.dt], &b[io.a], &b[io.d]);
        let (bb, cc) = (&b[io.b], &b[io.c]);
        each_row(&tasks, p, par, |h, r, s, o| {
            let at = r * bc + spec.group(h) * n;
            let (bv, cv) = (&bb[at..][..n], &cc[at..][..n]);
            let step_size = dt[r * nh + h];
            let decay = (a[h] * step_size).exp();
            let xh = &x[(r * nh + h) * p..][..p];
            for (j, row) in s.chunks_exact_mut(n).enumerate() {
                o[j] = step(row, bv, cv, decay, xh[j] * step_size, d[h] * xh[j]);
            }
        });
        scatter(bufs, io.out, tasks, nh, p);
    }

    /// One task per (run of the step, head of `n_heads`): the head's state of
    /// `head_floats` (from float `at` of the run's slot in layer `layer`), its checkpoint
    /// rows when the run takes them, and its rows' outputs of `width` each.
    fn head_tasks(
        &mut self,
        layer: usize,
        at: usize,
        n_heads: usize,
        head_floats: usize,
        width: usize,
    ) -> Vec<std::sync::Mutex<HeadTask<'_>>> {
        let n = n_heads * head_floats;
        assert!(at + n <= self.cfg.floats, "a slot holds the state");
        let (floats, ck_floats) = (self.cfg.floats, self.cfg.kept_rows() * self.cfg.floats);
        let runs = self.runs(layer);
        let mut tasks = Vec::new();
        let (mut rest, mut kept) = (&mut self.state[..], &mut self.checkpoint[..]);
        let (mut taken, mut ck_taken) = (0, 0);
        let mut order: Vec<usize> = (0..runs.len()).collect();
        order.sort_by_key(|&i| runs[i].1);
        for i in order {
            let (rows, slot_at, ck) = runs[i].clone();
            assert!(
                slot_at + at >= taken,
                "a sequence's rows come together in a step"
            );
            let start = slot_at + at - taken;
            let (state, tail) = rest.split_at_mut(start).1.split_at_mut(n);
            taken = slot_at + at + n;
            rest = tail;
            // Per head, its share of each of the slot's checkpoint rows.
            let mut heads_ck: Vec<Vec<&mut [f32]>> = (0..n_heads).map(|_| Vec::new()).collect();
            let ck_row = ck.map(|(row, ck_at)| {
                let (block, tail) = std::mem::take(&mut kept)
                    .split_at_mut(ck_at - ck_taken)
                    .1
                    .split_at_mut(ck_floats);
                (ck_taken, kept) = (ck_at + ck_floats, tail);
                for row_floats in block.chunks_exact_mut(floats) {
                    let heads = row_floats[at..at + n].chunks_exact_mut(head_floats);
                    heads_ck.iter_mut().zip(heads).for_each(|(v, c)| v.push(c));
                }
                row
            });
            for (h, (s, c)) in state
                .chunks_exact_mut(head_floats)
                .zip(heads_ck)
                .enumerate()
            {
                tasks.push(std::sync::Mutex::new(HeadTask {
                    out: vec![0f32; rows.len() * width],
                    rows: rows.clone(),
                    h,
                    s,
                    ck: ck_row.map(|row| (row, c)),
                }));
            }
        }
        tasks
    }
}

/// A head's share of a recurrence over one run of rows: its state, its checkpoint rows
/// with the run's row before which the first is taken, and its outputs.
struct HeadTask<'a> {
    rows: std::ops::Range<usize>,
    h: usize,
    s: &'a mut [f32],
    ck: Option<(usize, Vec<&'a mut [f32]>)>,
    out: Vec<f32>,
}

/// Runs `row(h, r, state, out)` for each task's rows in order (`h` its head, `r` the row,
/// `out` the row's `width` outputs), a task's checkpoint rows copied from its state before
/// the row the first names and the rows after it; the tasks through `par`.
fn each_row(
    tasks: &[std::sync::Mutex<HeadTask<'_>>],
    width: usize,
    par: impl Fn(usize, &(dyn Fn(usize) + Sync)),
    row: impl Fn(usize, usize, &mut [f32], &mut [f32]) + Sync,
) {
    par(tasks.len(), &|i| {
        let mut task = tasks[i].lock().expect("one thread per task");
        let HeadTask {
            rows,
            h,
            s,
            ck,
            out,
        } = &mut *task;
        for (i, (o, r)) in out.chunks_exact_mut(width).zip(rows.clone()).enumerate() {
            if let Some(c) = ck
                .as_mut()
                .and_then(|(at, c)| c.get_mut(i.checked_sub(*at)?))
            {
                c.copy_from_slice(s);
            }
            row(*h, r, s, o);
        }
    });
}

/// Each task's outputs into buffer `out` (`[rows, n_heads · width]`).
fn scatter(
    bufs: &mut HostBufs,
    out: crate::Buf,
    tasks: Vec<std::sync::Mutex<HeadTask<'_>>>,
    n_heads: usize,
    width: usize,
) {
    let mut all = bufs.take(out);
    for task in tasks {
        let HeadTask { rows, h, out, .. } = task.into_inner().expect("tasks done");
        for (r, o) in rows.zip(out.chunks_exact(width)) {
            all[(r * n_heads + h) * width..][..width].copy_from_slice(o);
        }
    }
    bufs.put(out, all);
}

/// One row of the delta rule as [`HostStates::delta_net`] describes it, its dot products
/// as `dot` gives them: the reference's step.
pub fn row_step(
    dot: impl Fn(&[f32], &[f32]) -> f32,
) -> impl Fn(&mut [f32], &[f32], &[f32], f32, f32, f32) -> f32 {
    move |row, k, q, decay, v, beta| {
        row.iter_mut().for_each(|x| *x *= decay);
        let delta = (v - dot(row, k)) * beta;
        row.iter_mut().zip(k).for_each(|(x, &kk)| *x += delta * kk);
        dot(row, q)
    }
}

#[cfg(test)]
mod tests {
    use kv::{KvConfig, StateKv};

    use crate::conformance::{buf, read};
    use crate::reference::Reference;
    use crate::testing::data;
    use crate::*;

    /// A reference device whose one layer keeps a state of `floats` for one sequence.
    fn with_state(floats: usize) -> Reference {
        let mut dev = Reference::new();
        dev.kv_alloc(KvConfig {
            n_layer: 1,
            n_head_kv: 1,
            head_dim: 32,
            ty: gguf::GgmlType::F16,
            n_positions: 16,
            window: None,
            state: Some(StateKv {
                layers: 1,
                floats,
                n_slots: 1,
                n_snaps: 0,
                rows: 1,
            }),
            records: None,
            empty: 0,
        })
        .unwrap();
        dev
    }

    /// The reference's convolution over a prompt in three steps equals the convolution of
    /// the whole input written out, zero before position 0; a sequence starting over at
    /// position 0 starts from the zero state.
    #[test]
    fn steps_through_the_state_equal_the_whole_convolution() {
        let (width, k) = (8, 3);
        let mut dev = with_state((k - 1) * width);
        let taps = data(width * k, 5);
        let w = buf(&mut dev, &taps);
        let all = data(12 * width, 6);
        let (x, out) = (
            dev.alloc(12 * width).unwrap(),
            dev.alloc(12 * width).unwrap(),
        );
        let mut got = Vec::new();
        // The last span starts the sequence over: position 0 again, from the zero state.
        for span in [0..5, 5..7, 7..12, 0..5] {
            let rows: Vec<Row> = span.clone().map(|pos| Row { pos, seq: 0 }).collect();
            dev.begin(&Step {
                rows: &rows,
                tables: &[&[0]],
                windowed: &[],
                states: &[0],
                checkpoints: &[],
                bidirectional: &[],
            });
            dev.upload(x, 0, &all[span.start * width..span.end * width]);
            dev.conv1d(
                0,
                x,
                w,
                out,
                &ConvSpec {
                    width,
                    k,
                    silu: false,
                    bias: None,
                },
            );
            got.extend(read(&mut dev, out, span.len() * width));
            dev.finish();
        }
        assert_eq!(
            got[..5 * width],
            got[12 * width..],
            "starting over from zero"
        );
        for p in 0..12 {
            for c in 0..width {
                let want: f64 = (0..k)
                    .filter(|&j| p + j + 1 >= k)
                    .map(|j| taps[c * k + j] as f64 * all[(p + j + 1 - k) * width + c] as f64)
                    .sum();
                let g = got[p * width + c] as f64;
                assert!(
                    (g - want).abs() < 1e-6,
                    "position {p} channel {c}: {g} vs {want}"
                );
            }
        }
    }

    /// The delta rule over a prompt in three steps gives the outputs of the prompt in one
    /// step, bit for bit: a row's output depends on the state before it, not on the step.
    #[test]
    fn the_delta_rule_carries_its_state_across_steps() {
        let spec = DeltaSpec {
            n_k_heads: 1,
            n_v_heads: 2,
            head_dim: 8,
            at: 0,
        };
        let run = |spans: &[std::ops::Range<usize>]| {
            let mut dev = with_state(spec.state_floats());
            let all = |w: usize, seed| data(12 * w, seed);
            let (q, k, v) = (all(8, 1), all(8, 2), all(16, 3));
            let g: Vec<f32> = all(2, 4).iter().map(|x| x.abs()).collect();
            let beta: Vec<f32> = all(2, 5).iter().map(|x| 0.5 + x / 2.1).collect();
            let a = [-1.0f32, -0.5];
            let a = {
                let b = dev.alloc(2).unwrap();
                dev.upload(b, 0, &a);
                b
            };
            let bufs = [8, 8, 16, 2, 2, 16].map(|w| dev.alloc(12 * w).unwrap());
            let io = DeltaIo {
                q: bufs[0],
                k: bufs[1],
                v: bufs[2],
                g: bufs[3],
                beta: bufs[4],
                a,
                out: bufs[5],
            };
            let mut got = Vec::new();
            for span in spans {
                let rows: Vec<Row> = span.clone().map(|pos| Row { pos, seq: 0 }).collect();
                dev.begin(&Step {
                    rows: &rows,
                    tables: &[&[0]],
                    windowed: &[],
                    states: &[0],
                    checkpoints: &[],
                    bidirectional: &[],
                });
                for (b, src, w) in [
                    (io.q, &q, 8),
                    (io.k, &k, 8),
                    (io.v, &v, 16),
                    (io.g, &g, 2),
                    (io.beta, &beta, 2),
                ] {
                    dev.upload(b, 0, &src[span.start * w..span.end * w]);
                }
                dev.delta_net(0, &io, &spec);
                got.extend(read(&mut dev, io.out, span.len() * 16));
                dev.finish();
            }
            got
        };
        let whole = run(std::slice::from_ref(&(0..12)));
        assert_eq!(run(&[0..5, 5..7, 7..12]), whole);
        assert!(whole.iter().any(|&x| x != 0.0));
    }
}
