//! A checked reader for the GGUF header. Model files come from anywhere, so every count,
//! length, offset and shape the header claims is checked against the bytes that are
//! really there and against fixed limits before anything is allocated: a crafted file
//! gets an error naming what is wrong, never a panic, an abort or an allocation the size
//! of the claim. The result is candle's `Content`, which the rest of the engine reads.
//!
//! Layout (GGUF v2 and v3, little-endian): magic `GGUF`, version, tensor count, metadata
//! count, the metadata (key string, value type, value), the tensor directory (name,
//! dimension count, dimensions innermost first, ggml type, offset), padding to the
//! alignment, then the tensor data. Offsets are relative to the start of the data.

use std::collections::HashMap;
use std::collections::hash_map::Entry;

use candle_core::quantized::GgmlDType;
use candle_core::quantized::gguf_file::{Content, TensorInfo, Value, VersionedMagic};

/// Most tensors a file may list (the largest released models have a few thousand).
pub const MAX_TENSORS: u64 = 1 << 16;
/// Most metadata entries.
pub const MAX_KEYS: u64 = 1 << 16;
/// Longest string (a key, a token, a chat template).
pub const MAX_STRING: u64 = 16 << 20;
/// Most elements in one array (a vocabulary of four million tokens).
pub const MAX_ARRAY: u64 = 1 << 22;
/// Most values in all the metadata together (each costs 32 bytes in memory).
pub const MAX_VALUES: u64 = 1 << 24;
/// Deepest nesting of arrays.
const MAX_DEPTH: usize = 4;
/// Most dimensions of a tensor (ggml's `GGML_MAX_DIMS`).
const MAX_DIMS: u32 = 4;
/// Largest alignment of the tensor data.
const MAX_ALIGNMENT: u64 = 1 << 16;
/// The alignment when the file names none.
const DEFAULT_ALIGNMENT: u64 = 32;

/// Why a header cannot be read: a sentence for the load error.
pub type Reason = String;

/// Reads and checks the header of the GGUF file held in `bytes` (the whole file).
pub fn read(bytes: &[u8]) -> Result<Content, Reason> {
    let mut r = Reader {
        bytes,
        pos: 0,
        values: 0,
    };
    if r.take(4, "the magic")? != b"GGUF" {
        return Err("it does not start with the GGUF magic".into());
    }
    let magic = match r.u32("the version")? {
        2 => VersionedMagic::GgufV2,
        3 => VersionedMagic::GgufV3,
        v => return Err(format!("GGUF version {v} is not supported (2 and 3 are)")),
    };
    let n_tensors = r.count("the tensor count", MAX_TENSORS, 8 + 4 + 8 + 4 + 8)?;
    let n_keys = r.count("the metadata count", MAX_KEYS, 8 + 4 + 1)?;
    let mut metadata = HashMap::with_capacity(n_keys);
    for _ in 0..n_keys {
        let key = r.string("a metadata key")?;
        let ty = r.u32("a value type")?;
        let value = r
            .value(ty, 0)
            .map_err(|e| format!("metadata `{key}`: {e}"))?;
        match metadata.entry(key) {
            Entry::Occupied(e) => return Err(format!("metadata key `{}` twice", e.key())),
            Entry::Vacant(e) => e.insert(value),
        };
    }
    let alignment = alignment(&metadata)?;
    let mut tensor_infos = HashMap::with_capacity(n_tensors);
    for _ in 0..n_tensors {
        let name = r.string("a tensor name")?;
        let info = r.tensor().map_err(|e| format!("tensor `{name}`: {e}"))?;
        if !info.offset.is_multiple_of(alignment) {
            return Err(format!(
                "tensor `{name}`: offset {} is not a multiple of the alignment {alignment}",
                info.offset
            ));
        }
        match tensor_infos.entry(name) {
            Entry::Occupied(e) => return Err(format!("tensor `{}` twice", e.key())),
            Entry::Vacant(e) => e.insert(info),
        };
    }
    let data_offset = (r.pos as u64).next_multiple_of(alignment);
    check_data(&tensor_infos, data_offset, bytes.len() as u64)?;
    Ok(Content {
        magic,
        metadata,
        tensor_infos,
        tensor_data_offset: data_offset,
    })
}

