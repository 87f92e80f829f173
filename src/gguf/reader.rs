//! Zero-copy GGUF parsing over a byte slice, with every validation of upstream's
//! `gguf_init_from_reader` (ggml/src/gguf.cpp) plus llama.cpp's check that tensor data lies
//! inside the file.
//!
//! Numbers claimed by the header are never trusted: all arithmetic on them is checked, and
//! containers are preallocated for at most as many items as the remaining bytes could hold,
//! so a hostile header cannot make the parser allocate much more than the input's size.

use std::collections::HashMap;

use super::error::GgufError;
use super::types::{pad_to, GgmlType, GgufValueType, GGML_TYPE_COUNT};
use super::value::{decode_scalar, ArrayElement, ArrayValue, Value};

/// "GGUF" as the first four bytes of the file.
pub const GGUF_MAGIC: [u8; 4] = *b"GGUF";
/// The newest GGUF version (`GGUF_VERSION`); version 2 is also read.
pub const GGUF_VERSION: u32 = 3;
/// Alignment of the data section when `general.alignment` is absent.
pub const GGUF_DEFAULT_ALIGNMENT: u32 = 32;
/// The key that overrides the alignment; it must hold a u32 power of two.
pub const GGUF_KEY_GENERAL_ALIGNMENT: &str = "general.alignment";
/// `GGUF_MAX_STRING_LENGTH`.
pub const GGUF_MAX_STRING_LENGTH: u64 = 1024 * 1024 * 1024;
/// `GGUF_MAX_ARRAY_ELEMENTS`.
pub const GGUF_MAX_ARRAY_ELEMENTS: u64 = 1024 * 1024 * 1024;
/// `GGML_MAX_NAME`: tensor names must be shorter than this.
pub const GGML_MAX_NAME: usize = 64;
/// `GGML_MAX_DIMS`.
pub const GGML_MAX_DIMS: usize = 4;

/// The smallest possible encoded key/value pair: a u64 key length, a one-byte key (empty
/// keys are invalid), an i32 type and a one-byte value.
const MIN_KV_BYTES: u64 = 8 + 1 + 4 + 1;
/// The smallest possible encoded tensor info: a u64 name length, an empty name, a u32
/// n_dims of 0, an i32 type and a u64 offset.
const MIN_TENSOR_INFO_BYTES: u64 = 8 + 4 + 4 + 8;
/// Every string costs at least its u64 length prefix.
const MIN_STRING_BYTES: u64 = 8;

/// One metadata key/value pair.
#[derive(Clone, Debug, PartialEq)]
pub struct Kv<'a> {
    /// The key's raw bytes; GGUF does not require UTF-8.
    pub key: &'a [u8],
    pub value: Value<'a>,
    /// Byte offset of the pair (its key length) in the file.
    pub offset: u64,
}

impl<'a> Kv<'a> {
    /// The key as text, when it is UTF-8 (all keys llama.cpp knows are ASCII).
    pub fn key_str(&self) -> Option<&'a str> {
        std::str::from_utf8(self.key).ok()
    }
}

/// One tensor's description from the header.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorInfo<'a> {
    /// At most 63 bytes of UTF-8 without NUL.
    pub name: &'a str,
    /// Dimensions stored in the file (0 to 4).
    pub n_dims: u32,
    /// Elements per dimension, innermost first; dimensions past `n_dims` are 1.
    pub ne: [i64; 4],
    pub ggml_type: GgmlType,
    /// Offset of the data relative to the data section (`Gguf::data_offset`).
    pub offset: u64,
    /// Bytes of data (without padding).
    pub nbytes: u64,
    /// Byte strides as upstream computes them: `nb[0]` = type size,
    /// `nb[1]` = `nb[0] * ne[0] / block size`, `nb[i]` = `nb[i-1] * ne[i-1]`.
    /// Upstream wraps on overflow, which only a zero-element tensor can reach; so does this.
    pub nb: [u64; 4],
    /// Byte offset of this tensor's info (its name length) in the file.
    pub info_offset: u64,
}

