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
mod common;
mod context;
mod driver;
mod module;
mod nvrtc;
mod ring;
mod upload;

pub use buffer::{CudaBuffer, PinnedBuffer};
pub use common::{
    staging_buffers, CudaCode, CudaDeviceInfo, CudaError, NO_CUDA_ENV, STAGING_BYTES,
};
pub use context::CudaDevice;
pub use driver::{availability, probe};
pub use module::{compute_available, CudaFunction, CudaModule, KernelArg};
pub use nvrtc::{compile_ptx, nvrtc_version, NVRTC_ENV};