/// `general.alignment`: a power of two, at most [`MAX_ALIGNMENT`].
fn alignment(metadata: &HashMap<String, Value>) -> Result<u64, Reason> {
    let a = match metadata.get("general.alignment") {
        None => return Ok(DEFAULT_ALIGNMENT),
        Some(Value::U8(v)) => *v as u64,
        Some(Value::U16(v)) => *v as u64,
        Some(Value::U32(v)) => *v as u64,
        Some(Value::U64(v)) => *v,
        Some(Value::I32(v)) if *v > 0 => *v as u64,
        Some(other) => return Err(format!("general.alignment is {other:?}")),
    };
    if !a.is_power_of_two() || a > MAX_ALIGNMENT {
        return Err(format!(
            "general.alignment {a} is not a power of two up to {MAX_ALIGNMENT}"
        ));
    }
    Ok(a)
}

/// Every tensor's bytes lie inside the file, after the header, and no two overlap.
fn check_data(
    tensors: &HashMap<String, TensorInfo>,
    data_offset: u64,
    file_len: u64,
) -> Result<(), Reason> {
    let room = file_len.saturating_sub(data_offset);
    let mut spans: Vec<(u64, u64, &str)> = Vec::with_capacity(tensors.len());
    for (name, info) in tensors {
        let size = byte_size(info).ok_or_else(|| format!("tensor `{name}`: size overflows"))?;
        let end = info.offset.checked_add(size).filter(|&e| e <= room);
        let end = end.ok_or_else(|| {
            format!(
                "tensor `{name}` ({size} bytes at data offset {}) lies past the end of the \
                 file ({room} bytes of tensor data)",
                info.offset
            )
        })?;
        spans.push((info.offset, end, name));
    }
    spans.sort_unstable();
    for pair in spans.windows(2) {
        let ((_, end, a), (start, _, b)) = (pair[0], pair[1]);
        if start < end {
            return Err(format!("the data of tensors `{a}` and `{b}` overlap"));
        }
    }
    Ok(())
}

/// Bytes of a tensor's data; `None` when the size overflows.
pub fn byte_size(info: &TensorInfo) -> Option<u64> {
    let elems = info
        .shape
        .dims()
        .iter()
        .try_fold(1u64, |n, &d| n.checked_mul(d as u64))?;
    let blocks = elems / info.ggml_dtype.block_size() as u64;
    blocks.checked_mul(info.ggml_dtype.type_size() as u64)
}

/// ggml's type numbers, for the types candle's quantised tensors carry.
fn dtype(n: u32) -> Option<GgmlDType> {
    Some(match n {
        0 => GgmlDType::F32,
        1 => GgmlDType::F16,
        2 => GgmlDType::Q4_0,
        3 => GgmlDType::Q4_1,
        6 => GgmlDType::Q5_0,
        7 => GgmlDType::Q5_1,
        8 => GgmlDType::Q8_0,
        9 => GgmlDType::Q8_1,
        10 => GgmlDType::Q2K,
        11 => GgmlDType::Q3K,
        12 => GgmlDType::Q4K,
        13 => GgmlDType::Q5K,
        14 => GgmlDType::Q6K,
        15 => GgmlDType::Q8K,
        30 => GgmlDType::BF16,
        _ => return None,
    })
}

/// A cursor over the file's bytes that never reads past them.
struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
    /// Metadata values read so far (against [`MAX_VALUES`]).
    values: u64,
}

impl<'a> Reader<'a> {
    fn left(&self) -> u64 {
        (self.bytes.len() - self.pos) as u64
    }

