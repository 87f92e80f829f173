//! CUDA devices. **Interface only for now**: [`probe`] finds no devices and every operation
//! reports that CUDA is not available. The real implementation (cudarc, loaded at run time)
//! replaces the bodies below without changing the signatures the rest of the crate uses.
//!
//! The registry registers the devices of [`probe`] as GPU devices named `CUDA0`, `CUDA1`, …
//! *before* the virtual GPUs and the CPU, as upstream registers the CUDA backend first, and
//! their `device_id` becomes the PCI bus id that upstream uses to skip duplicate GPUs.

use std::fs::File;
use std::io;
use std::sync::Arc;

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

/// One usable CUDA device (its context is created by [`probe`]).
#[derive(Debug)]
pub struct CudaDevice {
    info: CudaDeviceInfo,
}

impl CudaDevice {
    pub fn info(&self) -> &CudaDeviceInfo {
        &self.info
    }

    /// `(free, total)` bytes now, or None when the driver cannot tell.
    pub fn memory(&self) -> Option<(u64, u64)> {
        None
    }

    /// Allocates `bytes` bytes of device memory (contents unspecified).
    pub fn alloc(self: &Arc<Self>, bytes: usize) -> Result<CudaBuffer, String> {
        Err(format!(
            "CUDA is not available: cannot allocate {bytes} bytes"
        ))
    }
}

/// Device memory owned by one allocation; freed on drop.
#[derive(Debug)]
pub struct CudaBuffer {
    len: usize,
}

impl CudaBuffer {
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Copies `src` to `offset` (synchronous host-to-device copy).
    pub fn write(&mut self, offset: usize, src: &[u8]) -> Result<(), String> {
        let _ = (offset, src);
        Err("CUDA is not available".to_string())
    }

    /// Copies `dst.len()` bytes from `offset` into `dst` (synchronous device-to-host copy).
    pub fn read(&self, offset: usize, dst: &mut [u8]) -> Result<(), String> {
        let _ = (offset, dst);
        Err("CUDA is not available".to_string())
    }

    /// Reads `len` bytes of `file` at `file_offset` into the buffer at `dst_offset`, through a
    /// ring of pinned staging buffers whose asynchronous copies overlap the next read.
    pub fn fill_from_file(
        &mut self,
        file: &File,
        file_offset: u64,
        dst_offset: usize,
        len: usize,
    ) -> io::Result<()> {
        let _ = (file, file_offset, dst_offset, len);
        Err(io::Error::other("CUDA is not available"))
    }
}

/// Why CUDA cannot be used here (no driver library, no device), or Ok when it can.
pub fn availability() -> Result<(), String> {
    Err("CUDA support is not built yet".to_string())
}

/// The CUDA devices of this machine (none when the driver is missing; never panics).
pub fn probe() -> Vec<Arc<CudaDevice>> {
    Vec::new()
}
