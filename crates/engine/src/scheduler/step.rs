//! One engine step: the plan's forwards, then its drafts settled, then the requests that
//! ended retired.

use std::ops::Range;
use std::sync::Arc;
use std::time::Instant;

use device::Row;
use kv::SeqKv;

use super::planner::Planned;
use super::{release_kv, Engine};
use crate::cost::Shape;
use crate::executor::{Enter, Out, Placed, RowOut, Taps};
use crate::request::Summary;
use crate::Result;

/// What a step's forwards ended: requests that finished, and requests that failed (with
/// the error they end with), by slot.
#[derive(Default)]
pub(super) struct Done {
    finished: Vec<(usize, Summary)>,
    failed: Vec<(usize, String)>,
}

impl Done {
    fn has_failed(&self, slot: usize) -> bool {
        self.failed.iter().any(|f| f.0 == slot)
    }

    fn fail(&mut self, slot: usize, why: String) {
        if !self.has_failed(slot) {
            self.failed.push((slot, why));
        }
    }

    /// The slot's row at `pos` came out NaN or infinite.
    fn poison(&mut self, slot: usize, pos: usize) {
        self.fail(
            slot,
            format!(
                "the model computed NaN or infinite numbers at position {pos} of this request; \
                 its output cannot be trusted and it was stopped"
            ),
        );
    }
}

impl Engine {
    /// Runs the planned rows through the model in forwards of `n_ubatch` rows; every slot
    /// whose last token was computed samples its next one, or verifies its draft row by
    /// row ([`Engine::forward_plan`]); KV of rows past a rejected draft is rolled back
    /// ([`Engine::settle_drafts`]); finished and failed requests leave their slots
    /// ([`Engine::retire`]); sequences that filled their slots shift
    /// ([`Engine::shift_contexts`]).
    pub(super) fn step(&mut self, plan: &[Planned]) {
        let Some(done) = self.forward_plan(plan) else {
            return;
        };
        self.settle_drafts(plan);
        self.retire(done);
        self.shift_contexts();
    }

    /// Every sequence that filled its slot and shifts its context gives its KV up as a
    /// preempted one does (to the prefix cache, under its tokens before the shift), drops
    /// the tokens, and computes the rest again from what the cache gives back; its drafter
    /// starts over.
    fn shift_contexts(&mut self) {
        for slot in 0..self.slots.len() {
            if self.slots[slot]
                .as_ref()
                .is_none_or(|a| a.seq.shift_due.is_none())
            {
                continue;
            }
            self.give_up_kv(slot);
            let a = self.slots[slot].as_mut().expect("slot is active");
            a.seq.shift_context();
            a.resumed = true;
            self.counters.requests.context_shifts_total += 1;
            if let Some(spec) = &mut self.spec {
                spec.release(slot);
            }
        }
    }

