//! Collecting an importance matrix as `llama-imatrix` does: a [`Collector`] is a device
//! that hands every op to the device it wraps and, before each product of a weight matrix
//! with activations, adds the squares of the input rows to that matrix's [`Sums`]. The
//! forward, the executor and the recipes run unchanged on it.
//!
//! What is collected (`llama-imatrix`'s filter): every weight matrix of a block
//! (`blk.*`), and `output.weight` when asked ([`Collect::BlocksAndOutput`]); never the
//! embedding table, which is only read by rows. A matrix the loader cut by rows
//! (`name[i]`: a fused `attn_qkv`, a fused gate and up) is multiplied with all its parts
//! in one call and is one entry, `name`, counted once per row. A mixture's router is a
//! plain matrix (every row); its experts (`name[e]`, the slabs of a 3-D tensor) are one
//! entry of one row of sums per expert, each over the rows routed to that expert only:
//! the gate and up experts over the block's input, the down experts over
//! `silu(gate) · up` of the rows routed to them.
//!
//! Worked example (`k = 2`, 4 experts, 3 rows `x0, x1, x2`): rows 0, 1, 2 choose experts
//! (2, 0), (2, 3), (0, 2). `ffn_gate_exps` gets expert 0: `x0² + x2²` (count 2), expert 2:
//! `x0² + x1² + x2²` (count 3), expert 3: `x1²` (count 1), expert 1: nothing (count 0);
//! `ffn_gate_inp` gets `x0² + x1² + x2²` (count 3). Sums are taken in `llama-imatrix`'s
//! order: by choice rank, then by row.
//!
//! Not collected, unlike `llama-imatrix`: a vector multiplied inside the mixture op (the
//! qwen2moe shared expert's 1-D gate `ffn_gate_inp_shexp`, which `llama-quantize` never
//! quantizes). Every product is counted, where `llama-imatrix` skips dense products of
//! fewer than 16 rows (only a chunk shorter than that, or its last part past a multiple of
//! the ubatch, has such forwards here).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use device::{Buf, Device, Mat, MatOut, MatrixSource, MoeSpec, Progress, Result, Role, Step};

use super::Sums;

/// Which weight matrices a [`Collector`] collects for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Collect {
    /// The matrices of the blocks (`blk.*`): `llama-imatrix`'s default.
    Blocks,
    /// Those and `output.weight` (`llama-imatrix --process-output`).
    BlocksAndOutput,
}

impl Collect {
    fn wants(self, name: &str) -> bool {
        name.starts_with("blk.") || (self == Collect::BlocksAndOutput && name == "output.weight")
    }
}

/// The sums collected so far, by tensor name; shared between a [`Collector`] and whoever
/// reads them after a forward.
pub type SharedSums = Arc<Mutex<BTreeMap<String, Sums>>>;

/// A device that collects the sums of `x²` of its matrices' inputs (see the module doc);
/// every op is the wrapped device's.
pub struct Collector {
    inner: Box<dyn Device>,
    collect: Collect,
    /// Per collected matrix: its entry's name and row length.
    mats: HashMap<Mat, (String, usize)>,
    sums: SharedSums,
    host: Vec<f32>,
}

impl Collector {
    pub fn new(inner: Box<dyn Device>, collect: Collect) -> Collector {
        Collector {
            inner,
            collect,
            mats: HashMap::new(),
            sums: SharedSums::default(),
            host: Vec::new(),
        }
    }

    /// The sums this collector adds to.
    pub fn sums(&self) -> SharedSums {
        self.sums.clone()
    }

    /// `x` (`[rows, n_cols]`) read back into `self.host`.
    fn read(&mut self, x: Buf, rows: usize, n_cols: usize) {
        self.host.resize(rows * n_cols, 0.0);
        self.inner.download(x, 0, &mut self.host);
    }

    /// The entry of `m` and its row length, when it is collected.
    fn entry(&self, m: Mat) -> Option<(&str, usize)> {
        self.mats.get(&m).map(|(n, c)| (n.as_str(), *c))
    }

