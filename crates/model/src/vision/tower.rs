//! The SigLIP tower and Gemma 3's projector, written against the device ops (llama.cpp's
//! `clip_graph::build_vit` and `clip_graph_siglip::build`):
//!
//! ```text
//! x = patch_embd · pixels + patch_bias + position_embd     // [n_patches, n_embd]
//! per block: x += attn_out(attention(ln1(x)));  x += ffn_down(gelu(ffn_up(ln2(x))))
//! x = post_ln(x); avg-pool n_merge × n_merge            // [n_tokens, n_embd]
//! out = input_projection · (rms_norm(x) · soft_emb_norm)  // [n_tokens, n_embd_out]
//! ```

use std::sync::Arc;

use device::encoder::{DenseIo, DenseSpec, EncoderDevice, PoolSpec};
use device::{Buf, Bytes, Mat, MatOut, MatrixSource, Role, Step};
use gguf::{GgmlType, GgufFile};

use super::ClipParams;
use crate::{DeviceTensors, MatId, Result, TensorLoader, VecId};

/// One encoder block's tensors (`v.blk.{i}.*`).
struct Block {
    ln1: (VecId, VecId),
    /// `attn_q`, `attn_k`, `attn_v` with their biases.
    qkv: [(MatId, VecId); 3],
    out: (MatId, VecId),
    ln2: (VecId, VecId),
    /// The `n_embd → n_ff` and `n_ff → n_embd` matrices, with biases.
    fc1: (MatId, VecId),
    fc2: (MatId, VecId),
}

/// A tower's buffers for one image, allocated at load.
struct Scratch {
    pixels: Buf,
    x: Buf,
    h: Buf,
    q: Buf,
    k: Buf,
    v: Buf,
    ff: Buf,
    pooled: Buf,
    out: Buf,
}

/// A vision tower on a device: encodes one image's pixels into embeddings.
pub struct Tower {
    pub params: ClipParams,
    /// The width of its embeddings: the language model's `n_embd`.
    pub n_embd_out: usize,
    patch: (MatId, Option<VecId>),
    position: VecId,
    blocks: Vec<Block>,
    post_ln: Option<(VecId, VecId)>,
    soft_emb_norm: VecId,
    tensors: DeviceTensors,
    /// `[n_embd_out, n_embd]`: the file's `mm.input_projection` transposed.
    projection: Mat,
    scratch: Scratch,
}

impl Tower {
    /// Loads the tower of mmproj file `file` onto `dev`, with the buffers of one image.
    pub fn load(file: Arc<GgufFile>, dev: &mut dyn EncoderDevice) -> Result<Tower> {
        let params = ClipParams::read(&file.header.metadata)?;
        let (e, ff) = (params.n_embd, params.n_ff);
        let p = params.patch_size;
        let mut t = TensorLoader::new(&file);
        let bias = |t: &mut TensorLoader, name: &str, n: usize| t.vector(name, n);
        let patch = (
            t.matrix_dims("v.patch_embd.weight", &[p, p, 3, e])?,
            match t.has("v.patch_embd.bias") {
                true => Some(bias(&mut t, "v.patch_embd.bias", e)?),
                false => None,
            },
        );
        let position = t.vector_dims("v.position_embd.weight", &[e, params.n_patches()])?;
        let norm = |t: &mut TensorLoader, name: &str| -> Result<(VecId, VecId)> {
            Ok((
                t.vector(&format!("{name}.weight"), e)?,
                t.vector(&format!("{name}.bias"), e)?,
            ))
        };
        let linear = |t: &mut TensorLoader,
                      name: &str,
                      rows: usize,
                      cols: usize|
         -> Result<(MatId, VecId)> {
            Ok((
                t.matrix(&format!("{name}.weight"), rows, cols)?,
                t.vector(&format!("{name}.bias"), rows)?,
            ))
        };
        let mut blocks = Vec::with_capacity(params.n_layer);
        for i in 0..params.n_layer {
            let b = format!("v.blk.{i}");
            // Older converters named the first matrix `ffn_down` and the second `ffn_up`
            // (llama.cpp swaps them back when `ffn_down` maps from `n_embd`).
            let swapped = ff != e
                && file
                    .header
                    .tensor(&format!("{b}.ffn_down.weight"))
                    .is_some_and(|info| info.dims.first() == Some(&(e as u64)));
            let (first, second) = match swapped {
                true => ("ffn_down", "ffn_up"),
                false => ("ffn_up", "ffn_down"),
            };
            blocks.push(Block {
                ln1: norm(&mut t, &format!("{b}.ln1"))?,
                qkv: [
                    linear(&mut t, &format!("{b}.attn_q"), e, e)?,
                    linear(&mut t, &format!("{b}.attn_k"), e, e)?,
                    linear(&mut t, &format!("{b}.attn_v"), e, e)?,
                ],
                out: linear(&mut t, &format!("{b}.attn_out"), e, e)?,
                ln2: norm(&mut t, &format!("{b}.ln2"))?,
                fc1: linear(&mut t, &format!("{b}.{first}"), ff, e)?,
                fc2: linear(&mut t, &format!("{b}.{second}"), e, ff)?,
            });
        }
        let post_ln = match t.has("v.post_ln.weight") {
            true => Some(norm(&mut t, "v.post_ln")?),
            false => None,
        };
        let soft_emb_norm = t.vector("mm.soft_emb_norm.weight", e)?;
        let proj_name = "mm.input_projection.weight";
        let n_embd_out =
            file.header
                .tensor(proj_name)
                .and_then(|info| info.dims.first().copied())
                .ok_or_else(|| crate::Error::MissingTensor(proj_name.into()))? as usize;
        let stored = t.values(proj_name, &[n_embd_out, e])?;
        let table = t.finish();
        let sources: Vec<MatrixSource> = table
            .matrices
            .iter()
            .map(|m| m.weight.source(&file, m.role))
            .collect();
        let tensors = DeviceTensors::upload(dev, &table, &sources, &|_, _| {})?;
        let projection =
            dev.upload_matrices(&[transposed(proj_name, &stored, e, n_embd_out)], &|_, _| {})?[0];
        let (np, nt) = (params.n_patches(), params.n_tokens());
        let mut alloc = |n: usize| dev.alloc(n);
        let scratch = Scratch {
            pixels: alloc(np * 3 * p * p)?,
            x: alloc(np * e)?,
            h: alloc(np * e)?,
            q: alloc(np * e)?,
            k: alloc(np * e)?,
            v: alloc(np * e)?,
            ff: alloc(np * ff)?,
            pooled: alloc(nt * e)?,
            out: alloc(nt * n_embd_out)?,
        };
        Ok(Tower {
            params,
            n_embd_out,
            patch,
            position,
            blocks,
            post_ln,
            soft_emb_norm,
            tensors,
            projection,
            scratch,
        })
    }