impl TensorInfo<'_> {
    /// Absolute position of the data in the file.
    pub fn abs_offset(&self, gguf: &Gguf<'_>) -> u64 {
        // Validated during parsing to end inside the file, so this cannot overflow.
        gguf.data_offset.saturating_add(self.offset)
    }

    /// Number of elements (validated not to overflow `i64`).
    pub fn n_elements(&self) -> u64 {
        // Saturating only matters for hand-built infos; parsed shapes never overflow.
        self.ne.iter().fold(1u64, |acc, &n| {
            acc.saturating_mul(u64::try_from(n).unwrap_or(0))
        })
    }

    /// The dimensions stored in the file.
    pub fn shape(&self) -> &[i64] {
        &self.ne[..self.n_dims as usize]
    }
}

/// A parsed GGUF header that borrows the bytes it was parsed from.
#[derive(Clone, Debug)]
pub struct Gguf<'a> {
    bytes: &'a [u8],
    file_size: u64,
    version: u32,
    alignment: u32,
    metadata_end: u64,
    data_offset: u64,
    data_size: u64,
    kvs: Vec<Kv<'a>>,
    key_index: HashMap<&'a [u8], usize>,
    tensors: Vec<TensorInfo<'a>>,
    tensor_index: HashMap<&'a str, usize>,
}

impl<'a> Gguf<'a> {
    /// Parses a whole file held in memory; every tensor's data must lie within `bytes`.
    pub fn parse(bytes: &'a [u8]) -> Result<Gguf<'a>, GgufError> {
        Parser::new(bytes, bytes.len() as u64).parse()
    }

    /// Parses the metadata from `prefix`, the first bytes of a file of `file_size` bytes,
    /// checking the tensor data against `file_size` without needing it. When the header
    /// continues past `prefix` (and the file is long enough to hold it), returns
    /// [`GgufError::NeedMoreBytes`] saying how many bytes to read before trying again.
    pub fn parse_header(prefix: &'a [u8], file_size: u64) -> Result<Gguf<'a>, GgufError> {
        let usable = usize::try_from(file_size).map_or(prefix, |n| &prefix[..prefix.len().min(n)]);
        Parser::new(usable, file_size).parse()
    }

    pub fn version(&self) -> u32 {
        self.version
    }

    /// Alignment of the data section and of every tensor in it.
    pub fn alignment(&self) -> u32 {
        self.alignment
    }

    /// Where the data section starts in the file: the end of the tensor infos, padded to
    /// the alignment when there are tensors (upstream's `gguf_get_data_offset`).
    pub fn data_offset(&self) -> u64 {
        self.data_offset
    }

    /// Where the tensor infos end (upstream's `gguf_get_meta_size` before padding): the
    /// bytes a reader needs to parse the header.
    pub fn metadata_end(&self) -> u64 {
        self.metadata_end
    }

    /// Sum of the tensors' sizes, each padded to the alignment.
    pub fn data_size(&self) -> u64 {
        self.data_size
    }

    /// The file size the header was checked against.
    pub fn file_size(&self) -> u64 {
        self.file_size
    }

    /// The bytes parsed (the whole file for `parse`, the prefix for `parse_header`).
    pub fn bytes(&self) -> &'a [u8] {
        self.bytes
    }

    /// All key/value pairs in file order.
    pub fn kvs(&self) -> &[Kv<'a>] {
        &self.kvs
    }

    pub fn get(&self, key: &str) -> Option<&Value<'a>> {
        self.get_bytes(key.as_bytes())
    }

    /// Lookup by raw key bytes, for keys that are not UTF-8.
    pub fn get_bytes(&self, key: &[u8]) -> Option<&Value<'a>> {
        self.find_key(key).map(|i| &self.kvs[i].value)
    }

    /// Index of `key` in [`Gguf::kvs`] (upstream's `gguf_find_key`).
    pub fn find_key(&self, key: &[u8]) -> Option<usize> {
        self.key_index.get(key).copied()
    }

    /// All tensor infos in file order.
    pub fn tensors(&self) -> &[TensorInfo<'a>] {
        &self.tensors
    }

    pub fn tensor(&self, name: &str) -> Option<&TensorInfo<'a>> {
        self.find_tensor(name).map(|i| &self.tensors[i])
    }

    /// Index of tensor `name` in [`Gguf::tensors`] (upstream's `gguf_find_tensor`).
    pub fn find_tensor(&self, name: &str) -> Option<usize> {
        self.tensor_index.get(name).copied()
    }

    /// The data of `tensor`, when the parsed bytes contain it (always after `parse`).
    pub fn tensor_data(&self, tensor: &TensorInfo<'_>) -> Option<&'a [u8]> {
        let start = usize::try_from(tensor.abs_offset(self)).ok()?;
        let len = usize::try_from(tensor.nbytes).ok()?;
        self.bytes.get(start..start.checked_add(len)?)
    }
}

