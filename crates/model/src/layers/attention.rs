use std::cell::RefCell;

use kernels::attention::{attend, AttentionScratch};
use kernels::ops::{add_inplace, rms_norm, rms_norm_inplace, rope, rope_angles};
use kernels::pool::SharedOut;
use kernels::{matmul, matmul_many, ThreadPool};
use kv::KvPool;

use crate::forward::{Batch, Scratch};
use crate::weights::LayerWeights;
use crate::Model;

thread_local! {
    static ATTN: RefCell<AttentionScratch> = RefCell::new(AttentionScratch::default());
}

fn add_bias(rows: &mut [f32], bias: &Option<Vec<f32>>) {
    if let Some(b) = bias {
        for r in rows.chunks_exact_mut(b.len()) {
            add_inplace(r, b);
        }
    }
}

/// Self-attention block of layer `il`: `hidden += attn_output(attention(x))` with
/// `x = rms_norm(hidden)`; each row's keys and values are stored in `kv` before any row
/// attends, and a row at `pos` attends positions `0..=pos` of its own sequence.
#[allow(clippy::too_many_arguments)]
pub fn block(
    model: &Model,
    il: usize,
    lw: &LayerWeights,
    hidden: &mut [f32],
    batch: Batch,
    kv: &mut KvPool,
    s: &mut Scratch,
    pool: &ThreadPool,
) {
    let hp = &model.hparams;
    let Batch { rows, seqs } = batch;
    let n = rows.len();
    let (e, qd, kvd, hd) = (hp.n_embd, hp.q_dim(), hp.kv_dim(), hp.head_dim);
    let x = &mut s.x[..n * e];
    for (h, xr) in hidden.chunks_exact(e).zip(x.chunks_exact_mut(e)) {
        rms_norm(h, &lw.attn_norm, hp.rms_eps, xr);
    }
    let (q, k, v) = (&mut s.q[..n * qd], &mut s.k[..n * kvd], &mut s.v[..n * kvd]);
    // q: [n, n_head * head_dim], k and v: [n, n_head_kv * head_dim]
    let f = &model.file;
    let qkv = [lw.attn_q.view(f), lw.attn_k.view(f), lw.attn_v.view(f)];
    matmul_many(pool, &qkv, x, &mut [&mut *q, &mut *k, &mut *v], s.precision);
    add_bias(q, &lw.attn_q_bias);
    add_bias(k, &lw.attn_k_bias);
    add_bias(v, &lw.attn_v_bias);
    if let (Some(qn), Some(kn)) = (&lw.attn_q_norm, &lw.attn_k_norm) {
        q.chunks_exact_mut(hd)
            .for_each(|h| rms_norm_inplace(h, qn, hp.rms_eps));
        k.chunks_exact_mut(hd)
            .for_each(|h| rms_norm_inplace(h, kn, hp.rms_eps));
    }
    let mode = hp.arch.spec().rope_mode;
    // The KV pool holds the stage's blocks only.
    let kl = il - model.stage.layers.start;
    let mut cos_sin = vec![(0f32, 0f32); hp.n_rot / 2];
    for (r, row) in rows.iter().enumerate() {
        rope_angles(row.pos, hp.n_rot, hp.rope_freq_base, &mut cos_sin);
        rope(&mut q[r * qd..(r + 1) * qd], hd, mode, &cos_sin);
        rope(&mut k[r * kvd..(r + 1) * kvd], hd, mode, &cos_sin);
        kv.write(
            kl,
            seqs[row.seq],
            row.pos,
            &k[r * kvd..(r + 1) * kvd],
            &v[r * kvd..(r + 1) * kvd],
        );
    }

    let blocks: Vec<_> = seqs.iter().map(|sq| kv.blocks(kl, sq)).collect();
    let views: Vec<_> = blocks
        .iter()
        .map(|(kb, vb)| (kv.view(kb), kv.view(vb)))
        .collect();
    let group = hp.n_head / hp.n_head_kv;
    let scale = 1.0 / (hd as f32).sqrt();
    let attn = SharedOut::new(&mut s.attn);
    let q = &*q;
    // Units interleaved over threads: a row's cost grows with its position, so contiguous
    // ranges would leave the thread with the early rows of a prompt idle.
    pool.run(&|t, nt| {
        ATTN.with(|a| {
            let mut a = a.borrow_mut();
            for unit in (t..n * hp.n_head_kv).step_by(nt) {
                let (r, g) = (unit / hp.n_head_kv, unit % hp.n_head_kv);
                let (keys, values) = &views[rows[r].seq];
                // SAFETY: unit (r, g) alone writes heads g*group..(g+1)*group of row r.
                let out = unsafe { attn.slice(r * qd + g * group * hd, group * hd) };
                let q_row = &q[r * qd..(r + 1) * qd];
                let heads = g * group..(g + 1) * group;
                attend(
                    q_row,
                    keys,
                    values,
                    g,
                    heads,
                    rows[r].pos + 1,
                    scale,
                    &mut a,
                    out,
                );
            }
        });
    });
    let proj = &mut s.proj[..n * e];
    matmul(
        pool,
        &lw.attn_output.view(&model.file),
        &s.attn[..n * qd],
        proj,
        s.precision,
    );
    add_inplace(hidden, proj);
}
