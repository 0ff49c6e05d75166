//! DeepSeek-V4's compressed sparse attention on the GPU ([`device::sparse`]): a record
//! layer's recent parts (f32) in its keys' store and its kept parts (the pool's element type)
//! in its values' store, as the host backends lay them out. A step stores its rows' raw keys
//! and compressor rows (sparse_store.wgsl), compresses the blocks its rows end
//! (sparse_compress.wgsl), scores the compressed blocks for the rows that see more than the
//! indexer picks (sparse_scores.wgsl; the scores are read back and the top `top_k` chosen
//! here, as the host does: by score, ties to the lower block), and attends
//! (sparse_attend.wgsl). The angles of every turn are computed here
//! ([`device::rope_angles`]) and travel in the arena.

use device::sparse::{CompIo, SparseIo, SparseSpec};
use device::RopeSpec;
use gguf::GgmlType;
use kv::KvConfig;

use crate::context::Bind::{Arena as A, Buf as B};
use crate::gpu::{grid, Gpu};
use crate::pipelines::Kernel;

/// The widest compressed row sparse_compress.wgsl pools (its `MAX_E`).
const MAX_E: usize = 1024;

/// Why the record layers of `cfg` cannot be kept here, where they cannot: their kept parts
/// must be of an element-wise type, two to a word aligned (f16, bf16) or f32.
pub(crate) fn unpackable_records(cfg: &KvConfig) -> Option<String> {
    let records = cfg.records.as_ref()?;
    if !matches!(cfg.ty, GgmlType::F32 | GgmlType::F16 | GgmlType::BF16) {
        return Some(format!(
            "keep compressed attention's rows in a {} cache: use -ctk f16",
            cfg.ty
        ));
    }
    let odd = records.iter().flatten().find(|r| r.kept % 2 == 1);
    match odd {
        Some(r) if cfg.ty != GgmlType::F32 => Some(format!(
            "keep {} values per position of compressed rows in a {} cache: use -ctk f32",
            r.kept, cfg.ty
        )),
        _ => None,
    }
}

/// `spec`'s angles at `pos`, `[cos, sin]` per turned pair.
fn angles(spec: &RopeSpec, pos: usize) -> Vec<f32> {
    let mut cs = vec![(0f32, 0f32); spec.n_rot / 2];
    device::rope_angles(pos, spec, &mut cs);
    cs.into_iter().flat_map(|(c, s)| [c, s]).collect()
}

fn words(v: &[f32]) -> impl Iterator<Item = u32> + '_ {
    v.iter().map(|f| f.to_bits())
}

/// A compressor's fields in a record ([`device::sparse::Layout`]) and shape.
struct Comp {
    io: CompIo,
    e: usize,
    ratio: usize,
    at: [usize; 3],
}

/// A record layer's two stores (recent parts, kept parts) and where their tables start in
/// the step's words.
struct Stores {
    cfg: KvConfig,
    rec: kv::RecordKv,
    recent: wgpu::Buffer,
    kept: wgpu::Buffer,
    rec_tab: u32,
    kept_tab: u32,
}

impl Gpu {
    /// KV layer `layer`'s [`Stores`].
    fn stores(&self, layer: usize) -> Stores {
        let kv = self.kv.as_ref().expect("kv_alloc first");
        let cfg = kv.cfg.clone();
        Stores {
            rec: cfg.record(layer).expect("a record layer"),
            recent: kv.keys[layer].clone(),
            kept: kv.values[layer].clone(),
            rec_tab: self.store_tables_at(&cfg, layer, false),
            kept_tab: self.store_tables_at(&cfg, layer, true),
            cfg,
        }
    }

