//! Loading weight tensors from a GGUF file with their shapes checked.

use sluice_kernels::QLinear;

use crate::gguf::{GgufFile, ModelError};

/// A `rows x cols` matrix (`y = x · Wᵀ`), its shape checked against `(rows, cols)`.
pub fn matrix(
    file: &GgufFile,
    name: &str,
    rows: usize,
    cols: usize,
) -> Result<QLinear, ModelError> {
    let (dtype, dims, bytes) = file.tensor(name)?;
    if dims != [rows, cols] {
        return Err(ModelError::Shape {
            name: name.into(),
            found: dims,
            expected: vec![rows, cols],
        });
    }
    QLinear::new(dtype, bytes, rows, cols).map_err(|source| ModelError::Tensor {
        name: name.into(),
        source,
    })
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
