//! A stored weight matrix ([`QMatrix`]): the rows as GGUF keeps them, with the packed
//! form the model made of them, if any. The matmuls of [`crate::matmul`] read it.

use gguf::GgmlType;

use crate::formats::dequantize_row;
use crate::qmatmul::packed::PackedMatrix;
use crate::{Error, Result};

/// A weight matrix as GGUF stores it: `n_rows` rows of `n_cols` elements of `ty`,
/// row-major (ggml dims `[n_cols, n_rows]`).
#[derive(Clone, Copy, Debug)]
pub struct QMatrix<'a> {
    pub ty: GgmlType,
    pub data: &'a [u8],
    pub n_rows: usize,
    pub n_cols: usize,
    /// The same matrix repacked for the tiled kernels, when the model made one.
    pub packed: Option<&'a PackedMatrix>,
}

impl<'a> QMatrix<'a> {
    /// Checks that `data` holds exactly `n_rows` rows of `n_cols` elements of `ty`.
    pub fn new(ty: GgmlType, data: &'a [u8], n_rows: usize, n_cols: usize) -> Result<Self> {
        if !crate::formats::is_supported(ty) {
            return Err(Error::UnsupportedType(ty));
        }
        let row = ty.row_bytes(n_cols as u64).ok_or(Error::LengthMismatch {
            what: "matrix row (not a whole number of blocks)",
            expected: ty.block_size() as usize,
            got: n_cols,
        })? as usize;
        if data.len() != row * n_rows {
            return Err(Error::LengthMismatch {
                what: "matrix bytes",
                expected: row * n_rows,
                got: data.len(),
            });
        }
        Ok(QMatrix {
            ty,
            data,
            n_rows,
            n_cols,
            packed: None,
        })
    }

    /// This matrix with its packed form (which must be of the same matrix).
    pub fn with_packed(self, packed: Option<&'a PackedMatrix>) -> Self {
        if let Some(p) = packed {
            assert_eq!(
                (p.ty, p.n_rows, p.n_cols),
                (self.ty, self.n_rows, self.n_cols)
            );
        }
        QMatrix { packed, ..self }
    }

    pub fn row_bytes(&self) -> usize {
        self.data.len() / self.n_rows.max(1)
    }

    /// Dequantizes row `i` into `out` (`[n_cols]`).
    pub fn dequantize_row(&self, i: usize, out: &mut [f32]) {
        let rb = self.row_bytes();
        dequantize_row(self.ty, &self.data[i * rb..(i + 1) * rb], out)
            .expect("validated in QMatrix::new");
    }

    /// This matrix repacked for the tiled kernels, or `None` when its type has no packed
    /// layout.
    pub fn pack(&self) -> Option<PackedMatrix> {
        PackedMatrix::pack(self.ty, self.data, self.n_rows, self.n_cols)
    }
}