    /// [`device::Device::sparse_attention`].
    pub(crate) fn sparse(&mut self, layer: usize, io: &SparseIo, spec: &SparseSpec) {
        let n = self.rows.len();
        if n == 0 {
            return;
        }
        let row_angles = self.sparse_rows(layer, io, spec);
        let Stores {
            cfg,
            rec,
            recent,
            kept,
            rec_tab,
            kept_tab,
        } = self.stores(layer);
        let ty = cfg.ty;
        let lay = spec.layout();
        let (d, n_rot) = (spec.head_dim, spec.rope.n_rot);
        let region = self.step().region;
        let span = spec.span();
        let seen = self.picked_blocks(io, spec, &cfg, layer);
        let last = match spec.causal {
            true => Vec::new(),
            false => device::last_positions(&self.rows),
        };
        let rw = 3 + n_rot;
        let mut info: Vec<u32> = Vec::with_capacity(n * rw);
        let mut lists: Vec<u32> = Vec::new();
        for (i, (r, blocks)) in self.rows.iter().zip(&seen).enumerate() {
            let visible = match spec.ratio {
                0 => 0,
                ratio => (r.pos + 1) / ratio,
            };
            match blocks {
                Some(list) => {
                    info.extend([list.len() as u32, (n * rw + lists.len()) as u32]);
                    lists.extend(list.iter().map(|&b| b as u32));
                }
                None => info.extend([visible as u32, u32::MAX]),
            }
            info.push(device::last_seen(&last, *r) as u32);
            info.extend(words(&row_angles[i * n_rot..(i + 1) * n_rot]));
        }
        info.extend(lists);
        let info = self.rec.push(&self.ctx, bytemuck::cast_slice(&info));
        let g = grid((n * spec.n_head).div_ceil(64));
        let p = [
            n,
            spec.n_head,
            d,
            spec.window,
            rec.recent,
            lay.raw,
            rec.kept,
            lay.comp.map_or(0, |c| c[2]),
            span,
            spec.ratio.max(1),
            n_rot,
            rec_tab as usize,
            kept_tab as usize,
        ];
        let tail = [spec.scale.to_bits(), g[0], 0];
        let p = self.words_region(p.iter().map(|&v| v as u32).chain(tail));
        let [q, sinks, out] = [io.q, io.sinks, io.out].map(|x| self.buf(x));
        let binds = [
            B(&recent),
            B(&kept),
            A(region),
            A(p),
            B(&q),
            B(&sinks),
            B(&out),
            A(info),
        ];
        self.run(Kernel::SparseAttend { kv: ty }, &binds, g);
    }

    /// [`device::Device::sparse_store`]: the rows' raw keys and compressor rows stored, the
    /// blocks they end compressed. Gives the angles of the rows' turns (`n_rot` a row).
    pub(crate) fn sparse_rows(
        &mut self,
        layer: usize,
        io: &SparseIo,
        spec: &SparseSpec,
    ) -> Vec<f32> {
        let n = self.rows.len();
        if n == 0 {
            return Vec::new();
        }
        let Stores {
            cfg,
            rec,
            recent,
            kept,
            rec_tab,
            kept_tab,
        } = self.stores(layer);
        let ty = cfg.ty;
        let lay = spec.layout();
        let (d, n_rot) = (spec.head_dim, spec.rope.n_rot);
        let region = self.step().region;

        let row_angles: Vec<f32> = self
            .rows
            .iter()
            .flat_map(|r| angles(&spec.rope, r.pos))
            .collect();
        let ang = self.rec.push(&self.ctx, bytemuck::cast_slice(&row_angles));
        let g = grid((n * d).div_ceil(64));
        let p = [
            n,
            d,
            rec.recent,
            lay.raw,
            0,
            1,
            n_rot,
            rec_tab as usize,
            g[0] as usize,
        ];
        let p = self.words_region(p.iter().map(|&v| v as u32));
        let kvb = self.buf(io.kv);
        let binds = [B(&recent), A(region), A(p), B(&kvb), A(ang)];
        self.run(Kernel::SparseRaw { kv: ty }, &binds, g);

        let mut comps = Vec::new();
        if let (Some(c), Some(at)) = (io.comp, lay.comp) {
            comps.push(Comp {
                io: c,
                e: d,
                ratio: spec.ratio,
                at,
            });
        }
        if let (Some((c, _, _)), Some(at), Some(ix)) = (io.index, lay.lid, spec.indexer) {
            comps.push(Comp {
                io: c,
                e: ix.head_dim,
                ratio: 4,
                at,
            });
        }
        for c in &comps {
            let w = if c.ratio == 4 { 2 * c.e } else { c.e };
            let g = grid((n * w).div_ceil(64));
            let p = [
                n,
                w,
                rec.recent,
                c.at[0],
                c.at[1],
                c.ratio,
                0,
                rec_tab as usize,
            ];
            let p = self.words_region(p.iter().map(|&v| v as u32).chain([g[0]]));
            let [a, b, ape] = [c.io.kv, c.io.score, c.io.ape].map(|x| self.buf(x));
            let binds = [B(&recent), A(region), A(p), B(&a), B(&b), B(&ape)];
            self.run(Kernel::SparseComp { kv: ty }, &binds, g);
        }

        let span = spec.span();
        if spec.ratio > 0 {
            let ends: Vec<(usize, usize)> = self
                .rows
                .iter()
                .filter(|r| (r.pos + 1).is_multiple_of(spec.ratio))
                .map(|r| (r.seq, r.pos))
                .collect();
            for c in comps.iter().filter(|_| !ends.is_empty()) {
                assert!(c.e <= MAX_E, "compressed rows of {} (at most {MAX_E})", c.e);
                let mut rope = spec.comp_rope;
                rope.head_dim = c.e;
                let jobs: Vec<u32> = ends
                    .iter()
                    .flat_map(|&(seq, last)| {
                        let block = last / c.ratio * c.ratio;
                        let a = angles(&rope, block);
                        [seq as u32, last as u32]
                            .into_iter()
                            .chain(words(&a).collect::<Vec<_>>())
                    })
                    .collect();
                let jobs = self.rec.push(&self.ctx, bytemuck::cast_slice(&jobs));
                let g = grid(ends.len());
                let p = [
                    ends.len(),
                    c.e,
                    c.ratio,
                    rec.recent,
                    c.at[0],
                    c.at[1],
                    c.at[2],
                    rec.kept,
                    span,
                    rope.n_rot,
                    rec_tab as usize,
                    kept_tab as usize,
                ];
                let tail = [spec.rms_eps.to_bits(), g[0], 0, 0];
                let p = self.words_region(p.iter().map(|&v| v as u32).chain(tail));
                let norm = self.buf(c.io.norm);
                let binds = [B(&recent), B(&kept), A(region), A(p), B(&norm), A(jobs)];
                self.run(Kernel::SparseCompress { kv: ty }, &binds, g);
            }
        }

        row_angles
    }

