//! Building GGUF files: metadata of every value type, tensors of any ggml type, contiguous
//! padded offsets exactly as upstream's `gguf_write_out` lays them out, and gguf-split style
//! shard sets.

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

use super::reader::{
    Gguf, GGML_MAX_DIMS, GGML_MAX_NAME, GGUF_DEFAULT_ALIGNMENT, GGUF_KEY_GENERAL_ALIGNMENT,
    GGUF_MAGIC, GGUF_VERSION,
};
use super::types::{pad_to, GgmlType, GgufValueType};
use super::value::{ArrayValue, Value};

/// Shard metadata keys written by gguf-split and read by llama.cpp's loader.
pub const KEY_SPLIT_NO: &str = "split.no";
pub const KEY_SPLIT_COUNT: &str = "split.count";
pub const KEY_SPLIT_TENSORS_COUNT: &str = "split.tensors.count";

/// An owned metadata value, for writing.
#[derive(Clone, Debug, PartialEq)]
pub enum MetaValue {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    F32(f32),
    Bool(bool),
    /// Raw bytes; `From<&str>` and `From<String>` produce UTF-8.
    Str(Vec<u8>),
    Array(MetaArray),
    U64(u64),
    I64(i64),
    F64(f64),
}

/// An owned metadata array of one element type.
#[derive(Clone, Debug, PartialEq)]
pub enum MetaArray {
    U8(Vec<u8>),
    I8(Vec<i8>),
    U16(Vec<u16>),
    I16(Vec<i16>),
    U32(Vec<u32>),
    I32(Vec<i32>),
    F32(Vec<f32>),
    Bool(Vec<bool>),
    Str(Vec<Vec<u8>>),
    U64(Vec<u64>),
    I64(Vec<i64>),
    F64(Vec<f64>),
}

impl MetaValue {
    pub fn value_type(&self) -> GgufValueType {
        match self {
            MetaValue::U8(_) => GgufValueType::U8,
            MetaValue::I8(_) => GgufValueType::I8,
            MetaValue::U16(_) => GgufValueType::U16,
            MetaValue::I16(_) => GgufValueType::I16,
            MetaValue::U32(_) => GgufValueType::U32,
            MetaValue::I32(_) => GgufValueType::I32,
            MetaValue::F32(_) => GgufValueType::F32,
            MetaValue::Bool(_) => GgufValueType::Bool,
            MetaValue::Str(_) => GgufValueType::String,
            MetaValue::Array(_) => GgufValueType::Array,
            MetaValue::U64(_) => GgufValueType::U64,
            MetaValue::I64(_) => GgufValueType::I64,
            MetaValue::F64(_) => GgufValueType::F64,
        }
    }

    /// An owned copy of a value read from a file.
    pub fn from_value(value: &Value<'_>) -> MetaValue {
        match *value {
            Value::U8(v) => MetaValue::U8(v),
            Value::I8(v) => MetaValue::I8(v),
            Value::U16(v) => MetaValue::U16(v),
            Value::I16(v) => MetaValue::I16(v),
            Value::U32(v) => MetaValue::U32(v),
            Value::I32(v) => MetaValue::I32(v),
            Value::F32(v) => MetaValue::F32(v),
            Value::Bool(v) => MetaValue::Bool(v),
            Value::Str(v) => MetaValue::Str(v.to_vec()),
            Value::Array(ref array) => MetaValue::Array(MetaArray::from_array(array)),
            Value::U64(v) => MetaValue::U64(v),
            Value::I64(v) => MetaValue::I64(v),
            Value::F64(v) => MetaValue::F64(v),
        }
    }

