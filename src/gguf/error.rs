//! Errors of the GGUF reader. Every variant names the byte offset in the file where the
//! offending field starts and, where there is one, the key or tensor it belongs to, so a
//! single log line says what is wrong and where.

use super::types::GgmlType;

/// Why a GGUF file (or a prefix of one) was rejected.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GgufError {
    /// Only for `Gguf::parse_header`: the prefix ended before the header did, but the file is
    /// long enough. Read at least `needed_at_least` bytes from the start and try again.
    #[error("GGUF header continues past the {available} bytes read so far; need at least {needed_at_least} bytes")]
    NeedMoreBytes {
        needed_at_least: u64,
        available: u64,
    },

    #[error("GGUF truncated at byte {offset}: reading {what} needs {needed} bytes but the file ends at byte {file_size}")]
    UnexpectedEof {
        offset: u64,
        what: &'static str,
        needed: u64,
        file_size: u64,
    },

    #[error("not a GGUF file: magic at byte 0 is {found:02x?}, expected \"GGUF\"")]
    BadMagic { offset: u64, found: [u8; 4] },

    #[error("GGUF version at byte {offset} is 0, which is invalid")]
    VersionZero { offset: u64 },

    #[error("GGUF version at byte {offset} is {version:#x}, which looks byte-swapped: the file's endianness does not match this host")]
    EndiannessMismatch { offset: u64, version: u32 },

    #[error(
        "GGUF version {version} at byte {offset} is not supported (only versions 2 and 3 are)"
    )]
    UnsupportedVersion { offset: u64, version: u32 },

    #[error("GGUF tensor count {count} at byte {offset} is impossible: {reason}")]
    BadTensorCount {
        offset: u64,
        count: i64,
        reason: &'static str,
    },

    #[error("GGUF key/value count {count} at byte {offset} is impossible: {reason}")]
    BadKvCount {
        offset: u64,
        count: i64,
        reason: &'static str,
    },

    #[error("GGUF string ({context}) at byte {offset} claims {len} bytes, more than the {limit} allowed ({reason})")]
    StringTooLong {
        offset: u64,
        context: String,
        len: u64,
        limit: u64,
        reason: &'static str,
    },

    #[error("GGUF array '{key}' at byte {offset} claims {len} elements of {elem_type}, more than {limit} ({reason})")]
    ArrayTooLong {
        offset: u64,
        key: String,
        elem_type: &'static str,
        len: u64,
        limit: u64,
        reason: &'static str,
    },

    #[error("GGUF key '{key}' at byte {offset} is an array of arrays, which GGUF does not allow")]
    NestedArray { offset: u64, key: String },

    #[error("GGUF key '{key}' at byte {offset} has unknown value type id {type_id}")]
    UnknownValueType {
        offset: u64,
        key: String,
        type_id: i32,
    },

    #[error("GGUF key #{index} at byte {offset} is empty")]
    EmptyKey { offset: u64, index: u64 },

    #[error("GGUF key '{key}' at byte {offset} appears more than once")]
    DuplicateKey { offset: u64, key: String },

    #[error("GGUF key 'general.alignment' at byte {offset} has type {found}, expected u32")]
    AlignmentWrongType { offset: u64, found: &'static str },

    #[error("GGUF alignment {alignment} at byte {offset} is not a non-zero power of two")]
    BadAlignment { offset: u64, alignment: u32 },

    #[error("GGUF tensor #{index} at byte {offset} has a {len}-byte name; names must be shorter than 64 bytes")]
    TensorNameTooLong { offset: u64, index: u64, len: u64 },

    #[error(
        "GGUF tensor #{index} at byte {offset} has a name that is not UTF-8 or contains a NUL byte"
    )]
    InvalidTensorName { offset: u64, index: u64 },

    #[error("GGUF tensor '{name}' at byte {offset} appears more than once")]
    DuplicateTensorName { offset: u64, name: String },

    #[error(
        "GGUF tensor '{name}' at byte {offset} has {n_dims} dimensions, at most 4 are allowed"
    )]
    TooManyDims {
        offset: u64,
        name: String,
        n_dims: u32,
    },

    #[error("GGUF tensor '{name}' at byte {offset}: dimension {dim} is {ne}, which is negative")]
    NegativeDim {
        offset: u64,
        name: String,
        dim: usize,
        ne: i64,
    },

    #[error(
        "GGUF tensor '{name}' at byte {offset}: shape {ne:?} has more than INT64_MAX elements"
    )]
    ElementCountOverflow {
        offset: u64,
        name: String,
        ne: [i64; 4],
    },

    #[error("GGUF tensor '{name}' at byte {offset} has ggml type id {type_id}, which is unknown (valid ids are below {count})")]
    UnknownTensorType {
        offset: u64,
        name: String,
        type_id: i32,
        count: u32,
    },

    #[error("GGUF tensor '{name}' at byte {offset} has ggml type id {type_id}, a type that was removed from ggml")]
    RemovedTensorType {
        offset: u64,
        name: String,
        type_id: i32,
    },

    #[error("GGUF tensor '{name}' at byte {offset} of type {ggml_type} has {ne0} elements per row, not a multiple of the block size {block_size}")]
    RowNotBlockMultiple {
        offset: u64,
        name: String,
        ggml_type: GgmlType,
        ne0: i64,
        block_size: u64,
    },

    #[error("GGUF tensor '{name}' at byte {offset} of type {ggml_type} with shape {ne:?} is too large to address")]
    TensorSizeOverflow {
        offset: u64,
        name: String,
        ggml_type: GgmlType,
        ne: [i64; 4],
    },

    #[error("GGUF data section would start at byte {data_offset}, past the end of the {file_size}-byte file")]
    DataOffsetBeyondEof { data_offset: u64, file_size: u64 },

    #[error(
        "GGUF tensor '{name}' (info at byte {offset}) has offset {found}, expected {expected}"
    )]
    OffsetMismatch {
        offset: u64,
        name: String,
        found: u64,
        expected: u64,
    },

    #[error("GGUF tensor '{name}' (info at byte {offset}): total data size overflows")]
    DataSizeOverflow { offset: u64, name: String },

    #[error("GGUF tensor '{name}' (info at byte {offset}) ends at byte {end}, past the end of the {file_size}-byte file")]
    DataBeyondEof {
        offset: u64,
        name: String,
        end: u64,
        file_size: u64,
    },

    #[error("GGUF header needs at least {needed} bytes, more than the limit of {limit} bytes")]
    HeaderTooLarge {
        offset: u64,
        needed: u64,
        limit: u64,
    },

    #[error("I/O error reading GGUF at byte {offset}: {source}")]
    Io {
        offset: u64,
        #[source]
        source: std::io::Error,
    },
}

