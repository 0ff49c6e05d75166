//! The encoder's ops on the GPU (`device::encoder::EncoderDevice`), so that a vision tower
//! runs there: layer norms and the pool one workgroup per row or one thread per element,
//! attention over all of an image's rows one workgroup per (head, row) with an online
//! softmax over the keys in chunks of 64.

use device::encoder::{Act, DenseIo, DenseSpec, EncoderDevice, PoolSpec};
use device::Buf;

use crate::context::Bind::{Arena as A, Buf as B};
use crate::gpu::{grid, Gpu, LOOP_BUDGET};
use crate::pipelines::Kernel;

/// A dense attention thread's loop iterations per chunk of 64 keys, at most: its key's dot
/// over head_dim (256 at most), the two trees, and its (up to four) dimensions' sums over
/// the chunk.
fn dense_loops_per_chunk(head_dim: usize) -> usize {
    (head_dim + 1) + 2 * 7 + 5 + 4 * 65 + 1
}

impl EncoderDevice for Gpu {
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
        if rows == 0 {
            return;
        }
        let g = grid(rows);
        let p = self.params([rows as u32, width as u32, eps.to_bits(), g[0], 0, 0, 0, 0]);
        let [x, w, b, out] = [x, w, b, out].map(|v| self.buf(v));
        self.run(Kernel::LayerNorm, &[B(&x), B(&w), B(&b), B(&out), A(p)], g);
    }

    fn activate(&mut self, x: Buf, len: usize, act: Act) {
        let kernel = match act {
            Act::Gelu => Kernel::GeluAlone,
            Act::GeluQuick => Kernel::GeluQuick,
        };
        self.eltwise(kernel, x, x, len, 0.0);
    }

    fn dense_attention(&mut self, io: &DenseIo, spec: &DenseSpec) {
        let DenseSpec {
            rows,
            heads,
            head_dim,
            scale,
        } = *spec;
        if rows == 0 {
            return;
        }
        assert!(head_dim <= 256, "head_dim {head_dim} over 256");
        let loops = rows.div_ceil(64) * dense_loops_per_chunk(head_dim) + 2 * head_dim;
        assert!(
            loops <= LOOP_BUDGET,
            "{rows} rows of {head_dim} run past llvmpipe's loop budget (no tower has so many)"
        );
        let p = self.params([
            rows as u32,
            heads as u32,
            head_dim as u32,
            scale.to_bits(),
            0,
            0,
            0,
            0,
        ]);
        let [q, k, v, out] = [io.q, io.k, io.v, io.out].map(|b| self.buf(b));
        let g = [heads as u32, rows as u32, 1];
        self.run(
            Kernel::DenseAttention,
            &[B(&q), B(&k), B(&v), B(&out), A(p)],
            g,
        );
    }

    fn avg_pool_2d(&mut self, x: Buf, out: Buf, spec: &PoolSpec) {
        let n = spec.rows_out() * spec.width;
        if n == 0 {
            return;
        }
        let g = grid(n.div_ceil(64));
        let p = self.params([
            spec.side as u32,
            spec.kernel as u32,
            spec.width as u32,
            g[0],
            0,
            0,
            0,
            0,
        ]);
        let [x, out] = [x, out].map(|b| self.buf(b));
        self.run(Kernel::AvgPool2d, &[B(&x), B(&out), A(p)], g);
    }
}
