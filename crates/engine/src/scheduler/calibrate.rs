//! What forwards cost on this machine, measured before the engine takes requests: the
//! cost model's rows curve, output head and attention term ([`crate::cost`]), and, with
//! speculation, the drafter's costs.

use std::time::{Duration, Instant};

use device::Row;
use kv::SeqKv;

use super::Engine;
use crate::cost::{CostCurve, StepCost};
use crate::executor::{Enter, Out};

/// Row counts at which a forward is timed (up to `n_ubatch`).
const ROW_POINTS: [usize; 7] = [1, 2, 4, 8, 16, 32, 64];
/// Row counts at which the output head is timed (a forward with logits against one
/// without).
const HEAD_POINTS: [usize; 3] = [1, 8, 32];
/// The position at which attention is timed (less where the pool or a slot holds less).
const ATTEND_AT: usize = 2048;
/// Rows of the forward attention is timed with: a prompt's chunk.
const ATTEND_ROWS: usize = 64;
/// Attention is not timed where a slot holds fewer positions than this.
const ATTEND_MIN: usize = 256;
/// A session no request has (task ids count up from 0).
const SCRATCH_SESSION: u64 = u64::MAX;

/// `rows:ms` pairs, for the start lines.
pub(super) fn in_ms(points: &[(usize, f64)]) -> String {
    points
        .iter()
        .map(|(r, t)| format!("{r}:{:.1}", t * 1e3))
        .collect::<Vec<_>>()
        .join(" ")
}

impl Engine {
    /// Measures the cost model and the drafter's costs, and prints them.
    pub(super) fn calibrate(&mut self) {
        let ub = self.cfg.n_ubatch;
        let fastest = |e: &mut Engine, rows: usize, from: usize, logits: bool| {
            (0..2)
                .filter_map(|_| e.time_forward(rows, from, logits))
                .min()
                .map(|t| t.as_secs_f64())
        };
        let top = ub.min(ROW_POINTS[ROW_POINTS.len() - 1]);
        let plain: Vec<(usize, f64)> = ROW_POINTS
            .into_iter()
            .filter(|&r| r < top)
            .chain([top])
            .filter_map(|r| Some((r, fastest(self, r, 0, false)?)))
            .collect();
        let measured = CostCurve::from_points(&plain, ub);
        let at = |r: usize| measured.at(r);
        let head: Vec<(usize, f64)> = HEAD_POINTS
            .into_iter()
            .filter(|&r| r <= ub)
            .filter_map(|r| Some((r, (fastest(self, r, 0, true)? - at(r)).max(0.0))))
            .collect();
        let rows = ATTEND_ROWS.min(ub);
        let far = ATTEND_AT.min(self.cfg.slot_ctx().saturating_sub(rows));
        let attend = match self.front.is_none() && far >= ATTEND_MIN {
            true => fastest(self, rows, far, false)
                .map_or(0.0, |t| ((t - at(rows)) / (rows * far) as f64).max(0.0)),
            false => 0.0,
        };
        let near: Vec<(usize, f64)> = plain
            .iter()
            .map(|&(r, t)| (r, (t - attend * (r * (r + 1) / 2) as f64).max(0.0)))
            .collect();
        self.cost = StepCost {
            rows: CostCurve::from_points(&near, ub),
            head: CostCurve::from_points(&head, ub),
            attend,
        };
        eprintln!(
            "step costs: forward ms by rows {}; output head ms by rows {}; attention {:.2} ns per position; step budget {}",
            in_ms(&near),
            in_ms(&head),
            attend * 1e9,
            self.cfg.step_budget
        );
        self.calibrate_drafter();
    }

    /// One forward of `rows` rows of a scratch sequence at positions `from..from + rows`,
    /// with the output head on every row or on none. The positions before `from` hold
    /// whatever their blocks held: only the time counts.
    fn time_forward(&mut self, rows: usize, from: usize, logits: bool) -> Option<Duration> {
        let hp = &self.exec.model().hparams;
        let (e, n_vocab) = (hp.hidden_width(), hp.n_vocab);
        let mut seq = SeqKv::default();
        let entering: Vec<(u64, usize, u32)> = (0..rows)
            .map(|i| (SCRATCH_SESSION, from + i, (i * 7919 % n_vocab) as u32))
            .collect();
        let tokens: Vec<u32> = entering.iter().map(|r| r.2).collect();
        let batch_rows: Vec<Row> = (from..from + rows).map(|pos| Row { pos, seq: 0 }).collect();
        let all: Vec<usize> = if logits {
            (0..rows).collect()
        } else {
            Vec::new()
        };
        let t0 = Instant::now();
        let enter = match &mut self.front {
            Some(f) => {
                let entered = f.forward(&entering, &[], &[], &mut self.entered[..rows * e]);
                let _ = f.release(SCRATCH_SESSION);
                entered.ok()?;
                Enter::States {
                    states: &self.entered[..rows * e],
                    images: &[],
                }
            }
            None => Enter::Tokens(&tokens),
        };
        let out = Out::Logits {
            rows: &all,
            on_logits: &mut |_, _| {},
        };
        let done = self.exec.forward(&mut [&mut seq], &batch_rows, enter, out);
        let took = t0.elapsed();
        self.exec.release(&mut seq);
        done.ok()?;
        Some(took)
    }
}