    /// The forwards of `plan`, or `None` when the box was lost past its grace (every
    /// request was ended then).
    fn forward_plan(&mut self, plan: &[Planned]) -> Option<Done> {
        let rows = self.rows(plan);
        // A row's logits are wanted when it computes the last token or a draft token of a
        // generating request; an embedding request wants its pooling's states, a drafter
        // that reads the target's features every generating row's.
        let feed = self.spec.as_ref().is_some_and(|s| s.features().parts() > 0);
        let wanted: Vec<(bool, bool)> = rows
            .iter()
            .map(|&(slot, pos, _)| {
                let seq = &self.active(slot).seq;
                let logits = !seq.embeds() && pos + 1 >= seq.tokens.len();
                (logits, seq.wants_state(pos) || (feed && !seq.embeds()))
            })
            .collect();
        for p in plan {
            self.slots[p.slot]
                .as_mut()
                .expect("planned")
                .seq
                .begin_step();
        }
        let mut done = Done::default();
        for span in self.forwards(&rows) {
            let (at, chunk) = (span.start, &rows[span]);
            let t0 = Instant::now();
            let entering = self.entering(chunk);
            let drafts_from = self.drafts_from(chunk);
            let pictured = self.pictured(chunk);
            let images = placed(&pictured);
            if let Err(why) = self.enter(&entering, &drafts_from, &images) {
                self.give_up(&why);
                return None;
            }
            let waited = t0.elapsed();
            let computing = Instant::now();
            let n = chunk.len();
            let out_rows: Vec<usize> = (0..n).filter(|&r| wanted[at + r].0).collect();
            let state_rows: Vec<usize> = (0..n).filter(|&r| wanted[at + r].1).collect();
            let kinds = self.row_kinds(chunk);
            if let Err(e) = self.forward_chunk(chunk, &images, (&out_rows, &state_rows), &mut done)
            {
                for &(slot, _, _) in chunk {
                    let why = format!("the engine could not compute this request: {e}");
                    done.fail(slot, why);
                }
            }
            self.counters.tokens.n_decode_total += 1;
            self.counters.tokens.rows_total += n as u64;
            self.counters.tokens.n_busy_slots_total += self.slots.iter().flatten().count() as u64;
            for &(slot, pos, _) in chunk {
                let t = &mut self.counters.tokens;
                t.n_tokens_max = t.n_tokens_max.max(pos as u64 + 1);
                let seq = &mut self.slots[slot].as_mut().expect("planned").seq;
                if pos < seq.n_prompt {
                    t.prompt_tokens_total += 1;
                    seq.report_progress();
                }
            }
            let share = t0.elapsed().as_secs_f64() / n.max(1) as f64;
            let st = &mut self.counters.steps;
            st.prefill_seconds_total += share * kinds[0] as f64;
            st.decode_seconds_total += share * kinds[1] as f64;
            st.verify_seconds_total += share * kinds[2] as f64;
            let shape = Shape {
                rows: n,
                logits: out_rows.len(),
                attended: chunk.iter().map(|r| r.1 + 1).sum(),
            };
            self.cost.observe(&shape, t0.elapsed());
            if self.front.is_some() {
                self.counters.split.head_compute_seconds_total +=
                    t0.elapsed().saturating_sub(waited).as_secs_f64();
                self.overlap.head(computing, Instant::now());
                self.counters.split.both_busy_seconds_total = self.overlap.both;
            }
        }
        Some(done)
    }

    /// How many of `chunk`'s rows compute the prompt, generated tokens and draft tokens,
    /// told before the forward (verifying a draft commits its accepted rows as tokens).
    fn row_kinds(&self, chunk: &[(usize, usize, u32)]) -> [usize; 3] {
        let mut kinds = [0usize; 3];
        for &(slot, pos, _) in chunk {
            let seq = &self.slots[slot].as_ref().expect("planned").seq;
            let kind = if pos < seq.n_prompt {
                0
            } else if pos < seq.tokens.len() {
                1
            } else {
                2
            };
            kinds[kind] += 1;
        }
        kinds
    }

    /// Ends the step's verification of every planned slot: the KV of rows past its first
    /// rejected draft token is rolled back (here and on the box), and the policy learns
    /// what was accepted.
    fn settle_drafts(&mut self, plan: &[Planned]) {
        for p in plan {
            let seq = &mut self.slots[p.slot].as_mut().expect("planned").seq;
            let d = seq.end_step();
            seq.redo = 0;
            if d.computed == 0 {
                continue;
            }
            let valid = (p.from + p.n - (d.computed - d.accepted)).min(seq.tokens.len());
            let mut kept = self.exec.truncate(&mut seq.kv, valid);
            if let Some(f) = &mut self.front {
                // A front that cannot keep what this stage keeps (its link lost, an image
                // to compute again): both start the sequence again.
                if kept < p.from + p.n && f.truncate(seq.task, kept).is_err() {
                    self.exec.release(&mut seq.kv);
                    let _ = f.release(seq.task);
                    kept = 0;
                }
            }
            seq.redo = valid.saturating_sub(kept);
            if let Some(spec) = &mut self.spec {
                spec.observe(p.slot, d.verified, d.accepted, &mut self.counters);
                self.counters.spec.spec_rejected_rows_total += (d.computed - d.accepted) as u64;
            }
        }
    }

    /// Failed requests end with their error, finished ones are counted; both free their
    /// slots.
    fn retire(&mut self, done: Done) {
        for (slot, why) in done.failed {
            if done.finished.iter().any(|f| f.0 == slot) {
                continue;
            }
            let Some(mut a) = self.slots[slot].take() else {
                continue;
            };
            a.seq.fail(why);
            self.counters.requests.requests_failed += 1;
            release_kv(self.exec.kv_mut(), &mut self.front, &mut a.seq);
            if let Some(spec) = &mut self.spec {
                spec.release(slot);
            }
        }
        for (slot, s) in done.finished {
            let c = &mut self.counters;
            c.requests.requests_done += 1;
            c.tokens.tokens_predicted_total += s.predicted_n as u64;
            c.tokens.prompt_seconds_total += s.prompt_ms / 1e3;
            c.tokens.predicted_seconds_total += s.predicted_ms / 1e3;
            self.free_slot(slot);
        }
    }

