//! What a forward costs: the one model the planner's step-time budget and the
//! speculation policy both predict with.
//!
//! A forward of a [`Shape`] is predicted to take
//!
//! ```text
//! T = R(rows) + H(logits) + c · attended
//! ```
//!
//! `R(r)`: a forward of `r` rows at the start of a sequence, without the output head;
//! `H(n)`: the output head over the `n` rows whose logits are wanted; `c`: seconds per
//! attended position (a row at position `p` attends `p + 1`), over all layers. All three are
//! measured at start; while serving, each forward's time less its `H` and `c` parts is
//! folded into `R` at its row count, so `R` tracks the machine as it is.
//!
//! Worked example (1.5B, 2 threads): R(1) = 36 ms, R(16) = 90 ms, H(1) = 5 ms, c = 2 ns.
//! A decode step of 4 slots at position 1,000 is R(4) + H(4) + c·4,004 ≈ 38 + 6 + 8 ms;
//! adding a 16-row chunk of a prompt at position 1,984 adds R(20) − R(4) + c·32,000 ≈ 64 ms.

use std::time::Duration;

/// Weight of a new observation in the moving averages (of costs here, of acceptance and
/// prediction errors in the speculation policy).
pub(crate) const ALPHA: f64 = 0.15;

/// Seconds per call as a function of rows (index = rows), measured at start at some row
/// counts, interpolated between them, and refreshed by moving averages while serving.
#[derive(Debug, Clone)]
pub struct CostCurve {
    /// The moving averages.
    secs: Vec<f64>,
    /// Their running maximum, what [`CostCurve::at`] gives: more rows are never predicted
    /// faster, whatever noise one point's average took in (a curve that dipped made drafts
    /// that cannot be accepted look like they made a step faster).
    rising: Vec<f64>,
}

impl CostCurve {
    /// From `(rows, seconds)` measurements (any order, rows ≥ 1), defined for
    /// `1..=max_rows`; linear between points and beyond the last one.
    pub fn from_points(points: &[(usize, f64)], max_rows: usize) -> CostCurve {
        let mut pts: Vec<(usize, f64)> = points.iter().copied().filter(|p| p.0 > 0).collect();
        pts.sort_by_key(|p| p.0);
        pts.dedup_by_key(|p| p.0);
        let at = |r: usize| -> f64 {
            match pts.len() {
                0 => 0.0,
                1 => pts[0].1 * r as f64 / pts[0].0 as f64,
                _ => {
                    let i = pts.partition_point(|p| p.0 < r).clamp(1, pts.len() - 1);
                    let ((r0, t0), (r1, t1)) = (pts[i - 1], pts[i]);
                    let slope = (t1 - t0) / (r1 - r0) as f64;
                    (t0 + slope * (r as f64 - r0 as f64)).max(0.0)
                }
            }
        };
        let mut secs: Vec<f64> = (0..=max_rows.max(1))
            .map(|r| if r == 0 { 0.0 } else { at(r) })
            .collect();
        for r in 1..secs.len() {
            secs[r] = secs[r].max(secs[r - 1]);
        }
        CostCurve {
            rising: secs.clone(),
            secs,
        }
    }

    pub fn max_rows(&self) -> usize {
        self.secs.len() - 1
    }

    /// Seconds for `rows` rows (0 for none; linear beyond the table), never less than for
    /// fewer rows.
    pub fn at(&self, rows: usize) -> f64 {
        let m = self.max_rows();
        if rows <= m {
            return self.rising[rows];
        }
        let slope = if m >= 2 {
            self.secs[m] - self.secs[m - 1]
        } else {
            self.secs[m]
        };
        self.rising[m] + slope.max(0.0) * (rows - m) as f64
    }

    /// Folds in one measured call.
    pub fn observe(&mut self, rows: usize, took: Duration) {
        let Some(s) = self.secs.get_mut(rows).filter(|_| rows > 0) else {
            return;
        };
        *s += ALPHA * (took.as_secs_f64() - *s);
        for r in rows..self.secs.len() {
            self.rising[r] = self.secs[r].max(self.rising[r - 1]);
        }
    }
}

/// The rows of a forward, as the cost model counts them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Shape {
    pub rows: usize,
    /// Rows whose logits are wanted (the output head runs on them).
    pub logits: usize,
    /// Positions attended over all rows: `Σ (position + 1)`.
    pub attended: usize,
}

impl Shape {
    /// `n` rows of one sequence at positions `from..from + n`, `logits` of them wanting
    /// logits.
    pub fn run(from: usize, n: usize, logits: usize) -> Shape {
        Shape {
            rows: n,
            logits,
            attended: n * from + n * (n + 1) / 2,
        }
    }

    pub fn plus(self, o: Shape) -> Shape {
        Shape {
            rows: self.rows + o.rows,
            logits: self.logits + o.logits,
            attended: self.attended + o.attended,
        }
    }
}

/// Predicted seconds of forwards (see the module doc).
#[derive(Debug, Clone)]
pub struct StepCost {
    /// `R`: seconds by rows, near position 0, without the output head.
    pub rows: CostCurve,
    /// `H`: seconds of the output head by rows wanting logits.
    pub head: CostCurve,
    /// `c`: seconds per attended position.
    pub attend: f64,
}

