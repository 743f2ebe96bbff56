//! Weight matrices kept in their GGUF quantisation.
//!
//! The formats with a fast path (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K) are
//! repacked for the integer kernels of `packed.rs` and multiplied against int8 activations.
//! Every other type (F32, F16, BF16, Q2_K, Q3_K) is dequantised with candle's block
//! routines (`GgmlType::to_float`) into a small per-thread tile and reused across every
//! activation row of the batch, so a batch of n rows reads each weight once, not n times.

use candle_core::quantized::GgmlDType;
use candle_core::quantized::k_quants::{
    BlockQ2K, BlockQ3K, BlockQ4_0, BlockQ4_1, BlockQ4K, BlockQ5_0, BlockQ5_1, BlockQ5K, BlockQ6K,
    BlockQ8_0, GgmlType,
};
use half::{bf16, f16};
use std::cell::OnceCell;

use rayon::prelude::*;

use super::acts::QuantActs;
use super::gguf::{GgufFile, ModelError};
use super::kernels::dot;
use super::packed::PackedMatrix;

/// Rows of the weight matrix dequantised together by one task.
const TILE_ROWS: usize = 16;

/// A source of weight rows: some quantised block format or plain f32.
trait RowSource: Send + Sync {
    /// Writes row `r` as f32 into `out` (length = number of columns).
    fn row(&self, r: usize, out: &mut [f32]);
}

struct Blocks<B> {
    blocks: Vec<B>,
    per_row: usize,
}

impl<B: GgmlType> RowSource for Blocks<B> {
    fn row(&self, r: usize, out: &mut [f32]) {
        B::to_float(&self.blocks[r * self.per_row..(r + 1) * self.per_row], out);
    }
}

struct Dense(Vec<f32>, usize);

impl RowSource for Dense {
    fn row(&self, r: usize, out: &mut [f32]) {
        out.copy_from_slice(&self.0[r * self.1..(r + 1) * self.1]);
    }
}

/// A `rows x cols` weight matrix (`y = x · Wᵀ`), stored as in the file.
pub struct QLinear {
    /// Output features.
    pub rows: usize,
    /// Input features.
    pub cols: usize,
    /// Quantisation type as found in the file.
    pub dtype: GgmlDType,
    src: Source,
}

/// Where the weights live: a fast-path packing or a generic block source.
enum Source {
    Packed(PackedMatrix),
    Rows(Box<dyn RowSource>),
}

/// Copies raw little-endian block bytes into a properly aligned `Vec<B>`.
fn blocks_from_bytes<B: GgmlType>(bytes: &[u8]) -> Vec<B> {
    let size = std::mem::size_of::<B>();
    let n = bytes.len() / size;
    let mut v: Vec<B> = Vec::with_capacity(n);
    // SAFETY: candle's block types are `repr(C)` structs of f16 and integer arrays, for
    // which every bit pattern is valid, and `bytes` holds exactly `n * size` bytes of them.
    unsafe {
        std::ptr::copy_nonoverlapping(bytes.as_ptr(), v.as_mut_ptr() as *mut u8, n * size);
        v.set_len(n);
    }
    v
}

fn f32s(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect()
}

impl QLinear {
    /// Loads a 2-D tensor; `expected` is (rows, cols) when the caller knows it.
    pub fn load(
        file: &GgufFile,
        name: &str,
        expected: Option<(usize, usize)>,
    ) -> Result<Self, ModelError> {
        let (dtype, dims, _) = file.tensor(name)?;
        let (rows, cols) = match dims.as_slice() {
            [r, c] => (*r, *c),
            _ => {
                return Err(ModelError::Shape {
                    name: name.into(),
                    found: dims,
                    expected: expected.map(|(r, c)| vec![r, c]).unwrap_or_default(),
                });
            }
        };
        if let Some((er, ec)) = expected
            && (er, ec) != (rows, cols)
        {
            return Err(ModelError::Shape {
                name: name.into(),
                found: dims,
                expected: vec![er, ec],
            });
        }
        Self::load_rows(file, name, dtype, rows, cols)
    }

