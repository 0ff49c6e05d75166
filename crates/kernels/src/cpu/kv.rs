//! The KV pool's storage on the CPU, and paged attention over it.

use std::borrow::Cow;
use std::cell::RefCell;

use device::host_kv::HostKv;
use device::{AttnSpec, Row, Tables};
use kv::{KvConfig, BLOCK_SIZE};

use crate::attention::{attend, AttentionScratch, KvView};
use crate::formats::quantize_kv;
use crate::ops::hadamard;
use crate::pool::SharedOut;
use crate::ThreadPool;

thread_local! {
    static ATTN: RefCell<AttentionScratch> = RefCell::new(AttentionScratch::default());
}

/// The pool's stores ([`HostKv`]), allocated and touched once, in `new`; a plain layer's
/// are `[blocks, BLOCK_SIZE, n_head_kv, head_dim]` of the pool's type.
pub(super) struct KvStore(HostKv);

fn touched(n: usize) -> Vec<u8> {
    let mut v = vec![0u8; n];
    for i in (0..n).step_by(4096) {
        // SAFETY: in bounds; the volatile write makes the kernel back the page now, so
        // the memory plan is what the process really holds.
        unsafe { std::ptr::write_volatile(v.as_mut_ptr().add(i), 0) };
    }
    v
}

/// `x` under [`hadamard`] over blocks of `n`.
fn rotated(x: &[f32], n: usize) -> Cow<'_, [f32]> {
    let mut y = x.to_vec();
    hadamard(&mut y, n);
    Cow::Owned(y)
}

/// Rows of one sequence per attention tile.
pub(super) const TILE: usize = 8;

/// `rows` cut into tiles: runs of consecutive rows of one sequence, at most [`TILE`] each.
fn tiles(rows: &[Row]) -> Vec<std::ops::Range<usize>> {
    let mut out: Vec<std::ops::Range<usize>> = Vec::new();
    for (i, r) in rows.iter().enumerate() {
        match out.last_mut() {
            Some(t) if t.len() < TILE && rows[t.start].seq == r.seq => t.end = i + 1,
            _ => out.push(i..i + 1),
        }
    }
    out
}

impl KvStore {
    pub fn new(cfg: KvConfig) -> device::Result<KvStore> {
        if !crate::formats::is_quantize_supported(cfg.ty) {
            return Err(device::Error::UnsupportedType(cfg.ty));
        }
        Ok(KvStore(HostKv::new(cfg, touched)))
    }

    /// The stores, for block moves and record layers.
    pub fn host(&mut self) -> &mut HostKv {
        &mut self.0
    }

    /// Stores row `r`'s keys `k[r]` and values `v[r]` (`[n_head_kv · head_dim]` each) at
    /// position `rows[r].pos` of the sequence with blocks `tables.of(layer)[rows[r].seq]`,
    /// rotated first where the pool is ([`kv::Rotation`]).
    pub fn store(&mut self, layer: usize, rows: &[Row], tables: &Tables, k: &[f32], v: &[f32]) {
        let kv = &mut self.0;
        let tables = tables.of(&kv.cfg, layer);
        let pb = kv.cfg.position_bytes();
        let width = kv.cfg.n_head_kv * kv.cfg.head_dim;
        let rotation = kv.cfg.rotation();
        for (r, row) in rows.iter().enumerate() {
            let table = &tables[row.seq];
            assert!(
                row.pos < table.len() * BLOCK_SIZE,
                "position {} not reserved",
                row.pos
            );
            let at = kv.at(table, row.pos);
            let (kr, vr) = (
                &k[r * width..(r + 1) * width],
                &v[r * width..(r + 1) * width],
            );
            let (kr, vr) = match rotation {
                Some(rot) => (rotated(kr, rot.keys), rotated(vr, rot.values)),
                None => (Cow::Borrowed(kr), Cow::Borrowed(vr)),
            };
            let ty = kv.cfg.ty;
            quantize_kv(ty, &kr, &mut kv.keys[layer][at..at + pb]).expect("validated KV type");
            quantize_kv(ty, &vr, &mut kv.values[layer][at..at + pb]).expect("validated KV type");
        }
    }