/// Cursor over the available bytes of a file of `file_size` bytes.
struct Parser<'a> {
    bytes: &'a [u8],
    pos: usize,
    file_size: u64,
}

impl<'a> Parser<'a> {
    fn new(bytes: &'a [u8], file_size: u64) -> Self {
        Parser {
            bytes,
            pos: 0,
            file_size,
        }
    }

    fn offset(&self) -> u64 {
        self.pos as u64
    }

    /// Bytes left in the file after the cursor (upstream's `nbytes_remain`).
    fn remaining_in_file(&self) -> u64 {
        self.file_size.saturating_sub(self.offset())
    }

    /// Bytes left in the buffer: the bound for preallocation.
    fn remaining_in_buffer(&self) -> u64 {
        (self.bytes.len() - self.pos) as u64
    }

    /// How many items to preallocate for `claimed` items of at least `min_size` bytes each.
    fn capacity_for(&self, claimed: u64, min_size: u64) -> usize {
        let fit = self.remaining_in_buffer() / min_size.max(1);
        usize::try_from(claimed.min(fit)).unwrap_or(0)
    }

    fn take(&mut self, n: u64, what: &'static str) -> Result<&'a [u8], GgufError> {
        let start = self.offset();
        let end = start.checked_add(n).filter(|&end| end <= self.file_size);
        let Some(end) = end else {
            return Err(GgufError::UnexpectedEof {
                offset: start,
                what,
                needed: n,
                file_size: self.file_size,
            });
        };
        if end > self.bytes.len() as u64 {
            return Err(GgufError::NeedMoreBytes {
                needed_at_least: end,
                available: self.bytes.len() as u64,
            });
        }
        // end <= bytes.len(), so it fits in usize.
        let slice = &self.bytes[self.pos..end as usize];
        self.pos = end as usize;
        Ok(slice)
    }

    fn read<T: ArrayElement>(&mut self, what: &'static str) -> Result<T, GgufError> {
        Ok(T::decode(self.take(T::SIZE as u64, what)?))
    }

    /// A u64 length and that many bytes, with upstream's limits on the length.
    fn read_string(
        &mut self,
        what: &'static str,
        context: &dyn Fn() -> String,
    ) -> Result<&'a [u8], GgufError> {
        let offset = self.offset();
        let len: u64 = self.read("string length")?;
        let remaining = self.remaining_in_file();
        if len > GGUF_MAX_STRING_LENGTH {
            return Err(GgufError::StringTooLong {
                offset,
                context: context(),
                len,
                limit: GGUF_MAX_STRING_LENGTH,
                reason: "GGUF_MAX_STRING_LENGTH",
            });
        }
        if len > remaining {
            return Err(GgufError::StringTooLong {
                offset,
                context: context(),
                len,
                limit: remaining,
                reason: "bytes left in the file",
            });
        }
        self.take(len, what)
    }

    fn parse(mut self) -> Result<Gguf<'a>, GgufError> {
        let magic = self.take(4, "magic")?;
        if magic != GGUF_MAGIC {
            let mut found = [0u8; 4];
            found.copy_from_slice(magic);
            return Err(GgufError::BadMagic { offset: 0, found });
        }

        let version = self.parse_version()?;

        let count_offset = self.offset();
        let n_tensors: i64 = self.read("tensor count")?;
        let n_tensors = self
            .check_count(n_tensors, MIN_TENSOR_INFO_BYTES)
            .map_err(|reason| GgufError::BadTensorCount {
                offset: count_offset,
                count: n_tensors,
                reason,
            })?;

        let count_offset = self.offset();
        let n_kv: i64 = self.read("key/value count")?;
        let n_kv =
            self.check_count(n_kv, MIN_KV_BYTES)
                .map_err(|reason| GgufError::BadKvCount {
                    offset: count_offset,
                    count: n_kv,
                    reason,
                })?;

        let (kvs, key_index) = self.parse_kvs(n_kv)?;
        let alignment = alignment_from(&kvs, &key_index)?;
        let (tensors, tensor_index) = self.parse_tensor_infos(n_tensors)?;
        let metadata_end = self.offset();

