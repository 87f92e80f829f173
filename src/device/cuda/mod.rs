//! CUDA devices, through the CUDA driver API loaded at run time ([`cudarc`] with dynamic
//! loading): the library builds without a CUDA toolkit and runs without a driver.
//!
//! The registry registers the devices of [`probe`] as GPU devices named `CUDA0`, `CUDA1`, …
//! *before* the virtual GPUs and the CPU, as upstream registers the CUDA backend first, and
//! their `device_id` becomes the PCI bus id that upstream uses to skip duplicate GPUs.
//!
//! # Finding the driver
//!
//! cudarc panics when the driver library is missing, so this module first opens
//! `libcuda.so.1` (then `libcuda.so`) itself with `dlopen`, checks that every driver function
//! used here is exported, and only then calls `cuInit` — inside `catch_unwind`, as is every
//! later step of device setup. Any failure means "no CUDA devices": [`probe`] logs one line
//! and returns nothing, and [`availability`] says why.
//!
//! # `LLAMA_HOTSWAP_NO_CUDA`
//!
//! When set to anything but an empty string or `0`, the driver is not even looked for:
//! [`probe`] finds no devices and [`availability`] reports the variable. It is read on every
//! call, but the process-wide registry probes only once.
//!
//! # Contexts
//!
//! Each device uses its primary context (the one the CUDA runtime uses), retained by
//! [`probe`] and released when the device is dropped. Every operation pushes that context on
//! the calling thread and pops it afterwards, leaving the caller's current context as it was.
//!
//! # Uploads from files
//!
//! [`CudaBuffer::fill_from_file`] stages file bytes through a ring of [`STAGING_BUFFERS`]
//! page-locked host buffers of [`STAGING_BYTES`] each (allocated once per device, on first
//! use, and reused under a mutex), as upstream's loader does with its 4 pinned buffers. Each
//! chunk is read with `pread` into a free buffer and copied with `cuMemcpyHtoDAsync` on the
//! device's upload stream, and an event recorded after the copy marks when that buffer may be
//! refilled. One thread per buffer does this for its share of the chunks (chunks k, k + 4, …),
//! so the reads of the next chunks overlap the copy of the current one; each chunk's read is
//! itself split among up to 4 threads (a quarter of the cores each), since one thread copying
//! from the page cache reaches only a fraction of a PCIe 5 link's speed. The call returns once
//! the stream is idle, also after an error. When page-locked memory cannot be had, uploads
//! fall back to a pageable buffer and synchronous copies.

mod buffer;
mod context;
mod driver;
mod ring;
mod upload;

use cudarc::driver::result::DriverError;

pub use buffer::{CudaBuffer, PinnedBuffer};
pub use context::CudaDevice;
use driver::describe;
pub use driver::{availability, probe};

/// Set to disable CUDA (anything but empty or `0`).
pub const NO_CUDA_ENV: &str = "LLAMA_HOTSWAP_NO_CUDA";

/// Number of page-locked staging buffers per device.
pub const STAGING_BUFFERS: usize = 4;

/// Size of one staging buffer (the chunk size of uploads from files).
pub const STAGING_BYTES: usize = 16 << 20;

/// What the registry needs to know about one CUDA device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CudaDeviceInfo {
    /// The CUDA device ordinal.
    pub ordinal: u32,
    /// The device's name, e.g. "NVIDIA H100 80GB HBM3".
    pub description: String,
    /// Lower-case PCI bus id ("0000:c1:00.0"), when known.
    pub pci_bus_id: Option<String>,
    /// Total device memory in bytes.
    pub total_memory: u64,
}

/// A failed CUDA operation: what was being done (`op`, naming the device and the driver call)
/// and what went wrong (`code`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{op}: {code}")]
pub struct CudaError {
    pub op: String,
    pub code: CudaCode,
}

/// What went wrong in a [`CudaError`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CudaCode {
    /// The driver returned this `CUresult` (`text`: its name and description).
    #[error("{text}")]
    Driver { result: u32, text: String },
    /// cudarc panicked (a missing library or symbol); the panic's message.
    #[error("panicked: {0}")]
    Panicked(String),
    /// A range outside an allocation of `len` bytes.
    #[error("outside an allocation of {len} bytes")]
    OutOfRange { len: usize },
}

impl CudaError {
    /// A failed driver call.
    pub fn driver(op: impl Into<String>, error: DriverError) -> CudaError {
        CudaError {
            op: op.into(),
            code: CudaCode::Driver {
                result: error.0 as u32,
                text: describe(error),
            },
        }
    }

    /// The same error with `context` (e.g. the device's label) in front of the operation.
    pub fn on(self, context: &str) -> CudaError {
        CudaError {
            op: format!("{context}: {}", self.op),
            ..self
        }
    }
}