    /// `rows` (a step's) cut into forwards of at most `n_ubatch` rows, each cut moved back to
    /// the start of an image it would fall in (an image's rows are computed in one forward;
    /// the server refuses towers whose images take more than `n_ubatch`).
    fn forwards(&self, rows: &[(usize, usize, u32)]) -> Vec<Range<usize>> {
        let ub = self.cfg.n_ubatch;
        let mut out = Vec::new();
        let mut start = 0;
        while start < rows.len() {
            let mut end = (start + ub).min(rows.len());
            if let Some(&(slot, pos, _)) = rows.get(end) {
                let images = &self.active(slot).seq.images;
                let cut = images
                    .iter()
                    .find(|i| i.at < pos && i.span().contains(&pos));
                let back = cut.map_or(end, |img| end - (pos - img.at));
                if rows[end - 1].0 == slot && back > start {
                    end = back;
                }
            }
            out.push(start..end);
            start = end;
        }
        out
    }

    /// The runs of `chunk`'s rows (a slot's rows together) that are its slots' images'.
    fn pictured(&self, chunk: &[(usize, usize, u32)]) -> Vec<Pictured> {
        let e = self.exec.model().hparams.n_embd;
        let mut out = Vec::new();
        let mut start = 0;
        while start < chunk.len() {
            let (slot, pos0, _) = chunk[start];
            let len = chunk[start..].iter().take_while(|r| r.0 == slot).count();
            let seq = &self.slots[slot].as_ref().expect("planned").seq;
            for img in &seq.images {
                let (lo, hi) = (img.at.max(pos0), (img.at + img.n).min(pos0 + len));
                if lo < hi {
                    let rows = start + lo - pos0..start + hi - pos0;
                    let floats = (lo - img.at) * e..(hi - img.at) * e;
                    out.push((rows, img.embeddings.clone(), floats, img.bidirectional));
                }
            }
            start += len;
        }
        out
    }