    fn encode(&self, out: &mut Vec<u8>) {
        match self {
            MetaValue::U8(v) => out.push(*v),
            MetaValue::I8(v) => out.extend_from_slice(&v.to_le_bytes()),
            MetaValue::U16(v) => out.extend_from_slice(&v.to_le_bytes()),
            MetaValue::I16(v) => out.extend_from_slice(&v.to_le_bytes()),
            MetaValue::U32(v) => out.extend_from_slice(&v.to_le_bytes()),
            MetaValue::I32(v) => out.extend_from_slice(&v.to_le_bytes()),
            MetaValue::F32(v) => out.extend_from_slice(&v.to_le_bytes()),
            MetaValue::Bool(v) => out.push(u8::from(*v)),
            MetaValue::Str(v) => put_str(out, v),
            MetaValue::Array(array) => array.encode(out),
            MetaValue::U64(v) => out.extend_from_slice(&v.to_le_bytes()),
            MetaValue::I64(v) => out.extend_from_slice(&v.to_le_bytes()),
            MetaValue::F64(v) => out.extend_from_slice(&v.to_le_bytes()),
        }
    }
}

impl MetaArray {
    pub fn elem_type(&self) -> GgufValueType {
        match self {
            MetaArray::U8(_) => GgufValueType::U8,
            MetaArray::I8(_) => GgufValueType::I8,
            MetaArray::U16(_) => GgufValueType::U16,
            MetaArray::I16(_) => GgufValueType::I16,
            MetaArray::U32(_) => GgufValueType::U32,
            MetaArray::I32(_) => GgufValueType::I32,
            MetaArray::F32(_) => GgufValueType::F32,
            MetaArray::Bool(_) => GgufValueType::Bool,
            MetaArray::Str(_) => GgufValueType::String,
            MetaArray::U64(_) => GgufValueType::U64,
            MetaArray::I64(_) => GgufValueType::I64,
            MetaArray::F64(_) => GgufValueType::F64,
        }
    }

