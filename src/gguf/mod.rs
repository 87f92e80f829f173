//! GGUF reading and writing over byte slices, mirroring upstream's `ggml/src/gguf.cpp`.
//!
//! * [`types`]: the ggml tensor type table of the pinned upstream ([`GgmlType`]) and the
//!   metadata value types.
//! * [`reader`]: [`Gguf`], a zero-copy parser over `&[u8]` with every upstream validation;
//!   [`Gguf::parse`] for a whole file, [`Gguf::parse_header`] for a prefix of one.
//! * [`file`]: [`read_header`], which reads only the header of a file on disk.
//! * [`writer`]: [`GgufWriter`] and gguf-split style shard sets.
//! * [`quant`]: reference F16/BF16/Q8_0/Q4_0 conversions for building typed fixtures.
//! * `fixtures` (feature `fixtures`, on for tests, benches and examples; not in the shipped
//!   library): tiny llama-family models and corrupt files.
//!
//! Nothing here maps memory or uses `unsafe`; the loader decides how to reach tensor data.
#![forbid(unsafe_code)]

pub mod error;
pub mod file;
#[cfg(any(test, feature = "fixtures"))]
pub mod fixtures;
pub mod quant;
pub mod reader;
pub mod types;
pub mod validate;
pub mod value;
pub mod writer;

pub use error::GgufError;
pub use file::{read_header, read_header_from, GgufHeader, ReadAt};
pub use reader::{Gguf, Kv, TensorInfo};
pub use types::{GgmlType, GgufValueType, GGML_TYPE_COUNT};
pub use value::{ArrayElement, ArrayValue, Value};
pub use writer::{split_path, GgufWriteError, GgufWriter, MetaArray, MetaValue, SplitMode};