        // The data section is aligned, but only when there is data (upstream seeks only then).
        let data_offset = if n_tensors > 0 {
            pad_to(metadata_end, u64::from(alignment))
                .filter(|&offset| offset <= self.file_size)
                .ok_or(GgufError::DataOffsetBeyondEof {
                    data_offset: metadata_end.saturating_add(u64::from(alignment) - 1),
                    file_size: self.file_size,
                })?
        } else {
            metadata_end
        };

        let data_size = check_offsets(&tensors, alignment)?;
        check_data_extent(&tensors, data_offset, self.file_size)?;

        Ok(Gguf {
            bytes: self.bytes,
            file_size: self.file_size,
            version,
            alignment,
            metadata_end,
            data_offset,
            data_size,
            kvs,
            key_index,
            tensors,
            tensor_index,
        })
    }

    fn parse_version(&mut self) -> Result<u32, GgufError> {
        let offset = self.offset();
        let version: u32 = self.read("version")?;
        if version == 0 {
            return Err(GgufError::VersionZero { offset });
        }
        // A byte-swapped small version has its low 16 bits clear.
        if version & 0xFFFF == 0 {
            return Err(GgufError::EndiannessMismatch { offset, version });
        }
        if version == 1 || version > GGUF_VERSION {
            return Err(GgufError::UnsupportedVersion { offset, version });
        }
        Ok(version)
    }

    /// Upstream only bounds counts by memory; rejecting counts the remaining bytes cannot
    /// possibly hold gives the same verdict (such files fail later upstream) but early.
    fn check_count(&self, count: i64, min_item_bytes: u64) -> Result<u64, &'static str> {
        let count = u64::try_from(count).map_err(|_| "it is negative")?;
        let needed = count.checked_mul(min_item_bytes);
        if needed.map_or(true, |needed| needed > self.remaining_in_file()) {
            return Err("the rest of the file is too short to hold that many entries");
        }
        Ok(count)
    }

    #[allow(clippy::type_complexity)]
    fn parse_kvs(
        &mut self,
        n_kv: u64,
    ) -> Result<(Vec<Kv<'a>>, HashMap<&'a [u8], usize>), GgufError> {
        let capacity = self.capacity_for(n_kv, MIN_KV_BYTES);
        let mut kvs = Vec::with_capacity(capacity);
        let mut key_index = HashMap::with_capacity(capacity);
        for index in 0..n_kv {
            let offset = self.offset();
            let key = self.read_string("key", &|| format!("key #{index}"))?;
            if key.is_empty() {
                return Err(GgufError::EmptyKey { offset, index });
            }
            if key_index.contains_key(key) {
                return Err(GgufError::DuplicateKey {
                    offset,
                    key: lossy(key),
                });
            }
            let value = self.parse_value(key)?;
            key_index.insert(key, kvs.len());
            kvs.push(Kv { key, value, offset });
        }
        Ok((kvs, key_index))
    }

    fn parse_value(&mut self, key: &[u8]) -> Result<Value<'a>, GgufError> {
        let type_offset = self.offset();
        let type_id: i32 = self.read("value type")?;
        let unknown = |type_id| GgufError::UnknownValueType {
            offset: type_offset,
            key: lossy(key),
            type_id,
        };
        let value_type = GgufValueType::from_id(type_id).ok_or_else(|| unknown(type_id))?;
        match value_type {
            GgufValueType::String => {
                let text =
                    self.read_string("string value", &|| format!("value of '{}'", lossy(key)))?;
                Ok(Value::Str(text))
            }
            GgufValueType::Array => self.parse_array(key).map(Value::Array),
            scalar => {
                let size = scalar.fixed_size().unwrap_or(0) as u64;
                let bytes = self.take(size, "value")?;
                decode_scalar(scalar, bytes).ok_or_else(|| unknown(type_id))
            }
        }
    }

    fn parse_array(&mut self, key: &[u8]) -> Result<ArrayValue<'a>, GgufError> {
        let header_offset = self.offset();
        let elem_id: i32 = self.read("array element type")?;
        let len: u64 = self.read("array length")?;
        let elem_type = match GgufValueType::from_id(elem_id) {
            Some(GgufValueType::Array) => {
                return Err(GgufError::NestedArray {
                    offset: header_offset,
                    key: lossy(key),
                })
            }
            Some(elem_type) => elem_type,
            None => {
                return Err(GgufError::UnknownValueType {
                    offset: header_offset,
                    key: lossy(key),
                    type_id: elem_id,
                })
            }
        };
        let too_long = |limit, reason| GgufError::ArrayTooLong {
            offset: header_offset,
            key: lossy(key),
            elem_type: elem_type.name(),
            len,
            limit,
            reason,
        };
        if len > GGUF_MAX_ARRAY_ELEMENTS {
            return Err(too_long(GGUF_MAX_ARRAY_ELEMENTS, "GGUF_MAX_ARRAY_ELEMENTS"));
        }
        // Strings take at least their length prefix, as upstream assumes for this check.
        let min_elem_bytes = elem_type
            .fixed_size()
            .map_or(MIN_STRING_BYTES, |n| n as u64);
        let remaining = self.remaining_in_file();
        if len * min_elem_bytes > remaining {
            return Err(too_long(
                remaining / min_elem_bytes,
                "bytes left in the file",
            ));
        }
        // len <= 2^30 elements that fit in the buffer's address space: usize is safe.
        let count = len as usize;

        if elem_type != GgufValueType::String {
            let raw = self.take(len * min_elem_bytes, "array elements")?;
            return Ok(ArrayValue::new(elem_type, count, raw, Vec::new()));
        }

        let start = self.pos;
        let mut str_starts = Vec::with_capacity(self.capacity_for(len, MIN_STRING_BYTES));
        for index in 0..len {
            let text = self.read_string("array string", &|| {
                format!("element {index} of '{}'", lossy(key))
            })?;
            // The string just read ends at the cursor.
            str_starts.push(self.pos - text.len() - start);
        }
        Ok(ArrayValue::new(
            elem_type,
            count,
            &self.bytes[start..self.pos],
            str_starts,
        ))
    }

    #[allow(clippy::type_complexity)]
    fn parse_tensor_infos(
        &mut self,
        n_tensors: u64,
    ) -> Result<(Vec<TensorInfo<'a>>, HashMap<&'a str, usize>), GgufError> {
        let capacity = self.capacity_for(n_tensors, MIN_TENSOR_INFO_BYTES);
        let mut tensors = Vec::with_capacity(capacity);
        let mut tensor_index = HashMap::with_capacity(capacity);
        for index in 0..n_tensors {
            let info = self.parse_tensor_info(index, &tensor_index)?;
            tensor_index.insert(info.name, tensors.len());
            tensors.push(info);
        }
        Ok((tensors, tensor_index))
    }

    fn parse_tensor_info(
        &mut self,
        index: u64,
        seen: &HashMap<&'a str, usize>,
    ) -> Result<TensorInfo<'a>, GgufError> {
        let offset = self.offset();
        let raw_name = self.read_string("tensor name", &|| format!("name of tensor #{index}"))?;
        if raw_name.len() >= GGML_MAX_NAME {
            return Err(GgufError::TensorNameTooLong {
                offset,
                index,
                len: raw_name.len() as u64,
            });
        }
        // Upstream copies names into a C string, so a NUL would silently truncate them.
        let name = std::str::from_utf8(raw_name)
            .ok()
            .filter(|name| !name.contains('\0'))
            .ok_or(GgufError::InvalidTensorName { offset, index })?;
        if seen.contains_key(name) {
            return Err(GgufError::DuplicateTensorName {
                offset,
                name: name.to_owned(),
            });
        }

        let n_dims: u32 = self.read("tensor dimension count")?;
        if n_dims as usize > GGML_MAX_DIMS {
            return Err(GgufError::TooManyDims {
                offset,
                name: name.to_owned(),
                n_dims,
            });
        }
        let mut ne = [1i64; 4];
        for (dim, slot) in ne.iter_mut().enumerate().take(n_dims as usize) {
            *slot = self.read("tensor dimension")?;
            if *slot < 0 {
                return Err(GgufError::NegativeDim {
                    offset,
                    name: name.to_owned(),
                    dim,
                    ne: *slot,
                });
            }
        }
        let n_elements = element_count(ne).ok_or_else(|| GgufError::ElementCountOverflow {
            offset,
            name: name.to_owned(),
            ne,
        })?;

        let type_id: i32 = self.read("tensor type")?;
        let ggml_type = GgmlType::from_id(type_id).ok_or_else(|| {
            if GgmlType::is_removed_id(type_id) {
                GgufError::RemovedTensorType {
                    offset,
                    name: name.to_owned(),
                    type_id,
                }
            } else {
                GgufError::UnknownTensorType {
                    offset,
                    name: name.to_owned(),
                    type_id,
                    count: GGML_TYPE_COUNT,
                }
            }
        })?;
        let block_size = ggml_type.block_size();
        // ne[0] >= 0 here, so the cast is exact.
        if ne[0] as u64 % block_size != 0 {
            return Err(GgufError::RowNotBlockMultiple {
                offset,
                name: name.to_owned(),
                ggml_type,
                ne0: ne[0],
                block_size,
            });
        }
        let nbytes = (n_elements / block_size)
            .checked_mul(ggml_type.type_size())
            .filter(|&n| usize::try_from(n).is_ok())
            .ok_or_else(|| GgufError::TensorSizeOverflow {
                offset,
                name: name.to_owned(),
                ggml_type,
                ne,
            })?;
        let mut nb = [0u64; 4];
        nb[0] = ggml_type.type_size();
        nb[1] = nb[0].wrapping_mul(ne[0] as u64 / block_size);
        for dim in 2..4 {
            nb[dim] = nb[dim - 1].wrapping_mul(ne[dim - 1] as u64);
        }

        let data_offset: u64 = self.read("tensor data offset")?;
        Ok(TensorInfo {
            name,
            n_dims,
            ne,
            ggml_type,
            offset: data_offset,
            nbytes,
            nb,
            info_offset: offset,
        })
    }
}