impl GgufError {
    /// The byte offset in the file that the error is about.
    pub fn offset(&self) -> u64 {
        use GgufError::*;
        match self {
            NeedMoreBytes {
                needed_at_least, ..
            } => *needed_at_least,
            DataOffsetBeyondEof { data_offset, .. } => *data_offset,
            UnexpectedEof { offset, .. }
            | BadMagic { offset, .. }
            | VersionZero { offset }
            | EndiannessMismatch { offset, .. }
            | UnsupportedVersion { offset, .. }
            | BadTensorCount { offset, .. }
            | BadKvCount { offset, .. }
            | StringTooLong { offset, .. }
            | ArrayTooLong { offset, .. }
            | NestedArray { offset, .. }
            | UnknownValueType { offset, .. }
            | EmptyKey { offset, .. }
            | DuplicateKey { offset, .. }
            | AlignmentWrongType { offset, .. }
            | BadAlignment { offset, .. }
            | TensorNameTooLong { offset, .. }
            | InvalidTensorName { offset, .. }
            | DuplicateTensorName { offset, .. }
            | TooManyDims { offset, .. }
            | NegativeDim { offset, .. }
            | ElementCountOverflow { offset, .. }
            | UnknownTensorType { offset, .. }
            | RemovedTensorType { offset, .. }
            | RowNotBlockMultiple { offset, .. }
            | TensorSizeOverflow { offset, .. }
            | OffsetMismatch { offset, .. }
            | DataSizeOverflow { offset, .. }
            | DataBeyondEof { offset, .. }
            | HeaderTooLarge { offset, .. }
            | Io { offset, .. } => *offset,
        }
    }
}
