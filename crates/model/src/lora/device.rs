//! [`LoraDevice`]: a device that adds the adapters' products to its weights' products.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use device::{Buf, Device, Mat, MatOut, MatrixSource, MoeSpec, Progress, Result, Role, Step};

use super::Adapter;

/// The user's scale of each adapter, per sequence of the next forward (in the order of
/// its [`Step::tables`]); taken by that forward's `begin`. An adapter past the end of a
/// sequence's list has scale 0; a sequence not listed, or listed as `None`, the adapters'
/// own [`Adapter::scale`].
pub type SharedScales = Arc<Mutex<Vec<Option<Vec<f32>>>>>;

/// An adapted matrix's factors on the device.
#[derive(Debug, Clone, Copy)]
struct Target {
    adapter: usize,
    rank: usize,
    a: Mat,
    b: Mat,
}

/// A device whose products with the adapted matrices of [`Adapter`]s also add, per row,
/// `f · B·(A·x)` (the module doc of [`super`]): `A·x` into a scratch buffer, each row
/// multiplied by its factor (a buffer written when the step begins), then `B·` that added
/// to the product's output (or its residual, where the product adds into one). A row whose
/// sequence gives an adapter scale 0 adds `B·0 = 0`; an adapter no row of the step uses is
/// skipped, so a forward without adapters computes what the wrapped device computes.
/// Every op is the wrapped device's; each row's arithmetic depends on that row alone.
pub struct LoraDevice {
    inner: Box<dyn Device>,
    adapters: Vec<Arc<Adapter>>,
    targets: HashMap<Mat, Vec<Target>>,
    scales: SharedScales,
    max_rows: usize,
    /// `[max_rows, max rank]` and `[max_rows, max n_out]`, allocated with the targets.
    low: Option<Buf>,
    high: Option<Buf>,
    /// Per adapter and rank: `[max_rows, rank]`, each row its factor, for this step.
    factors: HashMap<(usize, usize), Buf>,
    /// The adapters some row of this step uses, and the step's rows.
    active: Vec<bool>,
    rows: usize,
}

impl LoraDevice {
    /// Wraps `inner` for forwards of at most `max_rows` rows.
    pub fn new(
        inner: Box<dyn Device>,
        adapters: Vec<Arc<Adapter>>,
        scales: SharedScales,
        max_rows: usize,
    ) -> LoraDevice {
        LoraDevice {
            active: vec![false; adapters.len()],
            inner,
            adapters,
            targets: HashMap::new(),
            scales,
            max_rows,
            low: None,
            high: None,
            factors: HashMap::new(),
            rows: 0,
        }
    }

    /// Uploads the factors of the adapters' pairs whose targets are among `srcs` (uploaded
    /// as `mats`), with their scratch buffers.
    fn upload_pairs(
        &mut self,
        srcs: &[MatrixSource],
        mats: &[Mat],
        progress: &Progress<'_>,
    ) -> Result<()> {
        let mut found = Vec::new();
        let mut factors = Vec::new();
        for (i, adapter) in self.adapters.iter().enumerate() {
            for p in &adapter.pairs {
                let Some(k) = srcs.iter().position(|s| s.name == p.target) else {
                    continue;
                };
                found.push((mats[k], i, p.rank, p.b.n_rows));
                for w in [&p.a, &p.b] {
                    factors.push(w.source(&adapter.file, Role::Multiply));
                }
            }
        }
        if found.is_empty() {
            return Ok(());
        }
        let uploaded = self.inner.upload_matrices(&factors, progress)?;
        let (mut max_rank, mut max_out) = (0, 0);
        for (&(base, adapter, rank, n_out), ab) in found.iter().zip(uploaded.chunks(2)) {
            self.targets.entry(base).or_default().push(Target {
                adapter,
                rank,
                a: ab[0],
                b: ab[1],
            });
            max_rank = max_rank.max(rank);
            max_out = max_out.max(n_out);
            if !self.factors.contains_key(&(adapter, rank)) {
                let buf = self.inner.alloc(self.max_rows * rank)?;
                self.factors.insert((adapter, rank), buf);
            }
        }
        self.low = Some(self.inner.alloc(self.max_rows * max_rank)?);
        self.high = Some(self.inner.alloc(self.max_rows * max_out)?);
        Ok(())
    }
}

impl Device for LoraDevice {
    device::delegate_ops!(inner);

    fn describe(&self) -> String {
        format!(
            "{} with {} LoRA adapter(s)",
            self.inner.describe(),
            self.adapters.len()
        )
    }

    fn upload_matrices(
        &mut self,
        srcs: &[MatrixSource],
        progress: &Progress<'_>,
    ) -> Result<Vec<Mat>> {
        let mats = self.inner.upload_matrices(srcs, progress)?;
        self.upload_pairs(srcs, &mats, progress)?;
        Ok(mats)
    }

    /// Writes each adapter's per-row factors for the step's rows from the scales of their
    /// sequences.
    fn begin(&mut self, step: &Step<'_>) {
        let scales = std::mem::take(&mut *self.scales.lock().expect("no thread panicked"));
        self.rows = step.rows.len();
        assert!(self.rows <= self.max_rows, "a forward within its ubatch");
        let adapters = &self.adapters;
        let scale = |seq: usize, a: usize| match scales.get(seq) {
            Some(Some(s)) => s.get(a).copied().unwrap_or(0.0),
            _ => adapters[a].scale,
        };
        self.inner.begin(step);
        for (a, active) in self.active.iter_mut().enumerate() {
            *active = step.rows.iter().any(|r| scale(r.seq, a) != 0.0);
        }
        for (&(a, rank), &buf) in &self.factors {
            if !self.active[a] {
                continue;
            }
            let data: Vec<f32> = step
                .rows
                .iter()
                .flat_map(|r| {
                    let f = self.adapters[a].factor(rank, scale(r.seq, a));
                    std::iter::repeat_n(f, rank)
                })
                .collect();
            self.inner.upload(buf, 0, &data);
        }
    }

    /// The wrapped product, then each active adapter's term of each adapted matrix of
    /// `ws`. The adapted matrices are the blocks', multiplied with the step's rows.
    fn matmul(&mut self, ws: &[Mat], x: Buf, rows: usize, outs: &[MatOut]) {
        self.inner.matmul(ws, x, rows, outs);
        let (Some(low), Some(high)) = (self.low, self.high) else {
            return;
        };
        for (w, out) in ws.iter().zip(outs) {
            let Some(targets) = self.targets.get(w) else {
                continue;
            };
            for t in targets.iter().filter(|t| self.active[t.adapter]) {
                assert_eq!(
                    rows, self.rows,
                    "an adapted matrix multiplies the step's rows"
                );
                self.inner.matmul(&[t.a], x, rows, &[MatOut::to(low)]);
                self.inner
                    .mul(low, self.factors[&(t.adapter, t.rank)], rows * t.rank);
                let sum = out.residual.unwrap_or(out.y);
                let add = MatOut {
                    y: high,
                    bias: None,
                    residual: Some(sum),
                };
                self.inner.matmul(&[t.b], low, rows, &[add]);
            }
        }
    }

    fn moe(&mut self, spec: &MoeSpec<'_>, x: Buf, rows: usize, hidden: Buf) {
        self.inner.moe(spec, x, rows, hidden)
    }
}
