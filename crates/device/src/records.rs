//! Per-position records in a KV layer's paged storage, for layers that keep more of a
//! position than one key and one value ([`crate::sparse`]): position `p` of a sequence
//! holds `2 · w` floats (`w = n_head_kv · head_dim` of the pool), the keys' row at `p`
//! then the values' row, of an element-wise type (f32, f16, bf16) so that any range of a
//! record reads and writes on its own.

use kv::{KvConfig, BLOCK_SIZE};

use crate::formats::{dequantize_row, quantize_row};

/// One KV layer's storage seen as records; `tables[seq]` are the blocks of each sequence of
/// the step ([`crate::Tables::of`]).
pub struct Records<'a> {
    cfg: &'a KvConfig,
    keys: &'a mut [u8],
    values: &'a mut [u8],
    tables: &'a [Vec<u32>],
}

impl<'a> Records<'a> {
    /// Panics unless the pool's type is element-wise (the executor refuses others for
    /// record layers).
    pub fn new(
        cfg: &'a KvConfig,
        keys: &'a mut [u8],
        values: &'a mut [u8],
        tables: &'a [Vec<u32>],
    ) -> Records<'a> {
        assert_eq!(cfg.ty.block_size(), 1, "records need an element-wise type");
        Records {
            cfg,
            keys,
            values,
            tables,
        }
    }

    /// Floats of one record.
    pub fn floats(&self) -> usize {
        2 * self.cfg.n_head_kv * self.cfg.head_dim
    }

    /// The store, byte offset and element count of floats `at..at + len` of the record of
    /// `pos` in `seq`, which must lie in one half.
    fn locate(&self, seq: usize, pos: usize, at: usize, len: usize) -> (bool, usize, usize) {
        let w = self.cfg.n_head_kv * self.cfg.head_dim;
        let (values, at) = if at >= w { (true, at - w) } else { (false, at) };
        assert!(at + len <= w, "a record's field lies in one half");
        let eb = self.cfg.position_bytes() / w;
        let block = self.tables[seq][pos / BLOCK_SIZE] as usize;
        let off = block * self.cfg.block_bytes() + (pos % BLOCK_SIZE) * self.cfg.position_bytes();
        (values, off + at * eb, len * eb)
    }

    /// `out = record(seq, pos)[at..at + out.len()]`.
    pub fn read(&self, seq: usize, pos: usize, at: usize, out: &mut [f32]) {
        let (values, off, n) = self.locate(seq, pos, at, out.len());
        let store: &[u8] = if values { self.values } else { self.keys };
        dequantize_row(self.cfg.ty, &store[off..off + n], out).expect("element-wise type");
    }

    /// `record(seq, pos)[at..at + data.len()] = data` (rounded to the pool's type).
    pub fn write(&mut self, seq: usize, pos: usize, at: usize, data: &[f32]) {
        let (values, off, n) = self.locate(seq, pos, at, data.len());
        let store: &mut [u8] = if values { self.values } else { self.keys };
        quantize_row(self.cfg.ty, data, &mut store[off..off + n]).expect("element-wise type");
    }
}
