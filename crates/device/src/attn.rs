//! Which positions an attention row sees: a grouped-query attention's shape
//! ([`AttnSpec`]) and the spans of a step's rows, causal, in a block that sees itself, or
//! bidirectional from a position on ([`Step::bidirectional`]).

use std::ops::Range;

#[cfg(doc)]
use crate::{Op, Step};
use crate::{Row, NOT_BIDIRECTIONAL};

/// Grouped-query attention: `n_head` query heads, `n_head / n_head_kv` per KV head, scores
/// `scale · q·k`, each row over the positions [`AttnSpec::span_of`] gives.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AttnSpec {
    pub n_head: usize,
    pub n_head_kv: usize,
    pub head_dim: usize,
    pub scale: f32,
    /// Sliding-window attention: a row sees only the last `window` positions up to its own.
    pub window: Option<usize>,
    /// `false`: a row also sees the step's later rows of its sequence (a block drafter's
    /// block, whose rows see one another; [`Op::BlockAttention`]).
    pub causal: bool,
}

impl AttnSpec {
    /// What [`AttnSpec::span_of`] needs of a step's `rows` and [`Step::bidirectional`]:
    /// where a row may see later rows, each sequence's last position in the step
    /// ([`last_positions`]) and where its rows start to see them.
    pub fn step_ends(&self, rows: &[Row], bidirectional: &[usize]) -> StepEnds {
        let some = bidirectional.iter().any(|&f| f != NOT_BIDIRECTIONAL);
        if self.causal && !some {
            return StepEnds::default();
        }
        let last = last_positions(rows);
        let from = (0..last.len())
            .map(|s| match self.causal {
                false => 0,
                true => bidirectional.get(s).copied().unwrap_or(NOT_BIDIRECTIONAL),
            })
            .collect();
        StepEnds { last, from }
    }

    /// The positions step row `row` attends, `ends` being [`AttnSpec::step_ends`]: up to its
    /// own, or up to its sequence's last in the step where it sees later rows (not causal,
    /// or [`Step::bidirectional`]), from the first of the last `window` up to its own.
    pub fn span_of(&self, row: Row, ends: &StepEnds) -> Range<usize> {
        let last = match (ends.last.get(row.seq), ends.from.get(row.seq)) {
            (Some(&last), Some(&from)) if row.pos >= from => last,
            _ => row.pos,
        };
        let start = self.window.map_or(0, |w| (row.pos + 1).saturating_sub(w));
        start..last.max(row.pos) + 1
    }
}

/// Per sequence of a step, its last position and the first of its positions whose rows
/// see up to it ([`AttnSpec::step_ends`]); empty where every row is causal.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StepEnds {
    last: Vec<usize>,
    from: Vec<usize>,
}

/// The last position `row` sees among its step's: its own, or where `last` is given
/// ([`last_positions`] of the step: rows that see later ones) its sequence's last.
pub fn last_seen(last: &[usize], row: Row) -> usize {
    last.get(row.seq).map_or(row.pos, |&l| l.max(row.pos))
}

/// Per sequence index, the last position of its rows in `rows` (0 where it has none).
pub fn last_positions(rows: &[Row]) -> Vec<usize> {
    let n = rows.iter().map(|r| r.seq + 1).max().unwrap_or(0);
    let mut last = vec![0; n];
    for r in rows {
        last[r.seq] = last[r.seq].max(r.pos);
    }
    last
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A causal row sees up to itself; a row of a block (not causal) up to its sequence's
    /// last row in the step, whatever the other sequences' rows; a window counts from the
    /// row's own position.
    #[test]
    fn spans_of_causal_and_block_rows() {
        let rows = [
            Row { pos: 10, seq: 0 },
            Row { pos: 11, seq: 0 },
            Row { pos: 12, seq: 0 },
            Row { pos: 40, seq: 1 },
        ];
        let last = last_positions(&rows);
        assert_eq!(last, [12, 40]);
        let mut spec = AttnSpec {
            n_head: 1,
            n_head_kv: 1,
            head_dim: 8,
            scale: 1.0,
            window: None,
            causal: true,
        };
        let span = |spec: &AttnSpec, bidi: &[usize], r: usize| {
            spec.span_of(rows[r], &spec.step_ends(&rows, bidi))
        };
        assert_eq!(span(&spec, &[], 0), 0..11);
        // Sequence 0's rows from position 11 see one another (an image at 11..=12).
        assert_eq!(span(&spec, &[11, NOT_BIDIRECTIONAL], 0), 0..11);
        assert_eq!(span(&spec, &[11, NOT_BIDIRECTIONAL], 1), 0..13);
        assert_eq!(span(&spec, &[11, NOT_BIDIRECTIONAL], 3), 0..41);
        spec.causal = false;
        assert_eq!(span(&spec, &[], 0), 0..13);
        assert_eq!(span(&spec, &[], 3), 0..41);
        spec.window = Some(4);
        assert_eq!(span(&spec, &[], 0), 7..13);
    }
}
