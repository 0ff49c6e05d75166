//! An output head over part of the vocabulary, for drafting.

use gguf::GgmlType;
use kernels::{PackedMatrix, QMatrix};

use crate::{Error, Model, Result};

/// Rows `ids` of a model's output matrix, copied (and packed) on their own. Logit `i` of a
/// head restricted this way is the logit of token `ids[i]`; tokens outside cannot come out.
/// A draft model restricted to its most frequent tokens computes a cheaper head, and
/// verification keeps the output exact whatever it proposes.
pub struct SubsetHead {
    pub ids: Vec<u32>,
    ty: GgmlType,
    n_cols: usize,
    /// `[ids.len(), row_bytes]`.
    data: Vec<u8>,
    packed: Option<PackedMatrix>,
}

impl SubsetHead {
    pub fn view(&self) -> QMatrix<'_> {
        QMatrix::new(self.ty, &self.data, self.ids.len(), self.n_cols)
            .expect("rows copied whole")
            .with_packed(self.packed.as_ref())
    }

    /// Bytes held: the copied rows and their packed form.
    pub fn bytes(&self) -> usize {
        self.data.len() + self.packed.as_ref().map_or(0, PackedMatrix::bytes)
    }
}

impl Model {
    /// Restricts the output head to the tokens `ids` (each below the vocabulary size).
    pub fn restrict_head(&mut self, ids: &[u32]) -> Result<()> {
        let full = self.output_head().view(&self.file);
        let rb = full.row_bytes();
        let mut data = Vec::with_capacity(ids.len() * rb);
        for &id in ids {
            let r = id as usize;
            if r >= full.n_rows {
                return Err(Error::TokenOutOfRange {
                    id,
                    n_vocab: full.n_rows,
                });
            }
            data.extend_from_slice(&full.data[r * rb..(r + 1) * rb]);
        }
        let (ty, n_cols) = (full.ty, full.n_cols);
        let view = QMatrix::new(ty, &data, ids.len(), n_cols).expect("rows copied whole");
        let packed = kernels::PackedIsa::detect().and_then(|_| PackedMatrix::pack(&view));
        self.head = Some(SubsetHead {
            ids: ids.to_vec(),
            ty,
            n_cols,
            data,
            packed,
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
