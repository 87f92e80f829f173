//! Why a model load failed ([`LoadError`]), shared by the loader's files.

use super::file::SourceFile;

/// Why a load failed: each variant carries what failed (file, tensor) and the cause; the C
/// boundary turns it into one log line (its `Display`).
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// A file could not be opened or read, or its content is not a valid model.
    #[error("{file}: {reason}")]
    File { file: String, reason: String },
    /// `llama_model_load_from_splits` was given no paths.
    #[error("list of splits is empty")]
    NoSplits,
    /// The host's `FILE *` could not be examined.
    #[error("{file}: failed to stat: {source}")]
    Stat {
        file: String,
        source: std::io::Error,
    },
    /// Two tensors of the model share a name (across all shards).
    #[error("tensor '{tensor}' is duplicated")]
    DuplicateTensor { tensor: String },
    /// A `tensor_buft_overrides` pattern is invalid.
    #[error("{0}")]
    Override(#[from] crate::device::OverrideError),
    #[error("tensor '{tensor}' in {file}: {reason}")]
    Tensor {
        file: String,
        tensor: String,
        reason: String,
    },
    #[error("cancelled model load")]
    Cancelled,
    /// The devices and layer offload asked for cannot be placed.
    #[error("{0}")]
    Placement(#[from] crate::device::PlacementError),
}

pub(super) fn file_error(source: &SourceFile, reason: impl std::fmt::Display) -> LoadError {
    LoadError::File {
        file: source.display_name(),
        reason: reason.to_string(),
    }
}