    /// `out[r]` = row `r`'s query `q[r]` over positions `spec.span(rows[r].pos)` of its
    /// sequence; in a rotated pool ([`kv::Rotation`]) each unit rotates its heads' queries
    /// as the keys were and their outputs back as the values were.
    /// A sequence's consecutive rows are taken in tiles of up to [`TILE`], which share
    /// each chunk of keys and values; one unit of work per (tile, KV head), the units
    /// interleaved over the threads: a row's cost grows with its position, so contiguous
    /// ranges would leave the thread with the early rows of a prompt idle.
    #[allow(clippy::too_many_arguments)]
    pub fn attend(
        &self,
        pool: &ThreadPool,
        layer: usize,
        (rows, bidirectional): (&[Row], &[usize]),
        tables: &Tables,
        q: &[f32],
        out: &mut [f32],
        spec: &AttnSpec,
    ) {
        let kv = &self.0;
        let bb = kv.cfg.block_bytes();
        fn slices<'s>(store: &'s [u8], t: &[u32], bb: usize) -> Vec<&'s [u8]> {
            t.iter()
                .map(|&b| match b {
                    u32::MAX => &[][..],
                    b => &store[b as usize * bb..(b as usize + 1) * bb],
                })
                .collect()
        }
        type Blocks<'s> = Vec<&'s [u8]>;
        let blocks: Vec<(Blocks, Blocks)> = tables
            .of(&kv.cfg, layer)
            .iter()
            .map(|t| {
                (
                    slices(&kv.keys[layer], t, bb),
                    slices(&kv.values[layer], t, bb),
                )
            })
            .collect();
        let views: Vec<(KvView, KvView)> = blocks
            .iter()
            .map(|(k, v)| (self.view(k), self.view(v)))
            .collect();
        let (n, nkv, hd) = (rows.len(), spec.n_head_kv, spec.head_dim);
        let group = spec.n_head / nkv;
        let qd = spec.n_head * hd;
        let rotation = kv.cfg.rotation();
        let tiles = tiles(rows);
        let ends = spec.step_ends(rows, bidirectional);
        let shared = SharedOut::new(&mut out[..n * qd]);
        pool.run(&|t, nt| {
            ATTN.with(|a| {
                let mut a = a.borrow_mut();
                for unit in (t..tiles.len() * nkv).step_by(nt) {
                    let (tile, g) = (tiles[unit / nkv].clone(), unit % nkv);
                    let (keys, values) = &views[rows[tile.start].seq];
                    let heads = g * group * hd..(g + 1) * group * hd;
                    let qs: Vec<Cow<[f32]>> = tile
                        .clone()
                        .map(|r| {
                            let qh = &q[r * qd..(r + 1) * qd][heads.clone()];
                            match rotation {
                                Some(rot) => rotated(qh, rot.keys),
                                None => Cow::Borrowed(qh),
                            }
                        })
                        .collect();
                    let qs: Vec<&[f32]> = qs.iter().map(|q| &q[..]).collect();
                    let spans: Vec<_> =
                        tile.clone().map(|r| spec.span_of(rows[r], &ends)).collect();
                    // SAFETY: unit (tile, g) alone writes heads g*group..(g+1)*group of
                    // the tile's rows.
                    let mut outs: Vec<&mut [f32]> = tile
                        .map(|r| unsafe { shared.slice(r * qd + g * group * hd, group * hd) })
                        .collect();
                    attend(
                        &qs,
                        &spans,
                        keys,
                        values,
                        g,
                        0..group,
                        spec.scale,
                        &mut a,
                        &mut outs,
                    );
                    if let Some(rot) = rotation {
                        outs.iter_mut().for_each(|o| hadamard(o, rot.values));
                    }
                }
            });
        });
    }

    fn view<'a>(&self, blocks: &'a [&'a [u8]]) -> KvView<'a> {
        let cfg = &self.0.cfg;
        KvView {
            ty: cfg.ty,
            blocks,
            block_size: BLOCK_SIZE,
            n_head_kv: cfg.n_head_kv,
            head_dim: cfg.head_dim,
        }
    }
}
