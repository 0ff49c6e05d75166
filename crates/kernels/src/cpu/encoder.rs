//! [`EncoderDevice`] on the CPU: a tower's attention on the pool's threads, split by query
//! rows (each row's scores and sums run over the keys in order, whatever the split).

use device::encoder::{
    avg_pool_2d_rows, layer_norm_rows, Act, DenseIo, DenseSpec, EncoderDevice, PoolSpec,
};
use device::Buf;

use super::Cpu;
use crate::dot::dot;
use crate::features::CpuFeatures;
use crate::ops::{exp_shifted, gelu_alone_inplace, sigmoid};
use crate::pool::SharedOut;

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

    fn dense_attention(&mut self, io: &DenseIo, spec: &DenseSpec) {
        let DenseSpec {
            rows: n,
            heads,
            head_dim: hd,
            scale,
        } = *spec;
        let width = heads * hd;
        let isa = CpuFeatures::get().dot;
        let mut out = self.bufs.take(io.out);
        let shared = SharedOut::new(&mut out[..n * width]);
        let (q, k, v) = (&self.bufs[io.q], &self.bufs[io.k], &self.bufs[io.v]);
        self.pool.for_ranges(n, &|range| {
            let mut scores = vec![0f32; n];
            for i in range {
                // SAFETY: each thread writes the rows of its own range.
                let row = unsafe { shared.slice(i * width, width) };
                for h in 0..heads {
                    let qi = &q[i * width + h * hd..][..hd];
                    for (j, s) in scores.iter_mut().enumerate() {
                        *s = dot(isa, qi, &k[j * width + h * hd..][..hd]) * scale;
                    }
                    let max = scores.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                    exp_shifted(&mut scores, max);
                    let inv = 1.0 / scores.iter().sum::<f32>();
                    let o = &mut row[h * hd..][..hd];
                    o.fill(0.0);
                    for (j, &p) in scores.iter().enumerate() {
                        let vj = &v[j * width + h * hd..][..hd];
                        o.iter_mut()
                            .zip(vj)
                            .for_each(|(a, &b)| *a = p.mul_add(b, *a));
                    }
                    o.iter_mut().for_each(|a| *a *= inv);
                }
            }
        });
        self.bufs.put(io.out, out);
    }

    fn avg_pool_2d(&mut self, x: Buf, out: Buf, spec: &PoolSpec) {
        self.with2(x, out, |x, o| {
            avg_pool_2d_rows(x, spec, &mut o[..spec.rows_out() * spec.width])
        });
    }
}
