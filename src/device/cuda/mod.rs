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
//! # Staged copies
//!
//! Large host-to-device copies go through a ring of [`staging_buffers`] page-locked host
//! buffers of [`STAGING_BYTES`] each (allocated once per device, on first use, and reused
//! under a mutex), as upstream's loader stages through pinned buffers. One thread per buffer
//! takes every n-th chunk of the upload: it waits until its buffer's last copy is done, fills
//! the buffer (`pread` for [`CudaBuffer::fill_from_file`], a copy for [`CudaBuffer::write`] of
//! a large pageable slice), and enqueues `cuMemcpyHtoDAsync` on the device's upload stream
//! with an event after it. So up to 16 threads read while the copy engine runs: one thread
//! copying from the page cache reaches a tenth of a PCIe 5 link's speed, and a pageable
//! `cuMemcpyHtoD` of a mapping about 7 GB/s (measured on an H100/H200, 2026-11-27). Reads of
//! 1 MiB or more ([`CudaBuffer::read`]) go the other way through the same ring: each thread
//! copies its chunk into its buffer with `cuMemcpyDtoHAsync`, waits for it, and copies it
//! out. A call returns once the stream is idle, also after an error. When page-locked memory
//! cannot be had, copies fall back to synchronous pageable ones.

mod buffer;
mod context;
mod driver;
mod module;
mod nvrtc;
mod ring;
mod upload;

use cudarc::driver::result::DriverError;

pub use buffer::{CudaBuffer, PinnedBuffer};
pub use context::CudaDevice;
use driver::describe;
pub use driver::{availability, probe};
pub use module::{compute_available, CudaFunction, CudaModule, KernelArg};
pub use nvrtc::{compile_ptx, nvrtc_version, NVRTC_ENV};

/// Set to disable CUDA (anything but empty or `0`).
pub const NO_CUDA_ENV: &str = "LLAMA_HOTSWAP_NO_CUDA";

/// Size of one staging buffer: the chunk of an upload that one thread reads and copies.
/// 4 MiB measured best on an H100 and an H200 (2 and 8 MiB were slower at 16 threads).
pub const STAGING_BYTES: usize = 4 << 20;

/// Number of page-locked staging buffers (and upload threads) per device: one per core, 4 to
/// 16 (64 MiB of pinned memory at most, as the 4 × 16 MiB this replaced).
pub fn staging_buffers() -> usize {
    static BUFFERS: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *BUFFERS.get_or_init(|| {
        std::thread::available_parallelism()
            .map_or(4, |n| n.get())
            .clamp(4, 16)
    })
}

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
