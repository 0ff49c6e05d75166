//! The ViT and the projectors after it, written against the device ops (llama.cpp's
//! `clip_graph::build_vit`, `clip_graph_siglip::build` and `clip_graph_llava::build`):
//!
//! ```text
//! x = patch_embd · pixels + patch_bias                      // [n_patches, n_embd]
//! x = [x; class_embd] + position_embd; x = pre_ln(x)        // CLIP: [n_patches + 1, n_embd]
//! per block (the first `depth`): x += attn_out(attention(ln1(x)));
//!                                x += ffn_down(act(ffn_up(ln2(x))))
//! x = post_ln(x)
//! gemma3: avg-pool n_merge × n_merge; out = input_projection · (rms_norm(x) · soft_emb_norm)
//! mlp:    rows 1..=n_patches of x; out = mm.2 · gelu(mm.0 · x)  // [n_patches, n_embd_out]
//! idefics3: x pixel-shuffled: out row (Y, X) = the rows of patches (Y·s + dy, X·s + dx)
//!         side by side, dy then dx; out = mm.model.fc · x          // [n_patches / s², n_embd_out]
//! ```
//!
//! (llama.cpp appends the class embedding after the patches and then takes rows from 1:
//! the first patch's row is left out and the class row kept; tandem does the same.)

use std::sync::Arc;

use device::encoder::{Act, DenseIo, DenseSpec, EncoderDevice, PoolSpec};
use device::{Buf, Bytes, Mat, MatOut, MatrixSource, Role, Step};
use gguf::{GgmlType, GgufFile};

use super::{ClipParams, Projector};
use crate::{DeviceTensors, Error, MatId, Result, TensorLoader, TensorTable, VecId};

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

