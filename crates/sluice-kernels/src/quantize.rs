//! Quantising f32 weights into GGUF block formats (Hugging Face weights are quantised at
//! load time so that the integer kernels serve them), with candle's block routines.

use candle_core::quantized::GgmlDType;
use candle_core::quantized::k_quants::{BlockQ4_0, BlockQ4K, BlockQ8_0, GgmlType};

use crate::linear::LinearError;

fn blocks<B: GgmlType>(x: &[f32]) -> Vec<u8> {
    let mut out = vec![B::zeros(); x.len() / B::BLCK_SIZE];
    B::from_float(x, &mut out);
    let size = std::mem::size_of::<B>();
    let mut bytes = vec![0u8; out.len() * size];
    // SAFETY: candle's block types are `repr(C)` structs of f16 and integer arrays with no
    // padding; `bytes` holds exactly their size.
    unsafe {
        std::ptr::copy_nonoverlapping(out.as_ptr() as *const u8, bytes.as_mut_ptr(), bytes.len())
    };
    bytes
}

/// `x` (rows of `cols`) as GGUF bytes of `dtype` (Q8_0, Q4_0, Q4_K, F16, BF16 or F32).
pub fn quantize(dtype: GgmlDType, x: &[f32], cols: usize) -> Result<Vec<u8>, LinearError> {
    let block = dtype.block_size();
    if cols == 0 || !cols.is_multiple_of(block) || !x.len().is_multiple_of(cols) {
        return Err(LinearError::Blocks { dtype, cols, block });
    }
    Ok(match dtype {
        GgmlDType::Q8_0 => blocks::<BlockQ8_0>(x),
        GgmlDType::Q4_0 => blocks::<BlockQ4_0>(x),
        GgmlDType::Q4K => blocks::<BlockQ4K>(x),
        GgmlDType::F32 => x.iter().flat_map(|v| v.to_le_bytes()).collect(),
        GgmlDType::F16 => x
            .iter()
            .flat_map(|v| half::f16::from_f32(*v).to_le_bytes())
            .collect(),
        GgmlDType::BF16 => x
            .iter()
            .flat_map(|v| half::bf16::from_f32(*v).to_le_bytes())
            .collect(),
        other => return Err(LinearError::Type(other)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::QLinear;
    use crate::simd::noise;

    #[test]
    fn quantised_rows_read_back_within_the_format_error() {
        let (rows, cols) = (4, 512);
        let x: Vec<f32> = noise(rows * cols, 3);
        for (dtype, tol) in [
            (GgmlDType::Q8_0, 0.01),
            (GgmlDType::Q4_0, 0.1),
            (GgmlDType::Q4K, 0.1),
            (GgmlDType::F32, 0.0),
        ] {
            let bytes = quantize(dtype, &x, cols).unwrap();
            let lin = QLinear::new(dtype, &bytes, rows, cols).unwrap();
            let mut row = vec![0f32; cols];
            for r in 0..rows {
                lin.row(r, &mut row);
                for (a, b) in row.iter().zip(&x[r * cols..]) {
                    assert!((a - b).abs() <= tol, "{dtype:?}: {a} vs {b}");
                }
            }
        }
        assert!(quantize(GgmlDType::Q4K, &x[..100], 100).is_err());
    }
}
