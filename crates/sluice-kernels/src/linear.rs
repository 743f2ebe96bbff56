//! Weight matrices kept in their GGUF quantisation.
//!
//! The formats with a fast path (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K) are
//! repacked for the integer kernels of `packed.rs` and multiplied against int8 activations.
//! F32, F16 and BF16 stay as stored and are multiplied row by row (`dense.rs`). The
//! remaining types (Q2_K, Q3_K) are dequantised with candle's block routines
//! (`GgmlType::to_float`) into a small per-thread tile reused across every activation row
//! of the batch.

use candle_core::quantized::GgmlDType;
use candle_core::quantized::k_quants::{
    BlockQ2K, BlockQ3K, BlockQ4_0, BlockQ4_1, BlockQ4K, BlockQ5_0, BlockQ5_1, BlockQ5K, BlockQ6K,
    BlockQ8_0, GgmlType,
};
use std::cell::OnceCell;

use crate::dense::Dense;
use crate::layout::{PackedMatrix, QuantActs};
use crate::simd::dot;

/// Why raw tensor data cannot become a `QLinear`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LinearError {
    /// A GGML type without a kernel.
    #[error("quantisation type {0:?} is not supported")]
    Type(GgmlDType),
    /// The row length is not a whole number of the type's blocks.
    #[error("{cols} columns are not a multiple of the {dtype:?} block of {block}")]
    Blocks {
        /// The type.
        dtype: GgmlDType,
        /// Columns.
        cols: usize,
        /// Weights per block.
        block: usize,
    },
    /// Fewer bytes than the shape needs.
    #[error("{got} bytes of {dtype:?} data for {rows} x {cols}, which needs {want}")]
    Size {
        /// The type.
        dtype: GgmlDType,
        /// Rows.
        rows: usize,
        /// Columns.
        cols: usize,
        /// Bytes needed.
        want: usize,
        /// Bytes given.
        got: usize,
    },
}

/// Activation rows from which a matrix's batch copy (`PackedMatrix::for_batches`), when it
/// has one, is multiplied instead of its compact packing: below this, reading the weights
/// from memory dominates; from here on, unpacking them.
pub const BATCH_ROWS: usize = 8;

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

