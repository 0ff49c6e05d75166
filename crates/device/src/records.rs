//! A record layer's storage ([`kv::RecordKv`]), for layers that keep more of a position
//! than one key and one value ([`crate::sparse`]):
//! - the *recent* part, `recent` f32 per position in the keys' store: what only the next
//!   few positions read (of the last positions alone when the pool has a windowed class);
//! - the *kept* part, `kept` floats per position in the values' store, of the pool's
//!   element-wise type (f32, f16, bf16), for every position. A field wider than one
//!   position's share is written over the `span` positions ending at a given one, which
//!   must lie in one block (`span` divides [`BLOCK_SIZE`] and the run is aligned to it).

use gguf::GgmlType;
use kv::{KvConfig, RecordKv, BLOCK_SIZE};

use crate::formats::{dequantize_row, quantize_row};
use crate::Tables;

/// One part's bytes and, per sequence of the step, its blocks.
struct Part<'a> {
    store: &'a mut [u8],
    tables: &'a [Vec<u32>],
    /// Bytes of one position and of one element.
    position: usize,
    element: usize,
}

impl Part<'_> {
    /// Byte offset of element `at` of position `pos` of `seq`.
    fn offset(&self, seq: usize, pos: usize, at: usize) -> usize {
        let block = self.tables[seq][pos / BLOCK_SIZE] as usize;
        assert_ne!(block, u32::MAX as usize, "position {pos} is not kept");
        (block * BLOCK_SIZE + pos % BLOCK_SIZE) * self.position + at * self.element
    }
}

/// One record layer's storage for a step: see the module doc.
pub struct Records<'a> {
    ty: GgmlType,
    shape: RecordKv,
    recent: Part<'a>,
    kept: Part<'a>,
}

impl<'a> Records<'a> {
    /// KV layer `layer` of a pool shaped `cfg`, its stores `keys` and `values`, for the
    /// step whose tables are `tables`. Panics unless it is a record layer of an
    /// element-wise type (the executor refuses others).
    pub fn new(
        cfg: &KvConfig,
        layer: usize,
        keys: &'a mut [u8],
        values: &'a mut [u8],
        tables: &'a Tables,
    ) -> Records<'a> {
        let shape = cfg.record(layer).expect("a record layer");
        assert_eq!(cfg.ty.block_size(), 1, "records need an element-wise type");
        let element = cfg.ty.type_size() as usize;
        Records {
            ty: cfg.ty,
            shape,
            recent: Part {
                store: keys,
                tables: tables.of_store(cfg, layer, false),
                position: 4 * shape.recent,
                element: 4,
            },
            kept: Part {
                store: values,
                tables: tables.of_store(cfg, layer, true),
                position: element * shape.kept,
                element,
            },
        }
    }

    /// `out = recent(seq, pos)[at..at + out.len()]`.
    pub fn read_recent(&self, seq: usize, pos: usize, at: usize, out: &mut [f32]) {
        assert!(
            at + out.len() <= self.shape.recent,
            "a field of the recent part"
        );
        let off = self.recent.offset(seq, pos, at);
        for (o, b) in out.iter_mut().zip(self.recent.store[off..].chunks_exact(4)) {
            *o = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        }
    }

    /// `recent(seq, pos)[at..at + data.len()] = data`.
    pub fn write_recent(&mut self, seq: usize, pos: usize, at: usize, data: &[f32]) {
        assert!(
            at + data.len() <= self.shape.recent,
            "a field of the recent part"
        );
        let off = self.recent.offset(seq, pos, at);
        let dst = self.recent.store[off..off + 4 * data.len()].chunks_exact_mut(4);
        for (d, v) in dst.zip(data) {
            d.copy_from_slice(&v.to_le_bytes());
        }
    }

    /// The byte range of floats `at..at + len` of the kept parts of the `span` positions
    /// ending at `last` of `seq`.
    fn kept_range(
        &self,
        seq: usize,
        last: usize,
        span: usize,
        at: usize,
        len: usize,
    ) -> std::ops::Range<usize> {
        let first = last + 1 - span;
        assert_eq!(
            first / BLOCK_SIZE,
            last / BLOCK_SIZE,
            "a span lies in one block"
        );
        assert!(
            at + len <= span * self.shape.kept,
            "a field of the span's kept part"
        );
        let off = self.kept.offset(seq, first, at);
        off..off + len * self.kept.element
    }

    /// `out` = floats `at..` of the kept parts of the `span` positions ending at `last`.
    pub fn read_kept(&self, seq: usize, last: usize, span: usize, at: usize, out: &mut [f32]) {
        let r = self.kept_range(seq, last, span, at, out.len());
        dequantize_row(self.ty, &self.kept.store[r], out).expect("element-wise type");
    }

    /// Floats `at..` of the kept parts of the `span` positions ending at `last` = `data`
    /// (rounded to the pool's type).
    pub fn write_kept(&mut self, seq: usize, last: usize, span: usize, at: usize, data: &[f32]) {
        let r = self.kept_range(seq, last, span, at, data.len());
        quantize_row(self.ty, data, &mut self.kept.store[r]).expect("element-wise type");
    }

    /// `data` rounded to the pool's type, as a key cached in it would be.
    pub fn round(&self, data: &mut [f32]) {
        let mut bytes = vec![0u8; data.len() * self.kept.element];
        quantize_row(self.ty, data, &mut bytes).expect("element-wise type");
        dequantize_row(self.ty, &bytes, data).expect("element-wise type");
    }
}