    pub fn len(&self) -> usize {
        match self {
            MetaArray::U8(v) => v.len(),
            MetaArray::I8(v) => v.len(),
            MetaArray::U16(v) => v.len(),
            MetaArray::I16(v) => v.len(),
            MetaArray::U32(v) => v.len(),
            MetaArray::I32(v) => v.len(),
            MetaArray::F32(v) => v.len(),
            MetaArray::Bool(v) => v.len(),
            MetaArray::Str(v) => v.len(),
            MetaArray::U64(v) => v.len(),
            MetaArray::I64(v) => v.len(),
            MetaArray::F64(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// An owned copy of an array read from a file.
    pub fn from_array(array: &ArrayValue<'_>) -> MetaArray {
        fn all<T: super::value::ArrayElement>(array: &ArrayValue<'_>) -> Vec<T> {
            array.iter::<T>().map(Iterator::collect).unwrap_or_default()
        }
        match array.elem_type() {
            GgufValueType::U8 => MetaArray::U8(all(array)),
            GgufValueType::I8 => MetaArray::I8(all(array)),
            GgufValueType::U16 => MetaArray::U16(all(array)),
            GgufValueType::I16 => MetaArray::I16(all(array)),
            GgufValueType::U32 => MetaArray::U32(all(array)),
            GgufValueType::I32 => MetaArray::I32(all(array)),
            GgufValueType::F32 => MetaArray::F32(all(array)),
            GgufValueType::Bool => MetaArray::Bool(all(array)),
            GgufValueType::U64 => MetaArray::U64(all(array)),
            GgufValueType::I64 => MetaArray::I64(all(array)),
            GgufValueType::F64 => MetaArray::F64(all(array)),
            // The reader never builds arrays of arrays.
            GgufValueType::String | GgufValueType::Array => MetaArray::Str(
                array
                    .iter_str()
                    .map(|strings| strings.map(<[u8]>::to_vec).collect())
                    .unwrap_or_default(),
            ),
        }
    }

    fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.elem_type().id().to_le_bytes());
        out.extend_from_slice(&(self.len() as u64).to_le_bytes());
        fn each<T: Copy, const N: usize>(out: &mut Vec<u8>, v: &[T], to: fn(T) -> [u8; N]) {
            for &x in v {
                out.extend_from_slice(&to(x));
            }
        }
        match self {
            MetaArray::U8(v) => out.extend_from_slice(v),
            MetaArray::I8(v) => each(out, v, i8::to_le_bytes),
            MetaArray::U16(v) => each(out, v, u16::to_le_bytes),
            MetaArray::I16(v) => each(out, v, i16::to_le_bytes),
            MetaArray::U32(v) => each(out, v, u32::to_le_bytes),
            MetaArray::I32(v) => each(out, v, i32::to_le_bytes),
            MetaArray::F32(v) => each(out, v, f32::to_le_bytes),
            MetaArray::Bool(v) => out.extend(v.iter().map(|&b| u8::from(b))),
            MetaArray::Str(v) => v.iter().for_each(|s| put_str(out, s)),
            MetaArray::U64(v) => each(out, v, u64::to_le_bytes),
            MetaArray::I64(v) => each(out, v, i64::to_le_bytes),
            MetaArray::F64(v) => each(out, v, f64::to_le_bytes),
        }
    }
}

macro_rules! meta_from {
    ($($t:ty => $variant:ident),* $(,)?) => {$(
        impl From<$t> for MetaValue {
            fn from(v: $t) -> Self { MetaValue::$variant(v) }
        }
        impl From<Vec<$t>> for MetaValue {
            fn from(v: Vec<$t>) -> Self { MetaValue::Array(MetaArray::$variant(v)) }
        }
        impl From<&[$t]> for MetaValue {
            fn from(v: &[$t]) -> Self { MetaValue::Array(MetaArray::$variant(v.to_vec())) }
        }
    )*};
}

meta_from!(u8 => U8, i8 => I8, u16 => U16, i16 => I16, u32 => U32, i32 => I32, f32 => F32,
           bool => Bool, u64 => U64, i64 => I64, f64 => F64);

impl From<&str> for MetaValue {
    fn from(v: &str) -> Self {
        MetaValue::Str(v.as_bytes().to_vec())
    }
}

impl From<String> for MetaValue {
    fn from(v: String) -> Self {
        MetaValue::Str(v.into_bytes())
    }
}

impl From<Vec<&str>> for MetaValue {
    fn from(v: Vec<&str>) -> Self {
        MetaValue::Array(MetaArray::Str(
            v.into_iter().map(|s| s.as_bytes().to_vec()).collect(),
        ))
    }
}

impl From<Vec<String>> for MetaValue {
    fn from(v: Vec<String>) -> Self {
        MetaValue::Array(MetaArray::Str(
            v.into_iter().map(String::into_bytes).collect(),
        ))
    }
}

impl From<MetaArray> for MetaValue {
    fn from(v: MetaArray) -> Self {
        MetaValue::Array(v)
    }
}

/// Why the writer refused a tensor, a key or a write.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GgufWriteError {
    #[error("metadata keys must not be empty")]
    EmptyKey,
    #[error("general.alignment must be a u32, got {0}")]
    AlignmentWrongType(&'static str),
    #[error("alignment {0} is not a non-zero power of two")]
    BadAlignment(u32),
    #[error("tensor name '{0}' is empty, too long (64 bytes or more) or contains a NUL byte")]
    BadTensorName(String),
    #[error("tensor '{0}' was already added")]
    DuplicateTensor(String),
    #[error("tensor '{name}' has {n_dims} dimensions, at most 4 are allowed")]
    TooManyDims { name: String, n_dims: usize },
    #[error("tensor '{name}' has shape {ne:?}, which is negative, not a whole number of {ggml_type} blocks per row, or too large")]
    BadShape {
        name: String,
        ne: Vec<i64>,
        ggml_type: GgmlType,
    },
    #[error("tensor '{name}' needs {expected} bytes of data, got {actual}")]
    DataLength {
        name: String,
        expected: u64,
        actual: u64,
    },
    #[error("tensor '{0}' has deferred data; write it with write_to_with")]
    DeferredData(String),
    #[error("splitting would leave shard {0} without tensors")]
    EmptyShard(usize),
    #[error("I/O error writing GGUF: {0}")]
    Io(#[from] io::Error),
}

/// Where a tensor's bytes come from when the file is written.
#[derive(Clone, Debug, PartialEq)]
pub enum TensorData {
    Bytes(Vec<u8>),
    /// Supplied while writing by [`GgufWriter::write_to_with`], so huge files can be
    /// streamed without holding their data.
    Deferred,
}

/// A tensor waiting to be written.
#[derive(Clone, Debug, PartialEq)]
pub struct PendingTensor {
    pub name: String,
    /// Dimensions as stored (`ne[0]` first); the file records exactly this many.
    pub dims: Vec<i64>,
    pub ggml_type: GgmlType,
    pub nbytes: u64,
    pub data: TensorData,
}

/// The byte layout a writer will produce.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    pub alignment: u32,
    /// Absolute offset of the data section.
    pub data_offset: u64,
    /// Each tensor's offset relative to the data section.
    pub tensor_offsets: Vec<u64>,
    /// Total file size, the last tensor's padding included.
    pub file_size: u64,
}

/// Builds a GGUF file in memory or on disk.
#[derive(Clone, Debug, PartialEq)]
pub struct GgufWriter {
    version: u32,
    kvs: Vec<(String, MetaValue)>,
    /// Position of each key in `kvs`, so building files with many keys stays linear.
    key_index: HashMap<String, usize>,
    tensors: Vec<PendingTensor>,
    tensor_names: HashMap<String, usize>,
}

impl Default for GgufWriter {
    fn default() -> Self {
        GgufWriter::new()
    }
}

impl GgufWriter {
    pub fn new() -> Self {
        GgufWriter {
            version: GGUF_VERSION,
            kvs: Vec::new(),
            key_index: HashMap::new(),
            tensors: Vec::new(),
            tensor_names: HashMap::new(),
        }
    }