/// What follows the ViT.
enum Head {
    /// With the tower's [`Tower::projection`].
    Gemma3 { soft_emb_norm: VecId },
    Mlp {
        /// `mm.0` (`n_embd → hidden`) and `mm.2` (`hidden → n_embd_out`), with biases.
        mm0: (MatId, VecId),
        mm2: (MatId, VecId),
        hidden: usize,
    },
    /// `mm.model.fc` (`n_embd · n_merge² → n_embd_out`, no bias), after the patches'
    /// rows are gathered in pixel-shuffle `order`.
    Idefics3 { fc: MatId, order: Vec<usize> },
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

/// A tower's tensors by their place (ids into its table).
struct Layers {
    patch: (MatId, Option<VecId>),
    /// `[n_embd]`, appended after the patches' rows (CLIP's class token).
    class: Option<Vec<f32>>,
    position: VecId,
    pre_ln: Option<(VecId, VecId)>,
    blocks: Vec<Block>,
    post_ln: Option<(VecId, VecId)>,
    head: Head,
}

/// A tower's shape and tensors as its file has them, before any device holds them.
struct Parts {
    params: ClipParams,
    n_embd_out: usize,
    layers: Layers,
    projection: Option<MatrixSource>,
    table: TensorTable,
}

/// A vision tower on a device: encodes one image's pixels into embeddings.
pub struct Tower {
    pub params: ClipParams,
    /// The width of its embeddings: the language model's `n_embd`.
    pub n_embd_out: usize,
    layers: Layers,
    /// Gemma 3's `[n_embd_out, n_embd]`: the file's `mm.input_projection` transposed.
    projection: Option<Mat>,
    tensors: DeviceTensors,
    scratch: Scratch,
}

fn norm(t: &mut TensorLoader, name: &str, e: usize) -> Result<(VecId, VecId)> {
    Ok((
        t.vector(&format!("{name}.weight"), e)?,
        t.vector(&format!("{name}.bias"), e)?,
    ))
}

fn opt_norm(t: &mut TensorLoader, name: &str, e: usize) -> Result<Option<(VecId, VecId)>> {
    match t.has(&format!("{name}.weight")) {
        true => norm(t, name, e).map(Some),
        false => Ok(None),
    }
}

fn linear(t: &mut TensorLoader, name: &str, rows: usize, cols: usize) -> Result<(MatId, VecId)> {
    Ok((
        t.matrix(&format!("{name}.weight"), rows, cols)?,
        t.vector(&format!("{name}.bias"), rows)?,
    ))
}

/// GGUF dim `i` of tensor `name`.
fn dim(file: &GgufFile, name: &str, i: usize) -> Result<usize> {
    file.header
        .tensor(name)
        .and_then(|info| info.dims.get(i).copied())
        .map(|d| d as usize)
        .ok_or_else(|| Error::MissingTensor(name.into()))
}

fn block(t: &mut TensorLoader, file: &GgufFile, i: usize, e: usize, ff: usize) -> Result<Block> {
    let b = format!("v.blk.{i}");
    // Older converters named the first matrix `ffn_down` and the second `ffn_up` (llama.cpp
    // swaps them back when `ffn_down` maps from `n_embd`).
    let swapped = ff != e && dim(file, &format!("{b}.ffn_down.weight"), 0).ok() == Some(e);
    let (first, second) = match swapped {
        true => ("ffn_down", "ffn_up"),
        false => ("ffn_up", "ffn_down"),
    };
    Ok(Block {
        ln1: norm(t, &format!("{b}.ln1"), e)?,
        qkv: [
            linear(t, &format!("{b}.attn_q"), e, e)?,
            linear(t, &format!("{b}.attn_k"), e, e)?,
            linear(t, &format!("{b}.attn_v"), e, e)?,
        ],
        out: linear(t, &format!("{b}.attn_out"), e, e)?,
        ln2: norm(t, &format!("{b}.ln2"), e)?,
        fc1: linear(t, &format!("{b}.{first}"), ff, e)?,
        fc2: linear(t, &format!("{b}.{second}"), e, ff)?,
    })
}

impl Parts {
    fn read(file: &Arc<GgufFile>) -> Result<Parts> {
        let params = ClipParams::read(&file.header.metadata)?;
        let (e, ff, p) = (params.n_embd, params.n_ff, params.patch_size);
        let mut t = TensorLoader::new(file);
        let patch = (
            t.matrix_dims("v.patch_embd.weight", &[p, p, 3, e])?,
            match t.has("v.patch_embd.bias") {
                true => Some(t.vector("v.patch_embd.bias", e)?),
                false => None,
            },
        );
        let class = match t.has("v.class_embd") {
            true => Some(t.values("v.class_embd", &[e])?),
            false => None,
        };
        let n_pos = params.n_patches() + usize::from(class.is_some());
        let position = t.vector_dims("v.position_embd.weight", &[e, n_pos])?;
        let pre_ln = opt_norm(&mut t, "v.pre_ln", e)?;
        let blocks = (0..params.depth)
            .map(|i| block(&mut t, file, i, e, ff))
            .collect::<Result<Vec<_>>>()?;
        let post_ln = opt_norm(&mut t, "v.post_ln", e)?;
        let (head, projection, n_embd_out) = match params.projector {
            Projector::Gemma3 => {
                let name = "mm.input_projection.weight";
                let n_out = dim(file, name, 0)?;
                let stored = t.values(name, &[n_out, e])?;
                let head = Head::Gemma3 {
                    soft_emb_norm: t.vector("mm.soft_emb_norm.weight", e)?,
                };
                (head, Some(transposed(name, &stored, e, n_out)), n_out)
            }
            Projector::Mlp => {
                let hidden = dim(file, "mm.0.weight", 1)?;
                let n_out = dim(file, "mm.2.weight", 1)?;
                let head = Head::Mlp {
                    mm0: linear(&mut t, "mm.0", hidden, e)?,
                    mm2: linear(&mut t, "mm.2", n_out, hidden)?,
                    hidden,
                };
                (head, None, n_out)
            }
            Projector::Idefics3 => {
                let name = "mm.model.fc.weight";
                let n_out = dim(file, name, 1)?;
                let fc = t.matrix(name, n_out, e * params.n_merge.pow(2))?;
                let order = shuffled(params.side(), params.n_merge);
                (Head::Idefics3 { fc, order }, None, n_out)
            }
        };
        Ok(Parts {
            params,
            n_embd_out,
            layers: Layers {
                patch,
                class,
                position,
                pre_ln,
                blocks,
                post_ln,
                head,
            },
            projection,
            table: t.finish(),
        })
    }

