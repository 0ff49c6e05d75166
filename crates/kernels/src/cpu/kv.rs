//! The KV pool's storage on the CPU, and paged attention over it.

use std::cell::RefCell;

use device::records::Records;
use device::{AttnSpec, Row, Tables};
use kv::{KvConfig, BLOCK_SIZE};

use crate::attention::{attend, AttentionScratch, KvView};
use crate::formats::quantize_row;
use crate::pool::SharedOut;
use crate::ThreadPool;

thread_local! {
    static ATTN: RefCell<AttentionScratch> = RefCell::new(AttentionScratch::default());
}

/// Per layer, keys and values of every block of its class:
/// `[blocks, BLOCK_SIZE, n_head_kv, head_dim]` of the pool's type. Allocated and touched
/// once, in `new`.
pub(super) struct KvStore {
    cfg: KvConfig,
    keys: Vec<Vec<u8>>,
    values: Vec<Vec<u8>>,
}

fn touched(n: usize) -> Vec<u8> {
    let mut v = vec![0u8; n];
    for i in (0..n).step_by(4096) {
        // SAFETY: in bounds; the volatile write makes the kernel back the page now, so
        // the memory plan is what the process really holds.
        unsafe { std::ptr::write_volatile(v.as_mut_ptr().add(i), 0) };
    }
    v
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
        let layer = |l: usize| touched(cfg.layer_blocks(l) * cfg.block_bytes());
        Ok(KvStore {
            cfg,
            keys: (0..cfg.n_layer).map(layer).collect(),
            values: (0..cfg.n_layer).map(layer).collect(),
        })
    }

    /// Layer `layer`'s storage as records ([`device::records`]) of the sequences' blocks
    /// `tables`.
    pub fn records<'a>(&'a mut self, layer: usize, tables: &'a Tables) -> Records<'a> {
        let tables = tables.of(&self.cfg, layer);
        let (keys, values) = (&mut self.keys[layer], &mut self.values[layer]);
        Records::new(&self.cfg, keys, values, tables)
    }

    /// The stores of the layers that keep every position: keys, then values.
    fn full_stores(&mut self) -> Vec<&mut Vec<u8>> {
        device::full_stores(&self.cfg, &mut self.keys, &mut self.values)
    }

    /// Appends block `block`'s bytes: the keys of every layer keeping every position, then
    /// their values.
    pub fn read_block(&mut self, block: u32, out: &mut Vec<u8>) {
        let bb = self.cfg.block_bytes();
        let f = block as usize * bb;
        for store in self.full_stores() {
            out.extend_from_slice(&store[f..f + bb]);
        }
    }

    /// Writes block `block` from bytes laid out as [`Self::read_block`] gives them.
    pub fn write_block(&mut self, block: u32, data: &[u8]) {
        let bb = self.cfg.block_bytes();
        let t = block as usize * bb;
        for (store, src) in self.full_stores().into_iter().zip(data.chunks_exact(bb)) {
            store[t..t + bb].copy_from_slice(src);
        }
    }

    pub fn copy_block(&mut self, from: u32, to: u32) {
        let bb = self.cfg.block_bytes();
        let (f, t) = (from as usize * bb, to as usize * bb);
        for store in self.full_stores() {
            store.copy_within(f..f + bb, t);
        }
    }

    /// Stores row `r`'s keys `k[r]` and values `v[r]` (`[n_head_kv · head_dim]` each) at
    /// position `rows[r].pos` of the sequence with blocks `tables.of(layer)[rows[r].seq]`.
    pub fn store(&mut self, layer: usize, rows: &[Row], tables: &Tables, k: &[f32], v: &[f32]) {
        let tables = tables.of(&self.cfg, layer);
        let pb = self.cfg.position_bytes();
        let (bb, width) = (
            self.cfg.block_bytes(),
            self.cfg.n_head_kv * self.cfg.head_dim,
        );
        for (r, row) in rows.iter().enumerate() {
            let table = &tables[row.seq];
            assert!(
                row.pos < table.len() * BLOCK_SIZE,
                "position {} not reserved",
                row.pos
            );
            let at = table[row.pos / BLOCK_SIZE] as usize * bb + (row.pos % BLOCK_SIZE) * pb;
            let (kr, vr) = (
                &k[r * width..(r + 1) * width],
                &v[r * width..(r + 1) * width],
            );
            let ty = self.cfg.ty;
            quantize_row(ty, kr, &mut self.keys[layer][at..at + pb]).expect("validated KV type");
            quantize_row(ty, vr, &mut self.values[layer][at..at + pb]).expect("validated KV type");
        }
    }

    /// `out[r]` = row `r`'s query `q[r]` over positions `spec.span(rows[r].pos)` of its
    /// sequence.
    /// A sequence's consecutive rows are taken in tiles of up to [`TILE`], which share
    /// each chunk of keys and values; one unit of work per (tile, KV head), the units
    /// interleaved over the threads: a row's cost grows with its position, so contiguous
    /// ranges would leave the thread with the early rows of a prompt idle.
    #[allow(clippy::too_many_arguments)]
    pub fn attend(
        &self,
        pool: &ThreadPool,
        layer: usize,
        rows: &[Row],
        tables: &Tables,
        q: &[f32],
        out: &mut [f32],
        spec: &AttnSpec,
    ) {
        let bb = self.cfg.block_bytes();
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
            .of(&self.cfg, layer)
            .iter()
            .map(|t| {
                (
                    slices(&self.keys[layer], t, bb),
                    slices(&self.values[layer], t, bb),
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
        let tiles = tiles(rows);
        let shared = SharedOut::new(&mut out[..n * qd]);
        pool.run(&|t, nt| {
            ATTN.with(|a| {
                let mut a = a.borrow_mut();
                for unit in (t..tiles.len() * nkv).step_by(nt) {
                    let (tile, g) = (tiles[unit / nkv].clone(), unit % nkv);
                    let (keys, values) = &views[rows[tile.start].seq];
                    let qs: Vec<&[f32]> = tile.clone().map(|r| &q[r * qd..(r + 1) * qd]).collect();
                    let spans: Vec<_> = tile.clone().map(|r| spec.span(rows[r].pos)).collect();
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
                        g * group..(g + 1) * group,
                        spec.scale,
                        &mut a,
                        &mut outs,
                    );
                }
            });
        });
    }

    fn view<'a>(&self, blocks: &'a [&'a [u8]]) -> KvView<'a> {
        KvView {
            ty: self.cfg.ty,
            blocks,
            block_size: BLOCK_SIZE,
            n_head_kv: self.cfg.n_head_kv,
            head_dim: self.cfg.head_dim,
        }
    }
}
