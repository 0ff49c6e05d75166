//! Buffers in host memory, for the backends whose buffers live there (the CPU, the
//! reference): a [`Buf`] indexes them.

use std::ops::{Index, IndexMut};

use crate::{BlockConv, Buf, Cols};

/// See the module doc.
#[derive(Default)]
pub struct HostBufs(Vec<Vec<f32>>);

impl HostBufs {
    /// A zeroed buffer of `len` floats.
    pub fn alloc(&mut self, len: usize) -> Buf {
        self.0.push(vec![0.0; len]);
        Buf(self.0.len() as u32 - 1)
    }

    /// `buf[at..at + data.len()] = data`.
    pub fn upload(&mut self, buf: Buf, at: usize, data: &[f32]) {
        self[buf][at..at + data.len()].copy_from_slice(data);
    }

    /// `out = buf[at..at + out.len()]`.
    pub fn download(&self, buf: Buf, at: usize, out: &mut [f32]) {
        out.copy_from_slice(&self[buf][at..at + out.len()]);
    }

    /// Takes a buffer out, to write it while others are read; [`HostBufs::put`] returns it.
    pub fn take(&mut self, buf: Buf) -> Vec<f32> {
        std::mem::take(&mut self.0[buf.0 as usize])
    }

    pub fn put(&mut self, buf: Buf, v: Vec<f32>) {
        self.0[buf.0 as usize] = v;
    }

    /// [`crate::Device::copy_cols`].
    pub fn copy_cols(&mut self, x: Buf, out: Buf, rows: usize, c: &Cols) {
        let xs = self.take(x);
        let o = &mut self[out];
        for r in 0..rows {
            let from = &xs[r * c.x_width + c.x_at..][..c.width];
            o[r * c.out_width + c.out_at..][..c.width].copy_from_slice(from);
        }
        self.put(x, xs);
    }
}

impl HostBufs {
    /// [`crate::Device::block_conv`] over rows at `places` ([`crate::block_places`]).
    pub fn block_conv(
        &mut self,
        x: Buf,
        coef: Buf,
        base: Buf,
        places: &[u32],
        s: &BlockConv,
        out: Buf,
    ) {
        let (w, k) = (s.width, s.k);
        let groups = w / s.group;
        let xs = self.take(x);
        let mut o = self.take(out);
        let (cf, bs) = (&self[coef], &self[base]);
        for (r, &i) in places.iter().enumerate() {
            let c_row = &cf[r * 2 * k * groups..][..2 * k * groups];
            for c in 0..w {
                let mut acc = 0.0f32;
                for t in 0..=(k - 1).min(i as usize) {
                    let j = t + k * s.side;
                    let weight = c_row[c / s.group + groups * j] + bs[c + w * j];
                    let term = weight * xs[(r - t) * w + c];
                    acc = if t == 0 { term } else { acc + term };
                }
                o[r * w + c] = acc;
            }
        }
        self.put(x, xs);
        self.put(out, o);
    }
}

impl Index<Buf> for HostBufs {
    type Output = [f32];

    fn index(&self, b: Buf) -> &[f32] {
        &self.0[b.0 as usize]
    }
}

impl IndexMut<Buf> for HostBufs {
    fn index_mut(&mut self, b: Buf) -> &mut [f32] {
        &mut self.0[b.0 as usize]
    }
}