    /// An owned copy of a parsed file; tensor data is copied when the parsed bytes hold it
    /// and deferred otherwise.
    pub fn from_gguf(gguf: &Gguf<'_>) -> Self {
        let mut writer = GgufWriter::new();
        writer.version = gguf.version();
        for kv in gguf.kvs() {
            // Pushed rather than `set`, so that keys which collide after the lossy
            // conversion stay distinct pairs, as in the file.
            let key = String::from_utf8_lossy(kv.key).into_owned();
            writer
                .key_index
                .entry(key.clone())
                .or_insert(writer.kvs.len());
            writer.kvs.push((key, MetaValue::from_value(&kv.value)));
        }
        for tensor in gguf.tensors() {
            let index = writer.tensors.len();
            writer.tensor_names.insert(tensor.name.to_owned(), index);
            writer.tensors.push(PendingTensor {
                name: tensor.name.to_owned(),
                dims: tensor.shape().to_vec(),
                ggml_type: tensor.ggml_type,
                nbytes: tensor.nbytes,
                data: gguf
                    .tensor_data(tensor)
                    .map_or(TensorData::Deferred, |d| TensorData::Bytes(d.to_vec())),
            });
        }
        writer
    }

    /// The GGUF version written (default 3). Any value is accepted, to make test files.
    pub fn set_version(&mut self, version: u32) -> &mut Self {
        self.version = version;
        self
    }

    pub fn version(&self) -> u32 {
        self.version
    }

    /// Sets `key`, replacing an existing value the way upstream's `gguf_set_val_*` does: the
    /// old pair is removed and the new one appended.
    pub fn set(&mut self, key: &str, value: impl Into<MetaValue>) -> &mut Self {
        self.remove(key);
        self.key_index.insert(key.to_owned(), self.kvs.len());
        self.kvs.push((key.to_owned(), value.into()));
        self
    }

    pub fn get(&self, key: &str) -> Option<&MetaValue> {
        self.key_index.get(key).map(|&i| &self.kvs[i].1)
    }

    pub fn remove(&mut self, key: &str) -> Option<MetaValue> {
        let index = self.key_index.remove(key)?;
        let (_, value) = self.kvs.remove(index);
        // Later pairs moved down by one.
        for position in self.key_index.values_mut() {
            if *position > index {
                *position -= 1;
            }
        }
        Some(value)
    }

