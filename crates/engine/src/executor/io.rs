//! What a forward takes and gives ([`super::Executor::forward`]): how its rows enter the
//! stage, which of them give logits, states or taps, and how a caller receives them.

use std::ops::Range;

use device::Row;

use crate::{Error, Result};

/// Which rows of an evaluation produce logits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outputs {
    /// The last token of the evaluation.
    Last,
    /// Every token.
    All,
    /// Token indices `i..` of the evaluation.
    From(usize),
}

/// How a forward's rows enter the stage.
#[derive(Debug, Clone, Copy)]
pub enum Enter<'a> {
    /// Their tokens, embedded here (`[rows]`).
    Tokens(&'a [u32]),
    /// Hidden states computed by an earlier stage (`[rows, hidden_width]`): a split's box
    /// or `-ngl`'s first stage; with the rows of the images among them (only where they
    /// are and whether they see one another is read: they entered in that stage).
    States {
        states: &'a [f32],
        images: &'a [Placed<'a>],
    },
    /// Hidden states (`[rows, hidden_width]`) with the rows' tokens: a
    /// multi-token-prediction stage ([`model::Part::Nextn`]), whose row of position `p`
    /// enters as the target's state of `p - 1` (its final normed state, or its residual
    /// streams before they merge) and the token at `p`.
    Joined {
        tokens: &'a [u32],
        states: &'a [f32],
    },
    /// The target's features with the rows' tokens: a drafter of a target's features
    /// ([`model::Part::Drafter`]) fuses `features` (`[rows, fuse_width]`) into its rows'
    /// hidden states ([`model::Model::fuse`]).
    Fused {
        tokens: &'a [u32],
        features: &'a [f32],
    },
    /// Tokens, some of whose rows enter as given embeddings instead: images' rows.
    Pictured {
        tokens: &'a [u32],
        images: &'a [Placed<'a>],
    },
}

/// Rows of a forward that enter as `embeddings` (`[rows.len(), n_embd]`) instead of their
/// tokens' embeddings ([`Enter::Pictured`]): an image's, or its part past a cached prefix.
#[derive(Debug, Clone)]
pub struct Placed<'a> {
    pub rows: Range<usize>,
    pub embeddings: &'a [f32],
    /// They see one another ([`device::Step::bidirectional`]): they must be the last rows
    /// of their sequence in the forward.
    pub bidirectional: bool,
}

/// Per sequence of a forward over `rows`, where its bidirectional rows start (`images`'
/// rows that see one another); an error where such rows are not the last of their
/// sequence's, or not one sequence's consecutive positions.
pub(super) fn bidirectional_from(
    rows: &[Row],
    n_seqs: usize,
    images: &[Placed],
) -> Result<Vec<usize>> {
    let mut from = Vec::new();
    for p in images.iter().filter(|p| p.bidirectional) {
        let first = rows[p.rows.start];
        let consecutive = rows[p.rows.clone()]
            .iter()
            .enumerate()
            .all(|(i, r)| r.seq == first.seq && r.pos == first.pos + i);
        let last = rows.get(p.rows.end).is_none_or(|r| r.seq != first.seq);
        if !consecutive || !last {
            return Err(Error::Config(format!(
                "rows {:?} of an image are not the last consecutive rows of one sequence",
                p.rows
            )));
        }
        from.resize(n_seqs, device::NOT_BIDIRECTIONAL);
        from[first.seq] = first.pos;
    }
    Ok(from)
}

/// What a forward gives back besides its KV.
pub enum Out<'a> {
    Nothing,
    /// `on_logits(r, logits)` for each row index `r` of `rows` (`logits` `[n_logits]`),
    /// but for the rows of a sequence whose states came out NaN or infinite in any row:
    /// nothing computed after them can be trusted.
    Logits {
        rows: &'a [usize],
        on_logits: &'a mut dyn FnMut(usize, &mut [f32]),
    },
    /// The final hidden states of every row (`[rows, n_embd]`): a first stage's output.
    States(&'a mut [f32]),
    /// `on_row(r, RowOut::Logits(..))` for each row index `r` of `logits`,
    /// `on_row(r, RowOut::State(..))` (the row's hidden state after the output norm,
    /// `[n_embd]`) for each of `states`, and `on_row(r, RowOut::Tap { .. })` for each row
    /// of `taps.rows` and layer of `taps.layers`, but for the rows of a sequence whose
    /// states came out NaN or infinite (as [`Out::Logits`]).
    Rows {
        logits: &'a [usize],
        states: &'a [usize],
        taps: Taps<'a>,
        on_row: &'a mut dyn FnMut(usize, RowOut<'_>),
    },
}

/// Hidden states a forward gives from inside the stage, for drafters that read the
/// target's features (EAGLE-3, DFlash): of rows `rows`, the state after each block of
/// `layers` (ascending, in the stage), as the next block receives it.
#[derive(Debug, Clone, Copy, Default)]
pub struct Taps<'a> {
    pub layers: &'a [usize],
    pub rows: &'a [usize],
}

/// Whether `layers` are ascending blocks of `stage`, as [`Taps::layers`] must be.
pub(crate) fn taps_within(layers: &[usize], stage: &Range<usize>) -> bool {
    layers.windows(2).all(|p| p[0] < p[1]) && layers.iter().all(|l| stage.contains(l))
}

/// What [`Out::Rows`] gives for one row.
pub enum RowOut<'a> {
    /// The row's logits (`[n_logits]`).
    Logits(&'a mut [f32]),
    /// The row's hidden state after the output norm (`[n_embd]`).
    State(&'a [f32]),
    /// The row's hidden state after block `layer` (`[hidden_width]`: every residual
    /// stream).
    Tap { layer: usize, state: &'a [f32] },
}

/// What [`Executor::markov`] gives for one token.
pub struct MarkovRow<'a> {
    /// The bias it adds to the next position's logits (`[n_logits]`).
    pub bias: &'a [f32],
    /// Its row of `markov_w1` (`[rank]`).
    pub w1_row: &'a [f32],
}