    fn load_rows(
        file: &GgufFile,
        name: &str,
        dtype: GgmlDType,
        rows: usize,
        cols: usize,
    ) -> Result<Self, ModelError> {
        let (_, _, bytes) = file.tensor(name)?;
        if !cols.is_multiple_of(dtype.block_size()) {
            return Err(ModelError::Shape {
                name: name.into(),
                found: vec![rows, cols],
                expected: vec![rows, cols.next_multiple_of(dtype.block_size())],
            });
        }
        if let Some(p) = PackedMatrix::new(dtype, bytes, rows, cols) {
            return Ok(Self {
                rows,
                cols,
                dtype,
                src: Source::Packed(p),
            });
        }
        let per_row = cols / dtype.block_size();
        fn b<B: GgmlType + 'static>(bytes: &[u8], per_row: usize) -> Box<dyn RowSource> {
            Box::new(Blocks::<B> {
                blocks: blocks_from_bytes(bytes),
                per_row,
            })
        }
        let src: Box<dyn RowSource> = match dtype {
            GgmlDType::F32 => Box::new(Dense(f32s(bytes), cols)),
            GgmlDType::F16 => Box::new(Dense(
                bytes
                    .chunks_exact(2)
                    .map(|x| f16::from_le_bytes([x[0], x[1]]).to_f32())
                    .collect(),
                cols,
            )),
            GgmlDType::BF16 => Box::new(Dense(
                bytes
                    .chunks_exact(2)
                    .map(|x| bf16::from_le_bytes([x[0], x[1]]).to_f32())
                    .collect(),
                cols,
            )),
            GgmlDType::Q4_0 => b::<BlockQ4_0>(bytes, per_row),
            GgmlDType::Q4_1 => b::<BlockQ4_1>(bytes, per_row),
            GgmlDType::Q5_0 => b::<BlockQ5_0>(bytes, per_row),
            GgmlDType::Q5_1 => b::<BlockQ5_1>(bytes, per_row),
            GgmlDType::Q8_0 => b::<BlockQ8_0>(bytes, per_row),
            GgmlDType::Q2K => b::<BlockQ2K>(bytes, per_row),
            GgmlDType::Q3K => b::<BlockQ3K>(bytes, per_row),
            GgmlDType::Q4K => b::<BlockQ4K>(bytes, per_row),
            GgmlDType::Q5K => b::<BlockQ5K>(bytes, per_row),
            GgmlDType::Q6K => b::<BlockQ6K>(bytes, per_row),
            other => {
                return Err(ModelError::QuantType {
                    name: name.into(),
                    dtype: other,
                });
            }
        };
        Ok(Self {
            rows,
            cols,
            dtype,
            src: Source::Rows(src),
        })
    }

    /// Row `r` as f32 (used for embedding lookups).
    pub fn row(&self, r: usize, out: &mut [f32]) {
        match &self.src {
            Source::Packed(p) => p.row(r, out),
            Source::Rows(s) => s.row(r, out),
        }
    }

    /// `y[n x rows] = x[n x cols] · Wᵀ`. Every output element is computed the same way
    /// whatever `n` is, so a sequence gets identical numbers alone or inside a batch.
    pub fn matmul(&self, x: &[f32], n: usize, y: &mut [f32]) {
        self.matmul_input(&Input::new(x, n), y)
    }

    /// As `matmul`, sharing the int8 quantisation of `x` with the other matrices that
    /// take the same input.
    pub fn matmul_input(&self, input: &Input, y: &mut [f32]) {
        let (rows, cols, n, x) = (self.rows, self.cols, input.n, input.x);
        assert_eq!(x.len(), n * cols, "activation shape");
        assert_eq!(y.len(), n * rows, "output shape");
        if n == 0 {
            return;
        }
        let out = SendPtr(y.as_mut_ptr());
        let src = match &self.src {
            Source::Packed(p) => {
                let acts = input.acts(cols);
                let groups = p.groups();
                let tasks = (rayon::current_num_threads() * 4).clamp(1, groups);
                (0..tasks).into_par_iter().for_each(|t| {
                    let (g0, g1) = (t * groups / tasks, (t + 1) * groups / tasks);
                    // SAFETY: tasks own disjoint group ranges, so each output element
                    // i*rows + r is written by exactly one task, in bounds.
                    unsafe { p.matmul_groups(acts, g0, g1, out.get(), rows) };
                });
                return;
            }
            Source::Rows(s) => s,
        };
        (0..rows.div_ceil(TILE_ROWS)).into_par_iter().for_each_init(
            || vec![0f32; TILE_ROWS * cols],
            |tile, t| {
                let r0 = t * TILE_ROWS;
                let r1 = (r0 + TILE_ROWS).min(rows);
                for r in r0..r1 {
                    src.row(r, &mut tile[(r - r0) * cols..(r - r0 + 1) * cols]);
                }
                for (i, xi) in x.chunks_exact(cols).enumerate() {
                    for r in r0..r1 {
                        let d = dot(xi, &tile[(r - r0) * cols..(r - r0 + 1) * cols]);
                        // SAFETY: as above.
                        unsafe { *out.get().add(i * rows + r) = d };
                    }
                }
            },
        );
    }
}

/// Activations for one or more matmuls: the f32 rows and, made on first use, their int8
/// quantisation.
pub struct Input<'a> {
    x: &'a [f32],
    n: usize,
    acts: OnceCell<QuantActs>,
}

impl<'a> Input<'a> {
    /// `n` rows of `x`.
    pub fn new(x: &'a [f32], n: usize) -> Self {
        Self {
            x,
            n,
            acts: OnceCell::new(),
        }
    }

    fn acts(&self, cols: usize) -> &QuantActs {
        let a = self
            .acts
            .get_or_init(|| QuantActs::new(self.x, self.n, cols));
        assert_eq!(a.cols, cols, "one input, one width");
        a
    }
}

/// A raw pointer that may cross into rayon tasks writing disjoint elements.
#[derive(Clone, Copy)]
struct SendPtr(*mut f32);
// SAFETY: only used for writes to disjoint indices, see `QLinear::matmul`.
unsafe impl Send for SendPtr {}
// SAFETY: as above.
unsafe impl Sync for SendPtr {}

impl SendPtr {
    fn get(self) -> *mut f32 {
        self.0
    }
}

impl QLinear {
    /// Loads a 1-D tensor (a norm's weights) as f32.
    pub fn load_vector(file: &GgufFile, name: &str) -> Result<Vec<f32>, ModelError> {
        let (dtype, dims, _) = file.tensor(name)?;
        if dims.len() != 1 {
            return Err(ModelError::Shape {
                name: name.into(),
                found: dims,
                expected: vec![],
            });
        }
        let lin = QLinear::load_rows(file, name, dtype, 1, dims[0])?;
        let mut out = vec![0f32; dims[0]];
        lin.row(0, &mut out);
        Ok(out)
    }
}