    /// Metadata in the order it will be written.
    pub fn kvs(&self) -> &[(String, MetaValue)] {
        &self.kvs
    }

    /// Sets the data alignment and writes it as `general.alignment` (even when it is 32).
    pub fn set_alignment(&mut self, alignment: u32) -> Result<&mut Self, GgufWriteError> {
        if !alignment.is_power_of_two() {
            return Err(GgufWriteError::BadAlignment(alignment));
        }
        Ok(self.set(GGUF_KEY_GENERAL_ALIGNMENT, alignment))
    }

    /// The alignment the file will use: `general.alignment` if set, else 32.
    pub fn alignment(&self) -> Result<u32, GgufWriteError> {
        match self.get(GGUF_KEY_GENERAL_ALIGNMENT) {
            None => Ok(GGUF_DEFAULT_ALIGNMENT),
            Some(MetaValue::U32(a)) if a.is_power_of_two() => Ok(*a),
            Some(MetaValue::U32(a)) => Err(GgufWriteError::BadAlignment(*a)),
            Some(other) => Err(GgufWriteError::AlignmentWrongType(
                other.value_type().name(),
            )),
        }
    }

    pub fn tensors(&self) -> &[PendingTensor] {
        &self.tensors
    }

    /// Adds a tensor with its encoded bytes; `dims` is `ne[0]` first, as in the file.
    pub fn add_tensor(
        &mut self,
        name: &str,
        dims: &[i64],
        ggml_type: GgmlType,
        data: Vec<u8>,
    ) -> Result<&mut Self, GgufWriteError> {
        let nbytes = self.check_tensor(name, dims, ggml_type)?;
        if data.len() as u64 != nbytes {
            return Err(GgufWriteError::DataLength {
                name: name.to_owned(),
                expected: nbytes,
                actual: data.len() as u64,
            });
        }
        self.push_tensor(name, dims, ggml_type, nbytes, TensorData::Bytes(data));
        Ok(self)
    }

    /// Adds a tensor from `f32` values encoded as `ggml_type` with the reference
    /// quantizers (F32, F16, BF16, Q8_0, Q4_0).
    pub fn add_tensor_f32(
        &mut self,
        name: &str,
        dims: &[i64],
        ggml_type: GgmlType,
        values: &[f32],
    ) -> Result<&mut Self, GgufWriteError> {
        let nbytes = self.check_tensor(name, dims, ggml_type)?;
        let bad_shape = || GgufWriteError::BadShape {
            name: name.to_owned(),
            ne: dims.to_vec(),
            ggml_type,
        };
        let bytes = super::quant::quantize(ggml_type, values).map_err(|_| bad_shape())?;
        if bytes.len() as u64 != nbytes {
            return Err(GgufWriteError::DataLength {
                name: name.to_owned(),
                expected: nbytes,
                actual: bytes.len() as u64,
            });
        }
        self.push_tensor(name, dims, ggml_type, nbytes, TensorData::Bytes(bytes));
        Ok(self)
    }

    /// Adds a tensor whose bytes are produced during [`GgufWriter::write_to_with`].
    pub fn add_tensor_deferred(
        &mut self,
        name: &str,
        dims: &[i64],
        ggml_type: GgmlType,
    ) -> Result<&mut Self, GgufWriteError> {
        let nbytes = self.check_tensor(name, dims, ggml_type)?;
        self.push_tensor(name, dims, ggml_type, nbytes, TensorData::Deferred);
        Ok(self)
    }

    fn push_tensor(
        &mut self,
        name: &str,
        dims: &[i64],
        ggml_type: GgmlType,
        nbytes: u64,
        data: TensorData,
    ) {
        self.tensor_names
            .insert(name.to_owned(), self.tensors.len());
        self.tensors.push(PendingTensor {
            name: name.to_owned(),
            dims: dims.to_vec(),
            ggml_type,
            nbytes,
            data,
        });
    }