    /// The embeddings (`[n_tokens, n_embd_out]`) of one image's pixels
    /// (`[n_patches, 3 · patch²]`, [`ClipParams::pixels`]).
    pub fn encode(&self, dev: &mut dyn EncoderDevice, pixels: &[f32]) -> Vec<f32> {
        let c = &self.params;
        let (np, e, ff) = (c.n_patches(), c.n_embd, c.n_ff);
        let (t, s) = (&self.tensors, &self.scratch);
        let out_to = |y: Buf, b: VecId, residual: Option<Buf>| MatOut {
            y,
            bias: Some(t[b]),
            residual,
        };
        assert_eq!(pixels.len(), np * 3 * c.patch_size * c.patch_size);
        dev.begin(&Step {
            rows: &[],
            tables: &[],
            windowed: &[],
            states: &[],
            checkpoints: &[],
            bidirectional: &[],
        });
        dev.upload(s.pixels, 0, pixels);
        let patch_out = MatOut {
            y: s.x,
            bias: t.opt(self.patch.1),
            residual: None,
        };
        dev.matmul(&[t[self.patch.0]], s.pixels, np, &[patch_out]);
        dev.add(s.x, t[self.position], np * e);
        let attn = DenseSpec {
            rows: np,
            heads: c.n_head,
            head_dim: e / c.n_head,
            scale: 1.0 / ((e / c.n_head) as f32).sqrt(),
        };
        for b in &self.blocks {
            dev.layer_norm(s.x, t[b.ln1.0], t[b.ln1.1], np, e, c.eps, s.h);
            let [q, k, v] = b.qkv;
            let outs = [
                out_to(s.q, q.1, None),
                out_to(s.k, k.1, None),
                out_to(s.v, v.1, None),
            ];
            dev.matmul(&[t[q.0], t[k.0], t[v.0]], s.h, np, &outs);
            let io = DenseIo {
                q: s.q,
                k: s.k,
                v: s.v,
                out: s.h,
            };
            dev.dense_attention(&io, &attn);
            dev.matmul(&[t[b.out.0]], s.h, np, &[out_to(s.q, b.out.1, Some(s.x))]);
            dev.layer_norm(s.x, t[b.ln2.0], t[b.ln2.1], np, e, c.eps, s.h);
            dev.matmul(&[t[b.fc1.0]], s.h, np, &[out_to(s.ff, b.fc1.1, None)]);
            dev.gelu_alone(s.ff, np * ff);
            dev.matmul(&[t[b.fc2.0]], s.ff, np, &[out_to(s.q, b.fc2.1, Some(s.x))]);
        }
        if let Some((w, b)) = self.post_ln {
            dev.layer_norm(s.x, t[w], t[b], np, e, c.eps, s.x);
        }
        let pool = PoolSpec {
            side: c.side(),
            kernel: c.n_merge,
            width: e,
        };
        dev.avg_pool_2d(s.x, s.pooled, &pool);
        let nt = pool.rows_out();
        dev.rms_norm(s.pooled, t[self.soft_emb_norm], nt, e, c.eps, s.pooled);
        dev.matmul(&[self.projection], s.pooled, nt, &[MatOut::to(s.out)]);
        dev.finish();
        let mut out = vec![0f32; nt * self.n_embd_out];
        dev.download(s.out, 0, &mut out);
        out
    }
}

/// `stored` (`[rows, cols]`) transposed into an f32 matrix of `cols` rows of `rows`.
fn transposed(name: &str, stored: &[f32], rows: usize, cols: usize) -> MatrixSource {
    let mut bytes = Vec::with_capacity(stored.len() * 4);
    for c in 0..cols {
        for r in 0..rows {
            bytes.extend_from_slice(&stored[r * cols + c].to_le_bytes());
        }
    }
    MatrixSource {
        name: name.into(),
        ty: GgmlType::F32,
        bytes: Bytes::Owned(bytes.into()),
        n_rows: cols,
        n_cols: rows,
        role: Role::Multiply,
    }
}