    /// The mixture's sums: its router's (every row), its gate and up experts' (each
    /// expert's routed rows of `x`) and its down experts' (`silu(gate) · up` of those rows),
    /// computed on the wrapped device with the mixture's own routing and scratch.
    fn collect_moe(&mut self, spec: &MoeSpec<'_>, x: Buf, rows: usize) {
        let Some((router, e)) = self.entry(spec.router).map(|(n, c)| (n.to_string(), c)) else {
            return;
        };
        let (p, sc, ff) = (&spec.routing, spec.scratch, spec.n_ff_exp);
        let (ne, k) = (p.n_expert, p.k);
        self.read(x, rows, e);
        let xs = std::mem::take(&mut self.host);
        let dev = &mut *self.inner;
        dev.matmul(&[spec.router], x, rows, &[MatOut::to(sc.probs)]);
        let mut logits = vec![0f32; rows * ne];
        dev.download(sc.probs, 0, &mut logits);
        let mut bias = vec![0f32; ne];
        if let Some(b) = spec.choice_bias {
            dev.download(b, 0, &mut bias);
        }
        let mut routed: Vec<Vec<usize>> = vec![Vec::new(); ne];
        let mut picks = Vec::with_capacity(rows * k);
        for (r, row) in logits.chunks_exact(ne).enumerate() {
            let given = spec.given.map(|g| &g[r * k..(r + 1) * k]);
            let bias = spec.choice_bias.map(|_| &bias[..]);
            for (ex, _) in device::reference::route(p, row, bias, given) {
                routed[ex].push(r);
                picks.push(ex);
            }
        }
        // Per expert, `silu(gate) · up` of its rows (`[routed[ex].len(), ff]`).
        let mut acts: Vec<Vec<f32>> = vec![Vec::new(); ne];
        for (ex, rs) in routed.iter().enumerate().filter(|(_, rs)| !rs.is_empty()) {
            let n = rs.len();
            dev.gather_rows(x, rs, e, sc.x);
            dev.matmul(
                &[spec.gate[ex], spec.up[ex]],
                sc.x,
                n,
                &[MatOut::to(sc.gate), MatOut::to(sc.up)],
            );
            match spec.limit {
                Some(c) => dev.swiglu_limited(sc.gate, sc.up, n * ff, c),
                None => dev.swiglu(sc.gate, sc.up, n * ff),
            }
            acts[ex].resize(n * ff, 0.0);
            dev.download(sc.gate, 0, &mut acts[ex]);
        }
        let names = |ws: &[Mat]| ws.first().and_then(|&m| self.entry(m)).map(|(n, _)| n);
        let (gate, up, down) = (names(spec.gate), names(spec.up), names(spec.down));
        let mut sums = self
            .sums
            .lock()
            .expect("no thread panicked holding the sums");
        add_to(&mut sums, &router, [1, 0], &xs, e);
        for j in 0..k {
            for r in 0..rows {
                let ex = picks[r * k + j];
                let xr = &xs[r * e..(r + 1) * e];
                for name in [gate, up].into_iter().flatten() {
                    add_to(&mut sums, name, [ne, ex], xr, e);
                }
                if let Some(name) = down {
                    let i = routed[ex].partition_point(|&q| q < r);
                    add_to(
                        &mut sums,
                        name,
                        [ne, ex],
                        &acts[ex][i * ff..(i + 1) * ff],
                        ff,
                    );
                }
            }
        }
        drop(sums);
        self.host = xs;
    }
}

/// Adds `x` (`[rows, n_cols]`) to the sums of matrix `mat` of the `n_mat` of entry `name`.
fn add_to(
    sums: &mut BTreeMap<String, Sums>,
    name: &str,
    [n_mat, mat]: [usize; 2],
    x: &[f32],
    n_cols: usize,
) {
    if !sums.contains_key(name) {
        sums.insert(name.to_string(), Sums::new(n_cols, n_mat));
    }
    sums.get_mut(name).expect("inserted above").add(mat, x);
}

/// The entry a matrix named `name` (as uploaded) belongs to: `name` without the `[i]` of
/// a part or an expert.
fn entry_name(name: &str) -> &str {
    match name.rfind('[') {
        Some(i) if name.ends_with(']') => &name[..i],
        _ => name,
    }
}

impl Device for Collector {
    device::delegate_ops!(inner);

    fn describe(&self) -> String {
        format!(
            "{} (collecting an importance matrix)",
            self.inner.describe()
        )
    }
    fn upload_matrices(
        &mut self,
        srcs: &[MatrixSource],
        progress: &Progress<'_>,
    ) -> Result<Vec<Mat>> {
        let mats = self.inner.upload_matrices(srcs, progress)?;
        for (s, &m) in srcs.iter().zip(&mats) {
            let name = entry_name(&s.name);
            if s.role == Role::Multiply && self.collect.wants(name) {
                self.mats.insert(m, (name.to_string(), s.n_cols));
            }
        }
        Ok(mats)
    }
    fn begin(&mut self, step: &Step<'_>) {
        self.inner.begin(step)
    }
    /// Adds `x` to the sums of each collected matrix of `ws` (once per entry: the parts of
    /// one matrix share it), then multiplies.
    fn matmul(&mut self, ws: &[Mat], x: Buf, rows: usize, outs: &[MatOut]) {
        let mut entries: Vec<(String, usize)> = Vec::new();
        for &w in ws {
            if let Some((name, n_cols)) = self.entry(w) {
                if entries.iter().all(|(n, _)| n != name) {
                    entries.push((name.to_string(), n_cols));
                }
            }
        }
        if let Some(&(_, n_cols)) = entries.first() {
            self.read(x, rows, n_cols);
            let mut sums = self
                .sums
                .lock()
                .expect("no thread panicked holding the sums");
            for (name, _) in &entries {
                add_to(&mut sums, name, [1, 0], &self.host, n_cols);
            }
        }
        self.inner.matmul(ws, x, rows, outs)
    }
    /// Collects the mixture's sums (see [`Collector`]), then computes it.
    fn moe(&mut self, spec: &MoeSpec<'_>, x: Buf, rows: usize, hidden: Buf) {
        self.collect_moe(spec, x, rows);
        self.inner.moe(spec, x, rows, hidden)
    }
}