impl StepCost {
    /// A model that predicts every forward free, until [`StepCost::observe`] or a
    /// calibration says otherwise.
    pub fn unmeasured(max_rows: usize) -> StepCost {
        StepCost {
            rows: CostCurve::from_points(&[], max_rows),
            head: CostCurve::from_points(&[], max_rows),
            attend: 0.0,
        }
    }

    /// Seconds of one forward of `s`.
    pub fn predict(&self, s: &Shape) -> f64 {
        self.rows.at(s.rows) + self.head.at(s.logits) + self.attend * s.attended as f64
    }

    /// Seconds of a step of `s` computed in forwards of at most `n_ubatch` rows.
    pub fn predict_step(&self, s: &Shape, n_ubatch: usize) -> f64 {
        let ub = n_ubatch.max(1);
        let (full, rest) = (s.rows / ub, s.rows % ub);
        full as f64 * self.rows.at(ub)
            + self.rows.at(rest)
            + self.head.at(s.logits)
            + self.attend * s.attended as f64
    }

    /// Folds in one measured forward of `s`: its time less the attention term is shared
    /// between `R(rows)` and `H(logits)` in proportion to their predictions (all of it to
    /// `R` while both are 0). Both move together so that a start measurement spoiled by
    /// another process (an output head timed at a second) heals from decode steps, whose
    /// rows all want logits; folding the whole error into `R` left such a head in every
    /// prediction, `R` pinned at 0.
    pub fn observe(&mut self, s: &Shape, took: Duration) {
        let target = (took.as_secs_f64() - self.attend * s.attended as f64).max(0.0);
        let (r, h) = (self.rows.at(s.rows), self.head.at(s.logits));
        let scale = |part: f64| Duration::from_secs_f64(part * target / (r + h));
        match r + h > 0.0 {
            true => {
                self.rows.observe(s.rows, scale(r));
                if s.logits > 0 {
                    self.head.observe(s.logits, scale(h));
                }
            }
            false => self.rows.observe(s.rows, Duration::from_secs_f64(target)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(p: &[(usize, f64)]) -> Vec<(usize, f64)> {
        p.iter().map(|&(r, t)| (r, t / 1e3)).collect()
    }

    #[test]
    fn curve_interpolates_and_extrapolates() {
        let t = CostCurve::from_points(
            &ms(&[(1, 41.0), (2, 46.4), (4, 56.2), (8, 80.9), (16, 133.4)]),
            64,
        );
        assert!((t.at(3) - 0.0513).abs() < 1e-6);
        assert!((t.at(64) - (0.1334 + 48.0 * (0.1334 - 0.0809) / 8.0)).abs() < 1e-6);
        assert!(t.at(100) > t.at(64));
        assert_eq!(t.at(0), 0.0);
    }

    #[test]
    fn a_step_is_its_rows_head_and_attention_and_learns_its_rows() {
        let mut c = StepCost {
            rows: CostCurve::from_points(&ms(&[(1, 30.0), (8, 44.0), (64, 300.0)]), 64),
            head: CostCurve::from_points(&ms(&[(1, 5.0), (64, 69.0)]), 64),
            attend: 1e-9,
        };
        let s = Shape::run(1000, 8, 1).plus(Shape::run(0, 1, 1));
        assert_eq!(s.attended, 8 * 1000 + 36 + 1);
        let want = c.rows.at(9) + c.head.at(2) + 1e-9 * s.attended as f64;
        assert!((c.predict(&s) - want).abs() < 1e-12);
        let big = Shape::run(0, 150, 1);
        let split = 2.0 * c.rows.at(64) + c.rows.at(22) + c.head.at(1) + 1e-9 * big.attended as f64;
        assert!((c.predict_step(&big, 64) - split).abs() < 1e-12);
        let before = c.predict(&s);
        for _ in 0..100 {
            c.observe(&s, Duration::from_secs_f64(2.0 * before));
        }
        assert!(
            (c.predict(&s) / before - 2.0).abs() < 1e-3,
            "R(9) and H(2) learned"
        );
        assert!(
            (c.rows.at(8) - 0.044).abs() < 1e-12,
            "other row counts kept"
        );
    }

    /// The start line of a server calibrated while another one started: an output head of
    /// a second for one row. Decode steps of 33 ms bring the prediction to 33 ms.
    #[test]
    fn a_spoiled_head_heals_from_decode_steps() {
        let mut c = StepCost {
            rows: CostCurve::from_points(&ms(&[(1, 135.3), (2, 51.1), (4, 139.6)]), 64),
            head: CostCurve::from_points(&ms(&[(1, 1005.7), (8, 0.0)]), 64),
            attend: 0.0,
        };
        let decode = Shape::run(300, 1, 1);
        for _ in 0..100 {
            c.observe(&decode, Duration::from_millis(33));
        }
        assert!(
            (c.predict(&decode) - 0.033).abs() < 1e-4,
            "{}",
            c.predict(&decode)
        );
    }
}