    fn take(&mut self, n: u64, what: &str) -> Result<&'a [u8], Reason> {
        if n > self.left() {
            return Err(format!(
                "{what} needs {n} bytes at offset {} but the file ends {} bytes later",
                self.pos,
                self.left()
            ));
        }
        let s = &self.bytes[self.pos..self.pos + n as usize];
        self.pos += n as usize;
        Ok(s)
    }

    fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N], Reason> {
        let s = self.take(N as u64, what)?;
        Ok(s.try_into().expect("take returned N bytes"))
    }

    fn u32(&mut self, what: &str) -> Result<u32, Reason> {
        self.array(what).map(u32::from_le_bytes)
    }

    fn u64(&mut self, what: &str) -> Result<u64, Reason> {
        self.array(what).map(u64::from_le_bytes)
    }

    /// A count of items each at least `min_bytes` long: at most `limit`, and no more than
    /// the rest of the file could hold.
    fn count(&mut self, what: &str, limit: u64, min_bytes: u64) -> Result<usize, Reason> {
        let n = self.u64(what)?;
        if n > limit {
            return Err(format!("{what} is {n}, over the limit of {limit}"));
        }
        if n.saturating_mul(min_bytes) > self.left() {
            return Err(format!(
                "{what} is {n} but only {} bytes of the file remain",
                self.left()
            ));
        }
        Ok(n as usize)
    }

    /// A length-prefixed string; invalid UTF-8 is replaced, trailing NULs dropped (as
    /// llama.cpp's writers sometimes leave them).
    fn string(&mut self, what: &str) -> Result<String, Reason> {
        let len = self.u64(what)?;
        if len > MAX_STRING {
            return Err(format!(
                "{what} of {len} bytes, over the limit of {MAX_STRING}"
            ));
        }
        let s = self.take(len, what)?;
        let end = s.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
        Ok(String::from_utf8_lossy(&s[..end]).into_owned())
    }

    fn value(&mut self, ty: u32, depth: usize) -> Result<Value, Reason> {
        self.values += 1;
        if self.values > MAX_VALUES {
            return Err(format!("more than {MAX_VALUES} metadata values"));
        }
        Ok(match ty {
            0 => Value::U8(self.array::<1>("a u8")?[0]),
            1 => Value::I8(self.array::<1>("an i8")?[0] as i8),
            2 => Value::U16(u16::from_le_bytes(self.array("a u16")?)),
            3 => Value::I16(i16::from_le_bytes(self.array("an i16")?)),
            4 => Value::U32(self.u32("a u32")?),
            5 => Value::I32(i32::from_le_bytes(self.array("an i32")?)),
            6 => Value::F32(f32::from_le_bytes(self.array("an f32")?)),
            7 => match self.array::<1>("a bool")?[0] {
                0 => Value::Bool(false),
                1 => Value::Bool(true),
                b => return Err(format!("a bool of value {b}")),
            },
            8 => Value::String(self.string("a string")?),
            9 => {
                if depth >= MAX_DEPTH {
                    return Err(format!("arrays nested deeper than {MAX_DEPTH}"));
                }
                let elem = self.u32("an array's element type")?;
                let min = match elem {
                    0 | 1 | 7 => 1,
                    2 | 3 => 2,
                    4..=6 => 4,
                    8 | 10..=12 => 8,
                    9 => 12,
                    t => return Err(format!("an array of unknown value type {t}")),
                };
                let n = self.count("an array's length", MAX_ARRAY, min)?;
                let mut vs = Vec::with_capacity(n);
                for _ in 0..n {
                    vs.push(self.value(elem, depth + 1)?);
                }
                Value::Array(vs)
            }
            10 => Value::U64(self.u64("a u64")?),
            11 => Value::I64(i64::from_le_bytes(self.array("an i64")?)),
            12 => Value::F64(f64::from_le_bytes(self.array("an f64")?)),
            t => return Err(format!("unknown value type {t}")),
        })
    }

    /// One tensor's directory entry after its name.
    fn tensor(&mut self) -> Result<TensorInfo, Reason> {
        let n_dims = self.u32("the dimension count")?;
        if !(1..=MAX_DIMS).contains(&n_dims) {
            return Err(format!("{n_dims} dimensions (1 to {MAX_DIMS} allowed)"));
        }
        let mut dims = Vec::with_capacity(n_dims as usize);
        for _ in 0..n_dims {
            let d = self.u64("a dimension")?;
            if d == 0 || d > i64::MAX as u64 {
                return Err(format!("a dimension of {d}"));
            }
            dims.push(d);
        }
        let elems = dims.iter().try_fold(1u64, |n, &d| n.checked_mul(d));
        if elems.is_none_or(|n| n > i64::MAX as u64) {
            return Err(format!(
                "its shape {dims:?} has more elements than fit in 63 bits"
            ));
        }
        let ty = self.u32("the tensor type")?;
        let dtype = dtype(ty).ok_or_else(|| {
            format!("ggml type {ty}, which sluice cannot read (a newer quantisation?)")
        })?;
        // The innermost dimension holds whole blocks of the quantisation.
        if !dims[0].is_multiple_of(dtype.block_size() as u64) {
            return Err(format!(
                "its rows of {} values are not whole {dtype:?} blocks of {}",
                dims[0],
                dtype.block_size()
            ));
        }
        let offset = self.u64("the tensor offset")?;
        // candle's shapes list the outermost dimension first.
        let dims: Vec<usize> = dims.iter().rev().map(|&d| d as usize).collect();
        Ok(TensorInfo {
            ggml_dtype: dtype,
            shape: candle_core::Shape::from(dims),
            offset,
        })
    }
}