    /// One forward of `chunk`'s rows (`(slot, position, token)`, a slot's rows together), of
    /// which `images` ([`Engine::pictured`]) are images' rows:
    /// their states enter from the front (in `self.entered`) or are embedded; each slot in
    /// it commits its rows; the logits of rows `out_rows.0` are verified or sampled and the
    /// normed states of rows `out_rows.1` pooled into their embeddings (or, for a generating
    /// request, handed to the drafter), unless a row of that
    /// slot came out NaN or infinite (then the slot fails at that row).
    fn forward_chunk(
        &mut self,
        chunk: &[(usize, usize, u32)],
        images: &[Placed<'_>],
        (out_rows, state_rows): (&[usize], &[usize]),
        done: &mut Done,
    ) -> Result<()> {
        let mut seq_slots: Vec<usize> = Vec::new();
        let mut rows = Vec::with_capacity(chunk.len());
        for &(slot, pos, _) in chunk {
            if seq_slots.last() != Some(&slot) {
                seq_slots.push(slot);
            }
            rows.push(Row {
                pos,
                seq: seq_slots.len() - 1,
            });
        }
        // The sequences' KV leaves their slots for the forward, so that sampling may
        // borrow the slots meanwhile; a recurrent state keeps its checkpoint before the
        // first draft row, so that rejected drafts cost no accepted row again.
        let mut kvs: Vec<SeqKv> = seq_slots
            .iter()
            .map(|&s| {
                let seq = &mut self.slots[s].as_mut().expect("planned").seq;
                let mut kv = std::mem::take(&mut seq.kv);
                kv.uncertain_from(seq.tokens.len());
                kv
            })
            .collect();
        if !self.exec.model().adapters.is_empty() {
            let scales = seq_slots
                .iter()
                .map(|&s| self.slots[s].as_ref().expect("planned").seq.lora.clone())
                .collect();
            self.exec.set_adapter_scales(scales);
        }
        let tokens: Vec<u32> = chunk.iter().map(|r| r.2).collect();
        let n = chunk.len();
        let enter = match self.front {
            Some(_) => Enter::States {
                states: &self.entered[..n * self.exec.model().hparams.hidden_width()],
                images,
            },
            None if images.is_empty() => Enter::Tokens(&tokens),
            None => Enter::Pictured {
                tokens: &tokens,
                images,
            },
        };
        // Rows wanting states are an embedding request's (its pooling takes them) or a
        // generating one's (the drafter's features, gathered here and handed over after
        // the forward, a slot's rows in order).
        let features = self.spec.as_ref().map(|s| s.features().clone());
        let features = features.unwrap_or_default();
        let embeds = |slot: usize| self.slots[slot].as_ref().expect("planned").seq.embeds();
        let fed: Vec<usize> = state_rows
            .iter()
            .copied()
            .filter(|&r| !embeds(chunk[r].0))
            .collect();
        let states: Vec<usize> = match features.last {
            true => state_rows.to_vec(),
            false => state_rows
                .iter()
                .copied()
                .filter(|&r| embeds(chunk[r].0))
                .collect(),
        };
        let hp = &self.exec.model().hparams;
        let (e, h) = (hp.n_embd, hp.hidden_width());
        let width = features.width(h, e);
        let mut fed_at = vec![usize::MAX; n];
        for (i, &r) in fed.iter().enumerate() {
            fed_at[r] = i;
        }
        let mut feats = vec![0f32; fed.len() * width];
        let (slots, tok) = (&mut self.slots, &self.tok);
        let mut sampling = std::time::Duration::ZERO;
        let mut on_row = |r: usize, out: RowOut<'_>| {
            let (slot, pos, _) = chunk[r];
            if done.has_failed(slot) {
                return;
            }
            let seq = &mut slots[slot].as_mut().expect("planned").seq;
            if pos + 1 == seq.n_prompt {
                seq.report_read(seq.n_prompt);
            }
            let ended = match out {
                RowOut::Logits(logits) if !device::math::all_finite(logits) => {
                    return done.poison(slot, pos)
                }
                RowOut::Logits(logits) => {
                    let t0 = Instant::now();
                    let ended = seq.accept(logits, tok);
                    sampling += t0.elapsed();
                    ended
                }
                RowOut::State(state) if seq.embeds() => Ok(seq.take_state(pos, state)),
                RowOut::State(state) => {
                    let at = fed_at[r] * width + features.taps.len() * h;
                    feats[at..at + e].copy_from_slice(state);
                    Ok(None)
                }
                RowOut::Tap { layer, state } => {
                    let k = features.taps.iter().position(|&l| l == layer);
                    let at = fed_at[r] * width + k.expect("a tapped layer") * h;
                    feats[at..at + h].copy_from_slice(state);
                    Ok(None)
                }
            };
            match ended {
                Ok(Some(summary)) => done.finished.push((slot, summary)),
                Ok(None) => {}
                Err(why) => done.fail(slot, why),
            }
        };
        let mut seqs: Vec<&mut SeqKv> = kvs.iter_mut().collect();
        let result = self.exec.forward(
            &mut seqs,
            &rows,
            enter,
            Out::Rows {
                logits: out_rows,
                states: &states,
                taps: Taps {
                    layers: &features.taps,
                    rows: &fed,
                },
                on_row: &mut on_row,
            },
        );
        self.counters.steps.sample_seconds_total += sampling.as_secs_f64();
        for (&s, kv) in seq_slots.iter().zip(kvs) {
            self.slots[s].as_mut().expect("planned").seq.kv = kv;
        }
        for (r, &ok) in result?.iter().enumerate() {
            let (slot, pos, _) = chunk[r];
            if !ok && !done.has_failed(slot) {
                done.poison(slot, pos);
            }
        }
        if let Some(spec) = self.spec.as_mut() {
            for (&r, row) in fed.iter().zip(feats.chunks(width.max(1))) {
                let (slot, pos, _) = chunk[r];
                if !done.has_failed(slot) {
                    spec.observe_state(slot, pos, row);
                }
            }
        }
        Ok(())
    }
}

/// A run of an image's rows in a forward: the rows, the image's embeddings, the floats of
/// them those rows take, and whether they see one another ([`Engine::pictured`]).
type Pictured = (Range<usize>, Arc<[f32]>, Range<usize>, bool);

/// [`Engine::pictured`]'s runs as the executor takes them.
fn placed(pictured: &[Pictured]) -> Vec<Placed<'_>> {
    pictured
        .iter()
        .map(|(rows, embeddings, floats, bidirectional)| Placed {
            rows: rows.clone(),
            embeddings: &embeddings[floats.clone()],
            bidirectional: *bidirectional,
        })
        .collect()
}