    /// Checks what the reader will check and returns the tensor's byte size.
    fn check_tensor(
        &self,
        name: &str,
        dims: &[i64],
        ggml_type: GgmlType,
    ) -> Result<u64, GgufWriteError> {
        if name.is_empty() || name.len() >= GGML_MAX_NAME || name.contains('\0') {
            return Err(GgufWriteError::BadTensorName(name.to_owned()));
        }
        if self.tensor_names.contains_key(name) {
            return Err(GgufWriteError::DuplicateTensor(name.to_owned()));
        }
        if dims.len() > GGML_MAX_DIMS {
            return Err(GgufWriteError::TooManyDims {
                name: name.to_owned(),
                n_dims: dims.len(),
            });
        }
        let mut ne = [1i64; 4];
        ne[..dims.len()].copy_from_slice(dims);
        let elements_fit = ne
            .iter()
            .try_fold(1i64, |acc, &n| acc.checked_mul(n.max(1)))
            .is_some();
        ggml_type
            .nbytes(ne)
            .filter(|_| elements_fit)
            .ok_or_else(|| GgufWriteError::BadShape {
                name: name.to_owned(),
                ne: dims.to_vec(),
                ggml_type,
            })
    }

    /// Offsets and sizes of the file this writer produces.
    pub fn layout(&self) -> Result<Layout, GgufWriteError> {
        let alignment = self.alignment()?;
        let align = u64::from(alignment);
        let metadata_len = self.metadata_bytes()?.len() as u64;
        let data_offset = pad_to(metadata_len, align).ok_or(io_overflow())?;
        let mut tensor_offsets = Vec::with_capacity(self.tensors.len());
        let mut next = 0u64;
        for tensor in &self.tensors {
            tensor_offsets.push(next);
            next = pad_to(tensor.nbytes, align)
                .and_then(|padded| next.checked_add(padded))
                .ok_or(io_overflow())?;
        }
        Ok(Layout {
            alignment,
            data_offset,
            tensor_offsets,
            file_size: data_offset.checked_add(next).ok_or(io_overflow())?,
        })
    }

    /// Magic, version, counts, key/value pairs and tensor infos, without the padding.
    fn metadata_bytes(&self) -> Result<Vec<u8>, GgufWriteError> {
        let alignment = u64::from(self.alignment()?);
        let mut out = Vec::new();
        out.extend_from_slice(&GGUF_MAGIC);
        out.extend_from_slice(&self.version.to_le_bytes());
        out.extend_from_slice(&(self.tensors.len() as u64).to_le_bytes());
        out.extend_from_slice(&(self.kvs.len() as u64).to_le_bytes());
        for (key, value) in &self.kvs {
            if key.is_empty() {
                return Err(GgufWriteError::EmptyKey);
            }
            put_str(&mut out, key.as_bytes());
            match value {
                MetaValue::Array(_) => {
                    out.extend_from_slice(&GgufValueType::Array.id().to_le_bytes())
                }
                scalar => out.extend_from_slice(&scalar.value_type().id().to_le_bytes()),
            }
            value.encode(&mut out);
        }
        let mut offset = 0u64;
        for tensor in &self.tensors {
            put_str(&mut out, tensor.name.as_bytes());
            out.extend_from_slice(&(tensor.dims.len() as u32).to_le_bytes());
            for &n in &tensor.dims {
                out.extend_from_slice(&n.to_le_bytes());
            }
            out.extend_from_slice(&(tensor.ggml_type.id() as i32).to_le_bytes());
            out.extend_from_slice(&offset.to_le_bytes());
            offset = pad_to(tensor.nbytes, alignment)
                .and_then(|padded| offset.checked_add(padded))
                .ok_or(io_overflow())?;
        }
        Ok(out)
    }

    /// Everything before the tensor data: metadata padded to the alignment, as upstream
    /// writes it (padding is written even without tensors).
    pub fn header_bytes(&self) -> Result<Vec<u8>, GgufWriteError> {
        let mut out = self.metadata_bytes()?;
        let padded = pad_to(out.len() as u64, u64::from(self.alignment()?)).ok_or(io_overflow())?;
        out.resize(padded as usize, 0);
        Ok(out)
    }

