//! The KV pool's storage in host memory, as the host backends (the CPU, the reference)
//! keep it: per KV layer one byte store for its keys and one for its values, each
//! `[its blocks, BLOCK_SIZE, a position's bytes]` ([`KvConfig::store_block_bytes`]).

use kv::{KvConfig, BLOCK_SIZE};

use crate::formats::dequantize_row;
use crate::records::Records;
use crate::Tables;

/// See the module doc.
pub struct HostKv {
    pub cfg: KvConfig,
    pub keys: Vec<Vec<u8>>,
    pub values: Vec<Vec<u8>>,
}

impl HostKv {
    /// Every store of a pool shaped `cfg`, each from `alloc(bytes)`.
    pub fn new(cfg: KvConfig, alloc: impl Fn(usize) -> Vec<u8>) -> HostKv {
        let store = |l: usize, v: bool| alloc(cfg.store_blocks(l, v) * cfg.store_block_bytes(l, v));
        HostKv {
            keys: (0..cfg.n_layer).map(|l| store(l, false)).collect(),
            values: (0..cfg.n_layer).map(|l| store(l, true)).collect(),
            cfg,
        }
    }

    /// The byte offset of position `pos` of a sequence with blocks `table` in a plain (not
    /// record) layer's store.
    pub fn at(&self, table: &[u32], pos: usize) -> usize {
        table[pos / BLOCK_SIZE] as usize * self.cfg.block_bytes()
            + (pos % BLOCK_SIZE) * self.cfg.position_bytes()
    }

    /// The `[n_head_kv · head_dim]` vector at `pos` of a plain layer's store, dequantized.
    pub fn read(&self, store: &[u8], table: &[u32], pos: usize, out: &mut [f32]) {
        let at = self.at(table, pos);
        let pb = self.cfg.position_bytes();
        dequantize_row(self.cfg.ty, &store[at..at + pb], out).expect("validated KV type");
    }

    /// The stores that keep every position (`windowed` false: the layout of
    /// [`crate::Device::kv_read_block`]) or the windowed class's (true: of
    /// [`crate::Device::kv_read_companion`]), with their bytes per block: keys of every
    /// layer, then values.
    fn stores(&mut self, windowed: bool) -> Vec<(&mut Vec<u8>, usize)> {
        let cfg = &self.cfg;
        let keys = self.keys.iter_mut().enumerate().map(|(l, s)| (l, false, s));
        let values = self
            .values
            .iter_mut()
            .enumerate()
            .map(|(l, s)| (l, true, s));
        keys.chain(values)
            .filter(|&(l, v, _)| match windowed {
                false => cfg.store_is_full(l, v),
                true => cfg.store_is_windowed(l, v),
            })
            .map(|(l, v, s)| (s, cfg.store_block_bytes(l, v)))
            .collect()
    }

    /// Appends block `block`'s bytes of every store that keeps every position (`windowed`
    /// false), or companion `block`'s of every windowed store (true).
    pub fn read_block(&mut self, windowed: bool, block: u32, out: &mut Vec<u8>) {
        for (store, bb) in self.stores(windowed) {
            let f = block as usize * bb;
            out.extend_from_slice(&store[f..f + bb]);
        }
    }

    /// Writes block `block` from bytes laid out as [`Self::read_block`] gives them.
    pub fn write_block(&mut self, windowed: bool, block: u32, mut data: &[u8]) {
        for (store, bb) in self.stores(windowed) {
            let t = block as usize * bb;
            store[t..t + bb].copy_from_slice(&data[..bb]);
            data = &data[bb..];
        }
    }

    /// Copies block `from` to `to` in every store that keeps every position.
    pub fn copy_block(&mut self, from: u32, to: u32) {
        for (store, bb) in self.stores(false) {
            let f = from as usize * bb;
            store.copy_within(f..f + bb, to as usize * bb);
        }
    }

    /// Record layer `layer`'s stores for the step whose tables are `tables`.
    pub fn records<'a>(&'a mut self, layer: usize, tables: &'a Tables) -> Records<'a> {
        let (keys, values) = (&mut self.keys[layer], &mut self.values[layer]);
        Records::new(&self.cfg, layer, keys, values, tables)
    }
}