/// Where the weights live: a fast-path packing (with its batch copy, if it has one) or a
/// generic block source.
// One per weight matrix, built once and never moved on a hot path: boxing the packed
// form would only add a pointer chase to every matmul.
#[allow(clippy::large_enum_variant)]
enum Source {
    Packed(PackedMatrix, Option<PackedMatrix>),
    Dense(Dense),
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

impl QLinear {
    /// A `rows x cols` matrix from raw GGUF data of `dtype` (row-major blocks), repacked
    /// for the integer kernels where the type has them.
    pub fn new(
        dtype: GgmlDType,
        bytes: &[u8],
        rows: usize,
        cols: usize,
    ) -> Result<Self, LinearError> {
        let block = dtype.block_size();
        if !cols.is_multiple_of(block) {
            return Err(LinearError::Blocks { dtype, cols, block });
        }
        let want = rows * cols / block * dtype.type_size();
        if bytes.len() < want {
            return Err(LinearError::Size {
                dtype,
                rows,
                cols,
                want,
                got: bytes.len(),
            });
        }
        let bytes = &bytes[..want];
        if let Some(p) = PackedMatrix::new(dtype, bytes, rows, cols) {
            let batch = PackedMatrix::for_batches(dtype, bytes, rows, cols);
            return Ok(Self {
                rows,
                cols,
                dtype,
                src: Source::Packed(p, batch),
            });
        }
        let dense = match dtype {
            GgmlDType::F32 => Some(Dense::f32(bytes, cols)),
            GgmlDType::F16 => Some(Dense::f16(bytes, cols)),
            GgmlDType::BF16 => Some(Dense::bf16(bytes, cols)),
            _ => None,
        };
        if let Some(d) = dense {
            return Ok(Self {
                rows,
                cols,
                dtype,
                src: Source::Dense(d),
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
            other => return Err(LinearError::Type(other)),
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
            Source::Packed(p, _) => p.row(r, out),
            Source::Dense(d) => d.row(r, out),
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
            Source::Packed(..) => return Self::matmul_many(input, &mut [(self, y)]),
            Source::Dense(d) => {
                crate::threads::for_each(rows.div_ceil(TILE_ROWS), |t| {
                    let (r0, r1) = (t * TILE_ROWS, ((t + 1) * TILE_ROWS).min(rows));
                    for (i, xi) in x.chunks_exact(cols).enumerate() {
                        for r in r0..r1 {
                            let v = d.dot(r, xi);
                            // SAFETY: tasks own disjoint row ranges, so each output
                            // element is written by exactly one task, in bounds.
                            unsafe { *out.get().add(i * rows + r) = v };
                        }
                    }
                });
                return;
            }
            Source::Rows(s) => s,
        };
        crate::threads::for_each(rows.div_ceil(TILE_ROWS), |t| {
            let mut tile = vec![0f32; TILE_ROWS * cols];
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
        });
    }
}

impl QLinear {
    /// `y_k = x · W_kᵀ` for several matrices taking the same input, in one parallel pass:
    /// the compute threads are woken and joined once instead of once per matrix (a
    /// decode step's q, k, v and gate, up). Each output is computed exactly as
    /// `matmul_input` computes it.
    pub fn matmul_many(input: &Input, outs: &mut [(&QLinear, &mut [f32])]) {
        let packed: Option<Vec<&PackedMatrix>> = outs
            .iter()
            .map(|(w, _)| match &w.src {
                Source::Packed(_, Some(b)) if input.n >= BATCH_ROWS => Some(b),
                Source::Packed(p, _) => Some(p),
                _ => None,
            })
            .collect();
        let Some(packed) = packed.filter(|_| input.n > 0) else {
            for (w, y) in outs.iter_mut() {
                w.matmul_input(input, y);
            }
            return;
        };
        let n = input.n;
        for (w, y) in outs.iter() {
            assert_eq!(input.x.len(), n * w.cols, "activation shape");
            assert_eq!(y.len(), n * w.rows, "output shape");
        }
        let acts = input.acts(outs[0].0.cols);
        let groups: Vec<usize> = packed.iter().map(|p| p.groups()).collect();
        let work: usize = packed.iter().map(|p| p.rows() * p.cols()).sum::<usize>() * n;
        let plan = crate::tasks::plan_kept(&groups, work, n, crate::threads::threads());
        let plan = &*plan;
        let ys: Vec<(SendPtr, usize)> = outs
            .iter_mut()
            .map(|(w, y)| (SendPtr(y.as_mut_ptr()), w.rows))
            .collect();
        crate::threads::for_each(plan.len(), |t| {
            for (k, part) in plan.task(t) {
                let (y, rows) = ys[*k];
                // SAFETY: tasks own disjoint (group, activation row) ranges of one matrix
                // each (`tasks.rs`), so every output element is written by exactly one
                // task, in bounds of its matrix's output.
                unsafe { packed[*k].matmul_groups(acts, part.clone(), y.get(), rows) };
            }
        });
    }
}

impl QLinear {
    /// Names the matrices of the next matmul (of `n` activation rows) so that the compute
    /// threads waiting for it fetch their shares into cache meanwhile (`ahead.rs`): only
    /// for few rows (decode), which read each weight once.
    pub fn fetch_ahead(n: usize, mats: &[&QLinear]) {
        if n == 0 || n >= BATCH_ROWS || crate::threads::threads() == 1 || !crate::ahead::on() {
            return;
        }
        let mut arrays = Vec::with_capacity(4 * mats.len());
        let mut first = 0;
        for m in mats {
            if let Source::Packed(p, _) = &m.src {
                let groups = p.groups();
                for bytes in p.arrays() {
                    arrays.push(crate::ahead::Array {
                        ptr: bytes.as_ptr(),
                        len: bytes.len(),
                        first,
                        groups,
                    });
                }
                first += groups;
            }
        }
        crate::ahead::hint(&arrays, first);
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
        let a = self.acts.get_or_init(|| {
            // A spare's buffers, refilled: fresh ones cost the caller a zeroing and page
            // faults while the other threads wait (0.6% of a SmolLM2 prefill).
            let mut a = SPARE_ACTS.with_borrow_mut(|s| s.pop()).unwrap_or_default();
            a.fill(self.x, self.n, cols);
            a
        });
        assert_eq!(a.cols, cols, "one input, one width");
        a
    }
}

thread_local! {
    /// Quantised activations of dropped `Input`s, reused by the next ones on this thread.
    static SPARE_ACTS: std::cell::RefCell<Vec<QuantActs>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Spares kept per thread (a forward pass has at most two `Input`s alive at once).
const SPARES: usize = 2;

impl Drop for Input<'_> {
    fn drop(&mut self) {
        if let Some(a) = self.acts.take() {
            SPARE_ACTS.with_borrow_mut(|s| {
                if s.len() < SPARES {
                    s.push(a);
                }
            });
        }
    }
}

/// A raw pointer that may cross into parallel tasks writing disjoint elements.
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
    /// A vector (a norm's weights) from raw GGUF data, as f32.
    pub fn vector(dtype: GgmlDType, bytes: &[u8], len: usize) -> Result<Vec<f32>, LinearError> {
        let lin = QLinear::new(dtype, bytes, 1, len)?;
        let mut out = vec![0f32; len];
        lin.row(0, &mut out);
        Ok(out)
    }
}
