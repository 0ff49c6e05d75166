//! Mixtures of experts on the GPU: the router's logits (and the choice's bias, where the
//! block has one) are read back and each row is routed here, or takes the experts it is
//! given (as [`device::reference::route`] does: one code for the choice), every chosen
//! expert's matrices multiply the rows that chose it in one run each (SwiGLU clamped where
//! the block has a limit), and one kernel sums each row's outputs in the order it chose
//! them. The read-back of `[rows, n_expert]` logits
//! is the one mid-forward wait of a mixture model's forward.

use device::{Buf, Device, ExpertNet, MoeSpec};

use crate::context::Bind::{Arena as A, Buf as B};
use crate::gpu::{grid, Gpu};
use crate::pipelines::Kernel;

impl Gpu {
    /// [`device::Device::moe`].
    pub(crate) fn mixture(&mut self, spec: &MoeSpec<'_>, x: Buf, rows: usize, hidden: Buf) {
        if rows == 0 {
            return;
        }
        let (e, ff, ne, k) = (
            spec.n_embd,
            spec.n_ff_exp,
            spec.routing.n_expert,
            spec.routing.k,
        );
        let sc = spec.scratch;
        self.matmul_rows(spec.router, (x, 0), rows, (sc.probs, 0), None, 0);
        let logits = self.read_floats(sc.probs, 0, rows * ne);
        let bias = spec.choice_bias.map(|b| self.read_floats(b, 0, ne));
        let given = |r: usize| spec.given.map(|g| &g[r * k..(r + 1) * k]);
        let picks: Vec<Vec<(usize, f32)>> = logits
            .chunks_exact(ne)
            .enumerate()
            .map(|(r, l)| device::reference::route(&spec.routing, l, bias.as_deref(), given(r)))
            .collect();
        let mut chose: Vec<Vec<(usize, usize)>> = vec![Vec::new(); ne];
        for (r, p) in picks.iter().enumerate() {
            assert_eq!(p.len(), k, "a row routed to k experts");
            for (j, &(ex, _)) in p.iter().enumerate() {
                chose[ex].push((r, j));
            }
        }
        let mut slot = vec![0u32; rows * k];
        let mut order = Vec::with_capacity(rows * k);
        let mut runs = Vec::new();
        for (ex, list) in chose.iter().enumerate().filter(|(_, l)| !l.is_empty()) {
            runs.push((ex, order.len(), list.len()));
            for &(r, j) in list {
                slot[r * k + j] = order.len() as u32;
                order.push(r);
            }
        }
        self.gather_rows(x, &order, e, sc.x);
        // The experts' activations into sc.gate.
        let acts = order.len() * ff;
        for &(ex, s0, n) in &runs {
            match spec.net {
                ExpertNet::Swiglu => {
                    self.matmul_rows(spec.gate[ex], (sc.x, s0), n, (sc.gate, s0), None, 0);
                    self.matmul_rows(spec.up[ex], (sc.x, s0), n, (sc.up, s0), None, 0);
                }
                ExpertNet::ReluSqr => {
                    self.matmul_rows(spec.up[ex], (sc.x, s0), n, (sc.gate, s0), None, 0)
                }
            }
        }
        match (spec.net, spec.limit) {
            (ExpertNet::Swiglu, None) => self.eltwise(Kernel::Swiglu, sc.gate, sc.up, acts, 0.0),
            (ExpertNet::Swiglu, Some(c)) => {
                self.eltwise(Kernel::SwigluLimit, sc.gate, sc.up, acts, c)
            }
            (ExpertNet::ReluSqr, _) => self.eltwise(Kernel::ReluSqr, sc.gate, sc.gate, acts, 0.0),
        }
        for &(ex, s0, n) in &runs {
            self.matmul_rows(spec.down[ex], (sc.gate, s0), n, (sc.out, s0), None, 0);
        }
        let words: Vec<u32> = picks
            .iter()
            .flatten()
            .zip(&slot)
            .flat_map(|(&(_, w), &s)| [s, w.to_bits()])
            .collect();
        let picks = self.rec.push(&self.ctx, bytemuck::cast_slice(&words));
        let g = grid(rows);
        let flags = spec.shared.is_some() as u32
            | (spec.shared.is_some_and(|s| s.gate.is_some()) as u32) << 1;
        let p = self.params([rows as u32, k as u32, e as u32, flags, g[0], 0, 0, 0]);
        let shared = spec.shared.map_or(self.dummy.clone(), |s| self.buf(s.out));
        let gate = spec
            .shared
            .and_then(|s| s.gate)
            .map_or(self.dummy.clone(), |b| self.buf(b));
        let [hidden, out, x] = [hidden, sc.out, x].map(|b| self.buf(b));
        self.run(
            Kernel::MoeCombine,
            &[
                B(&hidden),
                B(&out),
                A(picks),
                A(p),
                B(&shared),
                B(&gate),
                B(&x),
            ],
            g,
        );
        self.moe_stats.blocks += 1;
        self.moe_stats.experts += runs.len() as u64;
    }
}
