//! Loading weight tensors from a GGUF file with their shapes checked.

use sluice_kernels::QLinear;

use crate::error::ModelError;
use crate::gguf::GgufFile;

/// A `rows x cols` matrix (`y = x · Wᵀ`), its shape checked against `(rows, cols)`.
pub fn matrix(
    file: &GgufFile,
    name: &str,
    rows: usize,
    cols: usize,
) -> Result<QLinear, ModelError> {
    matrix_rows(file, name, 0..rows, rows, cols)
}

/// Rows `range` of a `total x cols` matrix (one part of a fused tensor such as Phi-3's
/// `attn_qkv`).
pub fn matrix_rows(
    file: &GgufFile,
    name: &str,
    range: std::ops::Range<usize>,
    total: usize,
    cols: usize,
) -> Result<QLinear, ModelError> {
    let (dtype, dims, bytes) = file.tensor(name)?;
    if dims != [total, cols] {
        return Err(ModelError::Shape {
            name: name.into(),
            found: dims,
            expected: vec![total, cols],
        });
    }
    let tensor_err = |source| ModelError::Tensor {
        name: name.into(),
        source,
    };
    let block = dtype.block_size();
    if !cols.is_multiple_of(block) {
        return Err(tensor_err(sluice_kernels::LinearError::Blocks {
            dtype,
            cols,
            block,
        }));
    }
    let row_bytes = cols / block * dtype.type_size();
    let part = bytes
        .get(range.start * row_bytes..range.end * row_bytes)
        .ok_or_else(|| {
            tensor_err(sluice_kernels::LinearError::Size {
                dtype,
                rows: total,
                cols,
                want: total * row_bytes,
                got: bytes.len(),
            })
        })?;
    QLinear::new(dtype, part, range.len(), cols).map_err(tensor_err)
}

/// A 2-D matrix if the file has it (a tied output head, an optional projection).
pub fn optional_matrix(
    file: &GgufFile,
    name: &str,
    rows: usize,
    cols: usize,
) -> Result<Option<QLinear>, ModelError> {
    match file.has_tensor(name) {
        true => matrix(file, name, rows, cols).map(Some),
        false => Ok(None),
    }
}

/// A vector of `len` values (norm weights, biases) as f32.
pub fn vector(file: &GgufFile, name: &str, len: usize) -> Result<Vec<f32>, ModelError> {
    let (dtype, dims, bytes) = file.tensor(name)?;
    if dims != [len] {
        return Err(ModelError::Shape {
            name: name.into(),
            found: dims,
            expected: vec![len],
        });
    }
    QLinear::vector(dtype, bytes, len).map_err(|source| ModelError::Tensor {
        name: name.into(),
        source,
    })
}