    /// The whole file in memory. Fails on deferred tensors.
    pub fn to_bytes(&self) -> Result<Vec<u8>, GgufWriteError> {
        let mut out = Vec::new();
        self.write_all_to(&mut out, &mut |_, tensor, _| {
            Err(io::Error::other(GgufWriteError::DeferredData(
                tensor.name.clone(),
            )))
        })
        .map_err(unwrap_deferred)?;
        Ok(out)
    }

    /// Writes the file to `path`. Fails on deferred tensors.
    pub fn write_to(&self, path: impl AsRef<Path>) -> Result<(), GgufWriteError> {
        self.write_to_with(path, |_, tensor, _| {
            Err(io::Error::other(GgufWriteError::DeferredData(
                tensor.name.clone(),
            )))
        })
    }

    /// Writes the file to `path`, calling `fill(index, tensor, out)` to produce the bytes of
    /// each deferred tensor; it must write exactly `tensor.nbytes` bytes.
    pub fn write_to_with(
        &self,
        path: impl AsRef<Path>,
        mut fill: impl FnMut(usize, &PendingTensor, &mut dyn Write) -> io::Result<()>,
    ) -> Result<(), GgufWriteError> {
        let mut out = BufWriter::with_capacity(1 << 20, File::create(path)?);
        self.write_all_to(&mut out, &mut fill)
            .map_err(unwrap_deferred)?;
        out.flush()?;
        Ok(())
    }

    /// Writes the file to `out` (an open file, a buffer), calling `fill` for each deferred
    /// tensor as [`GgufWriter::write_to_with`] does.
    pub fn write_with(
        &self,
        out: &mut dyn Write,
        mut fill: impl FnMut(usize, &PendingTensor, &mut dyn Write) -> io::Result<()>,
    ) -> Result<(), GgufWriteError> {
        self.write_all_to(out, &mut fill).map_err(unwrap_deferred)?;
        out.flush()?;
        Ok(())
    }

    fn write_all_to(
        &self,
        out: &mut dyn Write,
        fill: &mut dyn FnMut(usize, &PendingTensor, &mut dyn Write) -> io::Result<()>,
    ) -> Result<(), GgufWriteError> {
        let alignment = u64::from(self.alignment()?);
        out.write_all(&self.header_bytes()?)?;
        for (index, tensor) in self.tensors.iter().enumerate() {
            let written = match &tensor.data {
                TensorData::Bytes(bytes) => {
                    out.write_all(bytes)?;
                    bytes.len() as u64
                }
                TensorData::Deferred => {
                    let mut counter = CountingWriter {
                        inner: out,
                        count: 0,
                    };
                    fill(index, tensor, &mut counter)?;
                    counter.count
                }
            };
            if written != tensor.nbytes {
                return Err(GgufWriteError::DataLength {
                    name: tensor.name.clone(),
                    expected: tensor.nbytes,
                    actual: written,
                });
            }
            let padding = pad_to(written, alignment).ok_or(io_overflow())? - written;
            write_zeros(out, padding)?;
        }
        Ok(())
    }

