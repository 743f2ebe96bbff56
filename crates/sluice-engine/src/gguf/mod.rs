//! Reading a GGUF file: memory-mapped, its header read by our own checked reader
//! (`header.rs`) into candle's `Content`.

mod header;

use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};

use candle_core::quantized::GgmlDType;
use candle_core::quantized::gguf_file::{Content, TensorInfo, Value, VersionedMagic};
use memmap2::Mmap;

use crate::error::ModelError;

/// An open GGUF file: its parsed header and the memory map holding the tensor data. A
/// Hugging Face folder is converted into the same form in memory (`hf/`).
pub struct GgufFile {
    /// Path the file (or folder) was opened from.
    pub path: PathBuf,
    /// Header: metadata and tensor directory.
    pub content: Content,
    data: Data,
}

/// Where the tensor bytes are.
enum Data {
    /// The mapped file (offsets from `tensor_data_offset`).
    Mapped(Mmap),
    /// Converted in memory.
    Owned(Vec<u8>),
}

impl Data {
    fn bytes(&self) -> &[u8] {
        match self {
            Data::Mapped(m) => &m[..],
            Data::Owned(v) => v,
        }
    }
}

impl GgufFile {
    /// Memory-maps `path` and parses its header.
    pub fn open(path: &Path) -> Result<Self, ModelError> {
        let file = File::open(path).map_err(|reason| ModelError::Open {
            path: path.to_path_buf(),
            reason,
        })?;
        // SAFETY: the one `unsafe` outside sluice-kernels. The map is read-only; a model file
        // being rewritten underneath a running server is outside what we can defend
        // against, as for every mmap-based loader. (The crate denies `unsafe_code`.)
        #[allow(unsafe_code)]
        let mmap = unsafe { Mmap::map(&file) }.map_err(|reason| ModelError::Open {
            path: path.to_path_buf(),
            reason,
        })?;
        let content = header::read(&mmap).map_err(|reason| ModelError::NotGguf {
            path: path.to_path_buf(),
            reason,
        })?;
        Ok(Self {
            path: path.to_path_buf(),
            content,
            data: Data::Mapped(mmap),
        })
    }

    /// A GGUF file already in memory (the fuzz target reads one this way), checked as
    /// [`GgufFile::open`] checks a file; `path` only names it in errors.
    pub fn from_bytes(path: &Path, bytes: Vec<u8>) -> Result<Self, ModelError> {
        let content = header::read(&bytes).map_err(|reason| ModelError::NotGguf {
            path: path.to_path_buf(),
            reason,
        })?;
        Ok(Self {
            path: path.to_path_buf(),
            content,
            data: Data::Owned(bytes),
        })
    }

    /// A model built in memory: metadata as GGUF names it and tensors as
    /// `(name, type, shape outermost first, raw bytes)`.
    pub fn from_parts(
        path: &Path,
        metadata: HashMap<String, Value>,
        tensors: Vec<(String, GgmlDType, Vec<usize>, Vec<u8>)>,
    ) -> Self {
        let mut data = Vec::new();
        let mut tensor_infos = HashMap::new();
        for (name, dtype, dims, bytes) in tensors {
            let info = TensorInfo {
                ggml_dtype: dtype,
                shape: candle_core::Shape::from(dims),
                offset: data.len() as u64,
            };
            data.extend_from_slice(&bytes);
            tensor_infos.insert(name, info);
        }
        Self {
            path: path.to_path_buf(),
            content: Content {
                magic: VersionedMagic::GgufV3,
                metadata,
                tensor_infos,
                tensor_data_offset: 0,
            },
            data: Data::Owned(data),
        }
    }

    /// All metadata entries.
    pub fn metadata(&self) -> &HashMap<String, Value> {
        &self.content.metadata
    }

    /// A metadata value, or an error naming the key.
    pub fn get(&self, key: &str) -> Result<&Value, ModelError> {
        self.content
            .metadata
            .get(key)
            .ok_or_else(|| ModelError::Metadata(key.to_string()))
    }

    /// A string metadata value.
    pub fn get_str(&self, key: &str) -> Result<&str, ModelError> {
        self.get(key)?
            .to_string()
            .map(|s| s.as_str())
            .map_err(|_| ModelError::Metadata(key.to_string()))
    }

    /// An unsigned integer metadata value of any width.
    pub fn get_u64(&self, key: &str) -> Result<u64, ModelError> {
        let v = self.get(key)?;
        let n = match v {
            Value::U8(x) => *x as u64,
            Value::U16(x) => *x as u64,
            Value::U32(x) => *x as u64,
            Value::U64(x) => *x,
            Value::I8(x) if *x >= 0 => *x as u64,
            Value::I16(x) if *x >= 0 => *x as u64,
            Value::I32(x) if *x >= 0 => *x as u64,
            Value::I64(x) if *x >= 0 => *x as u64,
            _ => return Err(ModelError::Metadata(key.to_string())),
        };
        Ok(n)
    }

    /// A float metadata value.
    pub fn get_f32(&self, key: &str) -> Result<f32, ModelError> {
        match self.get(key)? {
            Value::F32(x) => Ok(*x),
            Value::F64(x) => Ok(*x as f32),
            _ => Err(ModelError::Metadata(key.to_string())),
        }
    }

    /// A boolean metadata value.
    pub fn get_bool(&self, key: &str) -> Result<bool, ModelError> {
        self.get(key)?
            .to_bool()
            .map_err(|_| ModelError::Metadata(key.to_string()))
    }

    /// Whether the file has tensor `name`.
    pub fn has_tensor(&self, name: &str) -> bool {
        self.content.tensor_infos.contains_key(name)
    }

    /// The tensor's quantisation type, its shape (outermost dimension first, as candle
    /// reports it) and its raw bytes inside the memory map.
    pub fn tensor(&self, name: &str) -> Result<(GgmlDType, Vec<usize>, &[u8]), ModelError> {
        let info = self
            .content
            .tensor_infos
            .get(name)
            .ok_or_else(|| ModelError::MissingTensor(name.to_string()))?;
        let past_end = || ModelError::NotGguf {
            path: self.path.clone(),
            reason: format!("tensor `{name}` lies past the end of the file"),
        };
        // Checked when the header was read; checked again, for files built in memory.
        let size = header::byte_size(info).ok_or_else(past_end)?;
        let start = self.content.tensor_data_offset.checked_add(info.offset);
        let range = start.and_then(|s| Some(s as usize..s.checked_add(size)? as usize));
        let data = range
            .and_then(|r| self.data.bytes().get(r))
            .ok_or_else(past_end)?;
        Ok((info.ggml_dtype, info.shape.dims().to_vec(), data))
    }
}
