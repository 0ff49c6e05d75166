//! An output head over part of the vocabulary, for drafting.

use device::{Bytes, MatrixSource, Role};
use gguf::GgmlType;

use crate::{Error, Model, Result};

/// An output head whose logit `i` is the logit of token `ids[i]`: rows `ids` of a model's
/// output matrix, copied on their own, or a drafter's own head over a reduced vocabulary
/// (its rows in place). Tokens outside cannot come out. A draft model restricted to its
/// most frequent tokens computes a cheaper head, and verification keeps the output exact
/// whatever it proposes.
pub struct SubsetHead {
    pub ids: Vec<u32>,
    ty: GgmlType,
    n_cols: usize,
    /// `[ids.len(), row_bytes]`.
    data: Bytes,
}

impl SubsetHead {
    /// The head as a device uploads it.
    pub fn source(&self) -> MatrixSource {
        MatrixSource {
            name: "output.weight (restricted)".into(),
            ty: self.ty,
            bytes: self.data.clone(),
            n_rows: self.ids.len(),
            n_cols: self.n_cols,
            role: Role::Multiply,
        }
    }

    /// Its shape and type: `(ty, n_rows, n_cols)`.
    pub fn shape(&self) -> (GgmlType, usize, usize) {
        (self.ty, self.ids.len(), self.n_cols)
    }
}

impl Model {
    /// Restricts the output head to the tokens `ids` (each below the vocabulary size).
    pub fn restrict_head(&mut self, ids: &[u32]) -> Result<()> {
        let full = self
            .output_matrix()
            .ok_or(Error::NotInStage("the output head"))?;
        let bytes = &self.file_of(full).bytes()[full.range.clone()];
        let rb = bytes.len() / full.n_rows;
        let mut data = Vec::with_capacity(ids.len() * rb);
        for &id in ids {
            let r = id as usize;
            if r >= full.n_rows {
                return Err(Error::TokenOutOfRange {
                    id,
                    n_vocab: full.n_rows,
                });
            }
            data.extend_from_slice(&bytes[r * rb..(r + 1) * rb]);
        }
        self.head = Some(SubsetHead {
            ids: ids.to_vec(),
            ty: full.ty,
            n_cols: full.n_cols,
            data: Bytes::Owned(data.into()),
        });
        Ok(())
    }

    /// The output matrix's rows are the tokens `ids`, in order (a drafter's reduced
    /// vocabulary, `d2t`): logit `i` is token `ids[i]`.
    pub fn map_head(&mut self, ids: Vec<u32>) -> Result<()> {
        let full = self
            .output_matrix()
            .ok_or(Error::NotInStage("the output head"))?;
        if full.n_rows != ids.len() {
            return Err(Error::BadTensor {
                tensor: full.name.clone(),
                problem: format!("{} rows for {} draft tokens (d2t)", full.n_rows, ids.len()),
            });
        }
        self.head = Some(SubsetHead {
            ids,
            ty: full.ty,
            n_cols: full.n_cols,
            data: Bytes::Mapped {
                file: self.file_of(full).clone(),
                range: full.range.clone(),
            },
        });
        Ok(())
    }

    /// Logits per row: the vocabulary size, or the restricted head's size.
    pub fn n_logits(&self) -> usize {
        self.head
            .as_ref()
            .map_or(self.hparams.n_vocab, |h| h.ids.len())
    }

    /// The token of logit `i`.
    pub fn logit_token(&self, i: u32) -> u32 {
        self.head.as_ref().map_or(i, |h| h.ids[i as usize])
    }
}