    /// The floats of each of [`Scratch`]'s buffers, in its order.
    fn scratch_floats(&self) -> [usize; 9] {
        let c = &self.params;
        let (e, ff, p) = (c.n_embd, c.n_ff, c.patch_size);
        let n_pos = c.n_patches() + usize::from(self.layers.class.is_some());
        let nt = c.n_tokens();
        let (widest_ff, pooled) = match &self.layers.head {
            Head::Mlp { hidden, .. } => (ff.max(*hidden), nt * e),
            Head::Gemma3 { .. } => (ff, nt * e),
            Head::Idefics3 { .. } => (ff, c.n_patches() * e),
        };
        [
            c.n_patches() * 3 * p * p,
            n_pos * e,
            n_pos * e,
            n_pos * e,
            n_pos * e,
            n_pos * e,
            n_pos * widest_ff,
            pooled,
            nt * self.n_embd_out,
        ]
    }
}

impl Tower {
    /// Loads the tower of mmproj file `file` onto `dev`, with the buffers of one image.
    pub fn load(file: Arc<GgufFile>, dev: &mut dyn EncoderDevice) -> Result<Tower> {
        let parts = Parts::read(&file)?;
        let sources: Vec<MatrixSource> = parts
            .table
            .matrices
            .iter()
            .map(|m| m.weight.source(&file, m.role))
            .collect();
        let tensors = DeviceTensors::upload(dev, &parts.table, &sources, &|_, _| {})?;
        let mut bufs = Vec::with_capacity(9);
        for n in parts.scratch_floats() {
            bufs.push(dev.alloc(n)?);
        }
        let projection = match parts.projection {
            Some(src) => Some(dev.upload_matrices(&[src], &|_, _| {})?[0]),
            None => None,
        };
        let [pixels, x, h, q, k, v, ff, pooled, out] = bufs[..] else {
            unreachable!("nine buffers")
        };
        Ok(Tower {
            params: parts.params,
            n_embd_out: parts.n_embd_out,
            layers: parts.layers,
            projection,
            tensors,
            scratch: Scratch {
                pixels,
                x,
                h,
                q,
                k,
                v,
                ff,
                pooled,
                out,
            },
        })
    }

    /// The bytes the tower of `file` takes on a device whose matrices take `matrix_bytes`:
    /// its weights, and the buffers of one image (read from the file, nothing allocated).
    pub fn footprint(
        file: &Arc<GgufFile>,
        matrix_bytes: &dyn Fn(GgmlType, usize, usize, Role) -> u64,
    ) -> Result<(u64, u64)> {
        let parts = Parts::read(file)?;
        let matrices: u64 = parts
            .table
            .matrices
            .iter()
            .map(|m| (m.weight.ty, m.weight.n_rows, m.weight.n_cols, m.role))
            .chain(
                parts
                    .projection
                    .iter()
                    .map(|s| (s.ty, s.n_rows, s.n_cols, s.role)),
            )
            .map(|(ty, rows, cols, role)| matrix_bytes(ty, rows, cols, role))
            .sum();
        let weights = matrices + 4 * parts.table.vector_len() as u64;
        let scratch = 4 * parts.scratch_floats().iter().sum::<usize>() as u64;
        Ok((weights, scratch))
    }