/// Upstream's element-count check: the running product, checked only against dimensions
/// above 1, must stay within `i64`. So a zero dimension after an overflowing prefix still
/// fails, exactly as upstream.
fn element_count(ne: [i64; 4]) -> Option<u64> {
    let mut count = ne[0];
    for &n in &ne[1..] {
        if n > 1 && i64::MAX / n < count {
            return None;
        }
        count *= n;
    }
    u64::try_from(count).ok()
}

/// `general.alignment` if present: a u32, non-zero power of two. Otherwise 32.
fn alignment_from(kvs: &[Kv<'_>], key_index: &HashMap<&[u8], usize>) -> Result<u32, GgufError> {
    let Some(&index) = key_index.get(GGUF_KEY_GENERAL_ALIGNMENT.as_bytes()) else {
        return Ok(GGUF_DEFAULT_ALIGNMENT);
    };
    let kv = &kvs[index];
    match kv.value {
        Value::U32(alignment) if alignment.is_power_of_two() => Ok(alignment),
        Value::U32(alignment) => Err(GgufError::BadAlignment {
            offset: kv.offset,
            alignment,
        }),
        ref other => Err(GgufError::AlignmentWrongType {
            offset: kv.offset,
            found: other.type_name(),
        }),
    }
}

/// Offsets must be exactly contiguous: each tensor starts where the previous one's padded
/// data ends. Returns the total padded size.
fn check_offsets(tensors: &[TensorInfo<'_>], alignment: u32) -> Result<u64, GgufError> {
    let mut expected = 0u64;
    for tensor in tensors {
        if tensor.offset != expected {
            return Err(GgufError::OffsetMismatch {
                offset: tensor.info_offset,
                name: tensor.name.to_owned(),
                found: tensor.offset,
                expected,
            });
        }
        expected = pad_to(tensor.nbytes, u64::from(alignment))
            .and_then(|padded| expected.checked_add(padded))
            .ok_or_else(|| GgufError::DataSizeOverflow {
                offset: tensor.info_offset,
                name: tensor.name.to_owned(),
            })?;
    }
    Ok(expected)
}

/// llama.cpp's check: every tensor's (unpadded) data must end inside the file.
fn check_data_extent(
    tensors: &[TensorInfo<'_>],
    data_offset: u64,
    file_size: u64,
) -> Result<(), GgufError> {
    for tensor in tensors.iter() {
        let end = data_offset
            .checked_add(tensor.offset)
            .and_then(|start| start.checked_add(tensor.nbytes));
        if end.map_or(true, |end| end > file_size) {
            return Err(GgufError::DataBeyondEof {
                offset: tensor.info_offset,
                name: tensor.name.to_owned(),
                end: end.unwrap_or(u64::MAX),
                file_size,
            });
        }
    }
    Ok(())
}

fn lossy(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}
