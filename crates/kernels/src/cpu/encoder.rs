//! [`EncoderDevice`] on the CPU: a tower's attention as tiled products on the pool's threads
//! (each output's sum runs over the keys in one order, whatever the rows or threads).

use device::encoder::{
    avg_pool_2d_rows, layer_norm_rows, Act, DenseIo, DenseSpec, EncoderDevice, PoolSpec,
};
use device::Buf;

use gguf::GgmlType;

use super::Cpu;
use crate::matmul::matmul;
use crate::ops::{gelu_alone_inplace, sigmoid, softmax_inplace};
use crate::qmatrix::QMatrix;
use device::Precision;

/// Query rows whose scores are held at once.
const CHUNK: usize = 256;

impl EncoderDevice for Cpu {
    fn layer_norm(
        &mut self,
        x: Buf,
        w: Buf,
        b: Buf,
        rows: usize,
        width: usize,
        eps: f32,
        out: Buf,
    ) {
        let n = rows * width;
        let xs = self.bufs[x][..n].to_vec();
        let (ws, bs) = (
            self.bufs[w][..width].to_vec(),
            self.bufs[b][..width].to_vec(),
        );
        layer_norm_rows(&xs, &ws, &bs, eps, &mut self.bufs[out][..n]);
    }

    fn activate(&mut self, x: Buf, len: usize, act: Act) {
        let x = &mut self.bufs[x][..len];
        match act {
            Act::Gelu => gelu_alone_inplace(x),
            Act::GeluQuick => x.iter_mut().for_each(|v| *v *= sigmoid(1.702 * *v)),
        }
    }

    /// Per head: the scores of a chunk of query rows are one product with the head's keys
    /// as a matrix, softmaxed per row, then one product with its values transposed (the
    /// tiled f32 matmul, whose sums run in one order per output whatever the rows).
    fn dense_attention(&mut self, io: &DenseIo, spec: &DenseSpec) {
        let DenseSpec {
            rows: n,
            heads,
            head_dim: hd,
            scale,
        } = *spec;
        let width = heads * hd;
        let mut out = self.bufs.take(io.out);
        let (q, k, v) = (&self.bufs[io.q], &self.bufs[io.k], &self.bufs[io.v]);
        let head = |x: &[f32], h: usize| -> Vec<f32> {
            (0..n)
                .flat_map(|r| x[r * width + h * hd..][..hd].iter().copied())
                .collect()
        };
        let bytes = |x: &[f32]| -> Vec<u8> { x.iter().flat_map(|v| v.to_le_bytes()).collect() };
        let mut scores = vec![0f32; CHUNK.min(n) * n];
        let mut o = vec![0f32; CHUNK.min(n) * hd];
        for h in 0..heads {
            let qh = head(q, h);
            // [n, hd] keys; [hd, n] values.
            let kh = bytes(&head(k, h));
            let vh = head(v, h);
            let vt: Vec<f32> = (0..hd)
                .flat_map(|d| (0..n).map(move |r| (r, d)))
                .map(|(r, d)| vh[r * hd + d])
                .collect();
            let vt = bytes(&vt);
            let keys = QMatrix::new(GgmlType::F32, &kh, n, hd).expect("f32 rows");
            let values = QMatrix::new(GgmlType::F32, &vt, hd, n).expect("f32 rows");
            for start in (0..n).step_by(CHUNK) {
                let rows = CHUNK.min(n - start);
                let s = &mut scores[..rows * n];
                matmul(
                    &self.pool,
                    &keys,
                    &qh[start * hd..(start + rows) * hd],
                    s,
                    Precision::F32,
                );
                for row in s.chunks_exact_mut(n) {
                    row.iter_mut().for_each(|x| *x *= scale);
                    softmax_inplace(row);
                }
                let o = &mut o[..rows * hd];
                matmul(&self.pool, &values, s, o, Precision::F32);
                for (r, or) in o.chunks_exact(hd).enumerate() {
                    out[(start + r) * width + h * hd..][..hd].copy_from_slice(or);
                }
            }
        }
        self.bufs.put(io.out, out);
    }

    fn avg_pool_2d(&mut self, x: Buf, out: Buf, spec: &PoolSpec) {
        self.with2(x, out, |x, o| {
            avg_pool_2d_rows(x, spec, &mut o[..spec.rows_out() * spec.width])
        });
    }
}