    /// The embeddings (`[n_tokens, n_embd_out]`) of one image's pixels
    /// (`[n_patches, 3 · patch²]`, a tile of [`ClipParams::tiles`]).
    pub fn encode(&self, dev: &mut dyn EncoderDevice, pixels: &[f32]) -> Vec<f32> {
        let c = &self.params;
        let (np, e, ff) = (c.n_patches(), c.n_embd, c.n_ff);
        let (t, s, l) = (&self.tensors, &self.scratch, &self.layers);
        let n = np + usize::from(l.class.is_some());
        let out_to = |y: Buf, b: VecId, residual: Option<Buf>| MatOut {
            y,
            bias: Some(t[b]),
            residual,
        };
        assert_eq!(pixels.len(), np * 3 * c.patch_size * c.patch_size);
        dev.begin(&Step::default());
        dev.upload(s.pixels, 0, pixels);
        let patch_out = MatOut {
            y: s.x,
            bias: t.opt(l.patch.1),
            residual: None,
        };
        dev.matmul(&[t[l.patch.0]], s.pixels, np, &[patch_out]);
        if let Some(class) = &l.class {
            dev.upload(s.x, np * e, class);
        }
        dev.add(s.x, t[l.position], n * e);
        if let Some((w, b)) = l.pre_ln {
            dev.layer_norm(s.x, t[w], t[b], n, e, c.eps, s.x);
        }
        let attn = DenseSpec {
            rows: n,
            heads: c.n_head,
            head_dim: e / c.n_head,
            scale: 1.0 / ((e / c.n_head) as f32).sqrt(),
        };
        for b in &l.blocks {
            dev.layer_norm(s.x, t[b.ln1.0], t[b.ln1.1], n, e, c.eps, s.h);
            let [q, k, v] = b.qkv;
            let outs = [
                out_to(s.q, q.1, None),
                out_to(s.k, k.1, None),
                out_to(s.v, v.1, None),
            ];
            dev.matmul(&[t[q.0], t[k.0], t[v.0]], s.h, n, &outs);
            let io = DenseIo {
                q: s.q,
                k: s.k,
                v: s.v,
                out: s.h,
            };
            dev.dense_attention(&io, &attn);
            dev.matmul(&[t[b.out.0]], s.h, n, &[out_to(s.q, b.out.1, Some(s.x))]);
            dev.layer_norm(s.x, t[b.ln2.0], t[b.ln2.1], n, e, c.eps, s.h);
            dev.matmul(&[t[b.fc1.0]], s.h, n, &[out_to(s.ff, b.fc1.1, None)]);
            dev.activate(s.ff, n * ff, c.act);
            dev.matmul(&[t[b.fc2.0]], s.ff, n, &[out_to(s.q, b.fc2.1, Some(s.x))]);
        }
        if let Some((w, b)) = l.post_ln {
            dev.layer_norm(s.x, t[w], t[b], n, e, c.eps, s.x);
        }
        let nt = c.n_tokens();
        match &l.head {
            Head::Gemma3 { soft_emb_norm } => {
                let projection = self.projection.expect("loaded with the head");
                let pool = PoolSpec {
                    side: c.side(),
                    kernel: c.n_merge,
                    width: e,
                };
                dev.avg_pool_2d(s.x, s.pooled, &pool);
                dev.rms_norm(s.pooled, t[*soft_emb_norm], nt, e, c.eps, s.pooled);
                dev.matmul(&[projection], s.pooled, nt, &[MatOut::to(s.out)]);
            }
            Head::Mlp { mm0, mm2, hidden } => {
                let rows: Vec<usize> = (n - np..n).collect();
                dev.gather_rows(s.x, &rows, e, s.pooled);
                dev.matmul(&[t[mm0.0]], s.pooled, nt, &[out_to(s.ff, mm0.1, None)]);
                dev.activate(s.ff, nt * hidden, Act::Gelu);
                dev.matmul(&[t[mm2.0]], s.ff, nt, &[out_to(s.out, mm2.1, None)]);
            }
            Head::Idefics3 { fc, order } => {
                dev.gather_rows(s.x, order, e, s.pooled);
                dev.matmul(&[t[*fc]], s.pooled, nt, &[MatOut::to(s.out)]);
            }
        }
        dev.finish();
        let mut out = vec![0f32; nt * self.n_embd_out];
        dev.download(s.out, 0, &mut out);
        out
    }
}

/// The patches (row by row of a `side × side` grid) in pixel-shuffle order: for each
/// `s × s` square, row by row of squares, its patches row by row.
fn shuffled(side: usize, s: usize) -> Vec<usize> {
    let n = side / s;
    let mut rows = Vec::with_capacity(side * side);
    for (by, bx) in (0..n).flat_map(|by| (0..n).map(move |bx| (by, bx))) {
        for (dy, dx) in (0..s).flat_map(|dy| (0..s).map(move |dx| (dy, dx))) {
            rows.push((by * s + dy) * side + bx * s + dx);
        }
    }
    rows
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
