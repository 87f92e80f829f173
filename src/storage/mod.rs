//! Where a tensor's bytes live and how they move, as one concern: the open model files and
//! their identity ([`file`]), file mappings and owned host arenas ([`host`]), the storage of
//! one tensor and its row splits ([`data`]), where each tensor belongs on the model's
//! devices ([`place`]), and freed buffers kept for reuse ([`pool`]). Loading fills this storage; hot-swap replaces or rewrites it; the
//! model holds it. Depends on `device` (allocations) and `gguf` (types) only.
#![deny(unsafe_code)]

pub mod data;
pub mod file;
pub mod host;
mod parallel;
pub mod place;
pub mod pool;

pub use data::{
    read_data, write_storage, RowPiece, SplitDim, SplitGeometry, TensorData, TensorLayout,
};
pub use file::{read_exact_at_parallel, FileIdentity, SourceFile};
pub use host::{HostArena, HostRange, PageStage, Replaced};
pub use parallel::{both, copy_parallel, split_point, PARALLEL_MIN};
pub use place::{Home, ModelDevices};
pub use pool::BufferPool;