    /// Splits into shards the way `gguf-split` does: the first shard carries all metadata,
    /// every shard gets `split.no` (u16, 0-based), `split.tensors.count` (i32, total
    /// tensors) and `split.count` (u16), in that order after any copied metadata.
    pub fn split(&self, mode: SplitMode) -> Result<Vec<GgufWriter>, GgufWriteError> {
        let total = self.tensors.len();
        let mut shards: Vec<GgufWriter> = Vec::new();
        let new_shard = |shards: &mut Vec<GgufWriter>| {
            let mut shard = GgufWriter::new();
            shard.version = self.version;
            if shards.is_empty() {
                shard.kvs = self.kvs.clone();
                shard.key_index = self.key_index.clone();
            }
            shard.set(KEY_SPLIT_NO, shards.len() as u16);
            shard.set(KEY_SPLIT_COUNT, 0u16);
            shard.set(KEY_SPLIT_TENSORS_COUNT, total as i32);
            shards.push(shard);
        };
        new_shard(&mut shards);
        let mut current_bytes = 0u64;
        for (index, tensor) in self.tensors.iter().enumerate() {
            // gguf-split sizes shards with the default alignment.
            let padded =
                pad_to(tensor.nbytes, u64::from(GGUF_DEFAULT_ALIGNMENT)).ok_or(io_overflow())?;
            let next_bytes = current_bytes.saturating_add(padded);
            let split_here = match mode {
                SplitMode::MaxTensors(n) => index > 0 && n > 0 && index % n == 0,
                SplitMode::MaxBytes(limit) => next_bytes > limit,
            };
            if split_here {
                if shards.last().is_some_and(|s| s.tensors.is_empty()) {
                    return Err(GgufWriteError::EmptyShard(shards.len() - 1));
                }
                new_shard(&mut shards);
                current_bytes = padded;
            } else {
                current_bytes = next_bytes;
            }
            if let Some(shard) = shards.last_mut() {
                shard
                    .tensor_names
                    .insert(tensor.name.clone(), shard.tensors.len());
                shard.tensors.push(tensor.clone());
            }
        }
        let count = shards.len() as u16;
        for shard in &mut shards {
            shard.set(KEY_SPLIT_COUNT, count);
        }
        Ok(shards)
    }

    /// Writes the shards of [`GgufWriter::split`] as `<prefix>-00001-of-0000N.gguf`, ...
    pub fn write_split(
        &self,
        path_prefix: &str,
        mode: SplitMode,
    ) -> Result<Vec<PathBuf>, GgufWriteError> {
        let shards = self.split(mode)?;
        let count = shards.len() as u32;
        let mut paths = Vec::with_capacity(shards.len());
        for (index, shard) in shards.iter().enumerate() {
            let path = PathBuf::from(split_path(path_prefix, index as u32, count));
            shard.write_to(&path)?;
            paths.push(path);
        }
        Ok(paths)
    }
}

/// How [`GgufWriter::split`] cuts the tensor list (gguf-split's `--split-max-tensors` and
/// `--split-max-size`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SplitMode {
    MaxTensors(usize),
    MaxBytes(u64),
}

/// llama.cpp's `llama_split_path`: `"%s-%05d-of-%05d.gguf"` with a 0-based `split_no`
/// printed 1-based.
pub fn split_path(prefix: &str, split_no: u32, split_count: u32) -> String {
    format!(
        "{prefix}-{:05}-of-{:05}.gguf",
        u64::from(split_no) + 1,
        split_count
    )
}

/// Padding without allocating: alignments can be as large as 2^31.
fn write_zeros(out: &mut dyn Write, mut count: u64) -> io::Result<()> {
    const ZEROS: [u8; 4096] = [0; 4096];
    while count > 0 {
        let n = count.min(ZEROS.len() as u64) as usize;
        out.write_all(&ZEROS[..n])?;
        count -= n as u64;
    }
    Ok(())
}

fn put_str(out: &mut Vec<u8>, bytes: &[u8]) {
    out.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
    out.extend_from_slice(bytes);
}

fn io_overflow() -> GgufWriteError {
    GgufWriteError::Io(io::Error::other("file size overflows u64"))
}

/// `fill` callbacks report a deferred tensor through io::Error; give it its own variant back.
fn unwrap_deferred(err: GgufWriteError) -> GgufWriteError {
    match err {
        GgufWriteError::Io(io_err)
            if io_err
                .get_ref()
                .is_some_and(|inner| inner.is::<GgufWriteError>()) =>
        {
            match io_err
                .into_inner()
                .map(|inner| inner.downcast::<GgufWriteError>())
            {
                Some(Ok(write_err)) => *write_err,
                _ => GgufWriteError::Io(io::Error::other("deferred tensor data")),
            }
        }
        other => other,
    }
}

/// Counts the bytes a `fill` callback writes.
struct CountingWriter<'w> {
    inner: &'w mut dyn Write,
    count: u64,
}

impl Write for CountingWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.count += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}