    /// Per row, the compressed blocks the indexer picks where the row sees more than its
    /// `top_k` (ascending); `None` where it sees them all.
    fn picked_blocks(
        &mut self,
        io: &SparseIo,
        spec: &SparseSpec,
        cfg: &KvConfig,
        layer: usize,
    ) -> Vec<Option<Vec<usize>>> {
        let n = self.rows.len();
        let mut seen = vec![None; n];
        let (Some(ix), Some((_, qi, wt)), Some(lid)) = (spec.indexer, io.index, spec.layout().lid)
        else {
            return seen;
        };
        let entries: Vec<(usize, usize)> = self
            .rows
            .iter()
            .enumerate()
            .map(|(i, r)| (i, (r.pos + 1) / spec.ratio))
            .filter(|&(_, visible)| visible > ix.top_k)
            .collect();
        let Some(max_visible) = entries.iter().map(|e| e.1).max() else {
            return seen;
        };
        let rec = cfg.record(layer).expect("a record layer");
        let mut rope = spec.comp_rope;
        rope.head_dim = ix.head_dim;
        let n_rot = rope.n_rot;
        let sel: Vec<u32> = entries
            .iter()
            .flat_map(|&(i, visible)| {
                let r = self.rows[i];
                let a = angles(&rope, r.pos);
                [i as u32, r.seq as u32, r.pos as u32, visible as u32]
                    .into_iter()
                    .chain(words(&a).collect::<Vec<_>>())
            })
            .collect();
        let sel = self.rec.push(&self.ctx, bytemuck::cast_slice(&sel));
        let len = entries.len() * max_visible;
        let bytes = 4 * len as u64;
        if self.scores.as_ref().is_none_or(|s| s.size() < bytes) {
            self.scores = Some(self.ctx.buffer("indexer scores", bytes.next_power_of_two()));
        }
        let scores = self.scores.clone().expect("made above");
        let g = grid(len.div_ceil(64));
        let kept_tab = self.store_tables_at(cfg, layer, true);
        let p = [
            entries.len(),
            max_visible,
            ix.n_head,
            ix.head_dim,
            rec.kept,
            lid[2],
            spec.span(),
            n_rot,
            kept_tab as usize,
        ];
        let norm = 1.0 / ((ix.head_dim * ix.n_head) as f32).sqrt();
        let tail = [norm.to_bits(), g[0], 0];
        let p = self.words_region(p.iter().map(|&v| v as u32).chain(tail));
        let kept = self.kv.as_ref().expect("kv_alloc first").values[layer].clone();
        let [qi, wt] = [qi, wt].map(|x| self.buf(x));
        let step = A(self.step().region);
        let binds = [B(&kept), step, A(p), B(&qi), B(&wt), A(sel), B(&scores)];
        self.run(Kernel::SparseScores { kv: cfg.ty }, &binds, g);
        let mut bytes_out = Vec::new();
        self.rec
            .read(&self.ctx, &[(&scores, 0, bytes)], &mut bytes_out);
        let all: &[f32] = bytemuck::cast_slice(&bytes_out);
        for (j, &(i, visible)) in entries.iter().enumerate() {
            let row = &all[j * max_visible..j * max_visible + visible];
            let mut scored: Vec<(usize, f32)> = row.iter().copied().enumerate().collect();
            scored.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
            let mut top: Vec<usize> = scored[..ix.top_k].iter().map(|x| x.0).collect();
            top.sort_unstable();
            seen[i] = Some(top);
        }
        seen
    }

    /// A region of the arena holding a kernel's parameters `words`, zeros after them up
    /// to the 16 words of the largest parameter struct.
    fn words_region(&mut self, words: impl Iterator<Item = u32>) -> crate::context::Region {
        let mut w: Vec<u32> = words.collect();
        w.resize(w.len().max(16), 0);
        self.rec.push(&self.ctx, bytemuck::cast_slice(&w))
    }
}
